"""Stand-ins for the providers `vault login PROVIDER` has presets for (issue 35).

Each behaves as its provider documents, on 127.0.0.1, under the path ``/<real host>/<real
path>``: `vault` reaches them with TOKEN_VAULT_TEST_PRESET_ORIGIN=<this server's URL>, which
moves ``https://auth.atlassian.com/oauth/token`` to ``<server>/auth.atlassian.com/oauth/token``.

* Clients are registered by the test: ``POST /stand-in/clients`` with ``provider`` (atlassian,
  github, google, microsoft, gitlab), ``client_id``, optional ``client_secret`` (then required at
  the token endpoint, in the body), optional ``redirect_uri`` (then the authorization endpoint
  accepts exactly that URI and shows an error page, no redirect, for any other: Atlassian's
  "Redirect URI Error"), ``github_app=1`` (GitHub App: expiring user tokens with rotating refresh
  tokens; else an OAuth App: tokens that never expire, no refresh token) and ``slow_down=N`` (the
  first N device polls answer ``slow_down``).
* The authorization endpoint checks the request and shows a consent page (an HTML form); the
  test's scripted browser posts it to ``/<host>/consent`` with ``user`` and ``approve=yes|no`` and
  follows the redirect to vault's loopback listener. Atlassian: ``audience=api.atlassian.com`` is
  required (redirected with ``error=invalid_request`` otherwise) and a refresh token comes only
  with ``offline_access`` in the scope. Google: only with ``access_type=offline``. Microsoft:
  only with ``offline_access``.
* Token endpoints: the code grant (PKCE S256 checked when a challenge was sent), the refresh
  grant with rotation (a spent refresh token: ``invalid_grant``), and the device grant.
  GitHub answers every token request with HTTP 200, form-encoded (``access_token=...&scope=...``)
  unless the request has ``Accept: application/json``, errors included, as GitHub documents.
* Device flow (GitHub, Microsoft, Google): ``POST`` the device endpoint, approve with ``POST
  /stand-in/device`` (``user_code``, ``user``), poll the token endpoint.
* ``GET /stand-in/whoami`` (Bearer) names the user and client of a live access token;
  ``GET /stand-in/stats?client_id=`` gives counts and the last authorization request's
  parameters. No token value is ever logged or reported.
"""

import base64
import hashlib
import hmac
import html
import threading
import time
import uuid
from urllib.parse import urlencode, urlparse

from flask import jsonify, request

LOCK = threading.RLock()
CLIENTS = {}
CODES = {}
ACCESS = {}
REFRESH = {}
DEVICE = {}
STATS = {}

# (provider, role) for each stand-in path; Microsoft's tenant is any one path segment.
ROUTES = [
    ("auth.atlassian.com/authorize", "atlassian", "authorize"),
    ("auth.atlassian.com/oauth/token", "atlassian", "token"),
    ("github.com/login/oauth/authorize", "github", "authorize"),
    ("github.com/login/oauth/access_token", "github", "token"),
    ("github.com/login/device/code", "github", "device"),
    ("accounts.google.com/o/oauth2/v2/auth", "google", "authorize"),
    ("oauth2.googleapis.com/token", "google", "token"),
    ("oauth2.googleapis.com/device/code", "google", "device"),
    ("oauth2.googleapis.com/revoke", "google", "revoke"),
    ("gitlab.com/oauth/authorize", "gitlab", "authorize"),
    ("gitlab.com/oauth/token", "gitlab", "token"),
    ("gitlab.com/oauth/revoke", "gitlab", "revoke"),
]


def route_for(path):
    for prefix, provider, role in ROUTES:
        if path == prefix:
            return provider, role
    parts = path.split("/")
    if len(parts) == 5 and parts[0] == "login.microsoftonline.com" and parts[2:4] == ["oauth2", "v2.0"]:
        return "microsoft", {"authorize": "authorize", "token": "token", "devicecode": "device"}.get(parts[4])
    return None, None


def stats(client_id):
    return STATS.setdefault(
        client_id,
        {
            "authorization_requests": 0,
            "refused_redirects": 0,
            "codes_issued": 0,
            "tokens_issued": 0,
            "refreshes": 0,
            "refresh_rejected": 0,
            "device_polls": 0,
            "slow_downs": 0,
            "form_answers": 0,
            "json_answers": 0,
            "last_authorization": {},
            "last_device_authorization": {},
        },
    )


def error_page(title, text, status=400):
    body = f"<!doctype html><title>{html.escape(title)}</title><h1>{html.escape(title)}</h1><p>{html.escape(text)}</p>"
    return body, status, {"Content-Type": "text/html; charset=utf-8"}


def redirect_with(uri, **fields):
    separator = "&" if urlparse(uri).query else "?"
    return "", 302, {"Location": uri + separator + urlencode({k: v for k, v in fields.items() if v is not None})}


def register(app):
    @app.post("/stand-in/clients")
    def standin_register():
        form = request.form
        client_id = form.get("client_id", "")
        if not client_id or form.get("provider") not in ("atlassian", "github", "google", "microsoft", "gitlab"):
            return jsonify(error="need client_id and a known provider"), 400
        with LOCK:
            CLIENTS[client_id] = {
                "provider": form["provider"],
                "secret": form.get("client_secret") or None,
                "redirect_uri": form.get("redirect_uri") or None,
                "github_app": form.get("github_app") == "1",
                "slow_down": int(form.get("slow_down", "0")),
            }
            stats(client_id)
        return jsonify(ok=True)

    @app.get("/stand-in/stats")
    def standin_stats():
        with LOCK:
            return jsonify(stats(request.args.get("client_id", "")))

    @app.get("/stand-in/whoami")
    def standin_whoami():
        scheme, _, value = request.headers.get("Authorization", "").partition(" ")
        with LOCK:
            token = ACCESS.get(value) if scheme.lower() == "bearer" else None
            if token is None or (token["expires_at"] is not None and time.time() >= token["expires_at"]):
                return jsonify(error="invalid_token"), 401
            return jsonify(user=token["user"], client_id=token["client_id"], scope=token["scope"])

    @app.post("/stand-in/device")
    def standin_device_approve():
        user_code = request.form.get("user_code", "").strip().upper()
        with LOCK:
            entry = next((d for d in DEVICE.values() if d["user_code"] == user_code), None)
            if entry is None or not request.form.get("user"):
                return jsonify(error="unknown user code or no user"), 400
            entry["user"] = request.form["user"]
            entry["approved"] = request.form.get("approve", "yes") == "yes"
            entry["decided"] = True
        return jsonify(ok=True)

    @app.route("/<path:path>", methods=["GET", "POST"])
    def standin(path):
        provider, role = route_for(path)
        if path.endswith("/consent") and request.method == "POST":
            return consent()
        if provider is None or role is None:
            return jsonify(error="not_found"), 404
        if role == "authorize" and request.method == "GET":
            return authorize(provider)
        if role == "token" and request.method == "POST":
            return token(provider)
        if role == "device" and request.method == "POST":
            return device(provider, path)
        if role == "revoke" and request.method == "POST":
            return revoke()
        return jsonify(error="method_not_allowed"), 405


def authorize(provider):
    args = request.args
    client_id = args.get("client_id", "")
    redirect_uri = args.get("redirect_uri", "")
    with LOCK:
        client = CLIENTS.get(client_id)
        if client is None or client["provider"] != provider:
            return error_page("Unknown client", "This client is not registered.")
        counters = stats(client_id)
        counters["authorization_requests"] += 1
        counters["last_authorization"] = {
            k: v for k, v in args.items() if k not in ("state", "code_challenge", "redirect_uri")
        }
        parsed = urlparse(redirect_uri)
        if client["redirect_uri"] is not None:
            accepted = redirect_uri == client["redirect_uri"]
        else:
            # RFC 8252 §7.3: any port on the loopback address.
            accepted = parsed.scheme == "http" and parsed.hostname in ("127.0.0.1", "localhost")
        if not accepted:
            # The provider's own error page; it never redirects to a URI it does not know.
            counters["refused_redirects"] += 1
            return error_page("Redirect URI Error", "The redirect_uri does not match the callback URL registered for this app.")
    state = args.get("state")
    if args.get("response_type") != "code":
        return redirect_with(redirect_uri, error="unsupported_response_type", state=state)
    if provider == "atlassian" and args.get("audience") != "api.atlassian.com":
        return redirect_with(
            redirect_uri, error="invalid_request", error_description="audience is required: api.atlassian.com", state=state
        )
    fields = "".join(
        f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">' for k, v in args.items()
    )
    host = request.path.strip("/").split("/")[0]
    page = (
        f"<!doctype html><title>Authorize</title><form method=post action=\"/{host}/consent\">{fields}"
        "<label>User <input name=user></label><button name=approve value=yes>Accept</button>"
        "<button name=approve value=no>Cancel</button></form>"
    )
    return page, 200, {"Content-Type": "text/html; charset=utf-8"}


def consent():
    form = request.form
    client_id = form.get("client_id", "")
    redirect_uri = form.get("redirect_uri", "")
    state = form.get("state")
    with LOCK:
        client = CLIENTS.get(client_id)
        if client is None:
            return error_page("Unknown client", "This client is not registered.")
        if form.get("approve") != "yes" or not form.get("user"):
            return redirect_with(redirect_uri, error="access_denied", error_description="The user did not consent.", state=state)
        code = uuid.uuid4().hex
        CODES[code] = {
            "client_id": client_id,
            "redirect_uri": redirect_uri,
            "user": form["user"],
            "scope": form.get("scope", ""),
            "challenge": form.get("code_challenge"),
            "offline": form.get("access_type") == "offline",
            "expires_at": time.time() + 120,
        }
        stats(client_id)["codes_issued"] += 1
    return redirect_with(redirect_uri, code=code, state=state)


def token_fields():
    if (request.mimetype or "") == "application/json":
        return {k: str(v) for k, v in (request.get_json(silent=True) or {}).items()}
    fields = dict(request.form)
    header = request.headers.get("Authorization", "")
    if header.lower().startswith("basic "):
        decoded = base64.b64decode(header[6:]).decode()
        name, _, secret = decoded.partition(":")
        fields.setdefault("client_id", name)
        fields["client_secret"] = secret
    return fields


def answer(provider, body, status=200):
    """GitHub: HTTP 200 always, form-encoded unless JSON is asked for. Others: JSON."""
    client_id = request.form.get("client_id", "")
    with LOCK:
        counters = stats(client_id) if client_id in CLIENTS else None
    if provider == "github":
        wants_json = "application/json" in request.headers.get("Accept", "")
        if counters is not None:
            counters["json_answers" if wants_json else "form_answers"] += 1
        if wants_json:
            return jsonify(body), 200
        return urlencode(body), 200, {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"}
    return jsonify(body), status


def issue(provider, client_id, user, scope, refresh_allowed, previous=None):
    client = CLIENTS[client_id]
    access = "standin-at-" + uuid.uuid4().hex
    body = {"access_token": access, "token_type": "bearer" if provider == "github" else "Bearer", "scope": scope}
    expires_in = None
    if provider == "github" and not client["github_app"]:
        refresh_allowed = False  # OAuth Apps: the token never expires and has no refresh token
    else:
        expires_in = 28800 if provider == "github" else 3600
        body["expires_in"] = expires_in
    if refresh_allowed:
        refresh = "standin-rt-" + uuid.uuid4().hex
        REFRESH[refresh] = {"client_id": client_id, "user": user, "scope": scope, "spent": False}
        body["refresh_token"] = refresh
        if provider == "github":
            body["refresh_token_expires_in"] = 15897600
    ACCESS[access] = {
        "user": user, "client_id": client_id, "scope": scope,
        "expires_at": None if expires_in is None else time.time() + expires_in,
    }
    stats(client_id)["tokens_issued"] += 1
    return body


def token(provider):
    fields = token_fields()
    client_id = fields.get("client_id", "")
    with LOCK:
        client = CLIENTS.get(client_id)
        if client is None or client["provider"] != provider:
            return answer(provider, {"error": "invalid_client", "error_description": "unknown client"}, 401)
        if client["secret"] is not None:
            given = fields.get("client_secret", "")
            if not hmac.compare_digest(given.encode(), client["secret"].encode()):
                return answer(provider, {"error": "invalid_client", "error_description": "bad client secret"}, 401)
        grant = fields.get("grant_type")
        if grant == "authorization_code":
            code = CODES.pop(fields.get("code", ""), None)
            if code is None or code["client_id"] != client_id or time.time() > code["expires_at"]:
                return answer(provider, {"error": "invalid_grant", "error_description": "bad code"}, 400)
            if fields.get("redirect_uri") != code["redirect_uri"]:
                return answer(provider, {"error": "invalid_grant", "error_description": "redirect_uri mismatch"}, 400)
            if code["challenge"]:
                digest = hashlib.sha256(fields.get("code_verifier", "").encode()).digest()
                if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != code["challenge"]:
                    return answer(provider, {"error": "invalid_grant", "error_description": "PKCE verification failed"}, 400)
            scopes = code["scope"].split()
            refresh_allowed = {
                "atlassian": "offline_access" in scopes,
                "microsoft": "offline_access" in scopes,
                "google": code["offline"],
            }.get(provider, True)
            return answer(provider, issue(provider, client_id, code["user"], code["scope"], refresh_allowed))
        if grant == "refresh_token":
            stats(client_id)["refreshes"] += 1
            previous = REFRESH.get(fields.get("refresh_token", ""))
            if previous is None or previous["client_id"] != client_id or previous["spent"]:
                stats(client_id)["refresh_rejected"] += 1
                status = 403 if provider == "atlassian" else 400
                return answer(provider, {"error": "invalid_grant", "error_description": "Unknown or invalid refresh token."}, status)
            previous["spent"] = True  # rotation: every refresh spends the refresh token it presents
            return answer(provider, issue(provider, client_id, previous["user"], previous["scope"], True))
        if grant == "urn:ietf:params:oauth:grant-type:device_code":
            entry = DEVICE.get(fields.get("device_code", ""))
            if entry is None or entry["client_id"] != client_id:
                return answer(provider, {"error": "invalid_grant", "error_description": "unknown device code"}, 400)
            stats(client_id)["device_polls"] += 1
            if entry["slow_down"] > 0:
                entry["slow_down"] -= 1
                entry["interval"] += 5
                stats(client_id)["slow_downs"] += 1
                return answer(provider, {"error": "slow_down", "interval": entry["interval"]}, 400)
            if not entry["decided"]:
                return answer(provider, {"error": "authorization_pending"}, 400)
            del DEVICE[fields["device_code"]]
            if not entry["approved"]:
                return answer(provider, {"error": "access_denied"}, 400)
            scopes = entry["scope"].split()
            refresh_allowed = provider != "microsoft" or "offline_access" in scopes
            return answer(provider, issue(provider, client_id, entry["user"], entry["scope"], refresh_allowed))
        return answer(provider, {"error": "unsupported_grant_type"}, 400)


def device(provider, path):
    fields = token_fields()
    client_id = fields.get("client_id", "")
    with LOCK:
        client = CLIENTS.get(client_id)
        if client is None or client["provider"] != provider:
            return answer(provider, {"error": "invalid_client"}, 401)
        stats(client_id)["last_device_authorization"] = {
            k: v for k, v in fields.items() if k not in ("client_secret",)
        }
        device_code = uuid.uuid4().hex
        user_code = uuid.uuid4().hex[:4].upper() + "-" + uuid.uuid4().hex[:4].upper()
        DEVICE[device_code] = {
            "client_id": client_id, "user_code": user_code, "scope": fields.get("scope", ""), "decided": False,
            "approved": False, "user": None, "slow_down": client["slow_down"], "interval": 1,
        }
    host = path.split("/")[0]
    body = {
        "device_code": device_code, "user_code": user_code,
        "verification_uri": request.host_url.rstrip("/") + "/" + host + "/login/device",
        "expires_in": 900, "interval": 1,
    }
    return answer(provider, body)


def revoke():
    value = request.form.get("token", "")
    with LOCK:
        ACCESS.pop(value, None)
        if value in REFRESH:
            REFRESH[value]["spent"] = True
    return "", 200
