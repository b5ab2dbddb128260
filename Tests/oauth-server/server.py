#!/usr/bin/env python3
"""A small, real OAuth 2.0 authorization server for TokenVault's refresh tests.

Built on authlib's Flask integration. It is a test fixture, not a product: state lives in
memory and every client is public. What it does, and what the tests rely on:

* Listens on 127.0.0.1 (or --host) on a free port and writes that port to --port-file once bound (or prints
  it, --print-port). With --tls-cert and --tls-key it serves https, and with --client-ca it
  requires a client certificate from that CA (mutual TLS, Python's ssl with CERT_REQUIRED).
* Issues bearer tokens whose ``expires_in`` is a few seconds (--expires-in, default 5).
* Rotates refresh tokens: every refresh returns a new refresh token and spends the old one.
* Detects reuse: presenting a spent refresh token revokes the whole token family (every
  access and refresh token descended from the same login) and answers ``invalid_grant``.
* Counts refresh requests per user and reports them at ``GET /stats?user=NAME``.
* Grants: ``password`` (how the tests log a fresh user in; any user name, password
  ``test-password``), ``refresh_token``, and the device authorization grant (RFC 8628) with
  its device authorization endpoint at ``POST /device_authorization`` and a verification
  page at ``/device`` where the "user" approves a user code (the tests post to it).
* ``GET /api/data`` is a resource server that checks tokens by introspection against this
  server's own token store (the same answer as ``POST /introspect``, RFC 7662): 200 with the user
  and a running item number for an active access token, else 401 with ``WWW-Authenticate: Bearer
  error="invalid_token"``. Per user (``POST /faults``): ``kind=resource_reject`` (with ``count``)
  refuses that many of the user's next requests although the token is active (a token the
  resource server rejects once); ``kind=resource_expire_after`` with ``uses=N`` lets the user's
  current access token serve N more requests, then expires it at the server before its
  ``expires_in`` (a token that expires mid-run, without waiting for the clock). /stats counts
  ``resource_requests`` and ``resource_rejected``. ``kind=lifetime`` with ``seconds`` gives the
  tokens issued to the user from then on that ``expires_in`` instead of --expires-in.
* ``GET /api/me`` is a protected resource: it answers 200 with the user name for a live
  access token and 401 for an unknown, expired or revoked one. ``GET /api/held/ID`` answers the
  same, but only after the test posts to ``/api/held/ID/release``; ``GET /api/held/ID/arrived``
  answers once that request has arrived (so a test can look at the waiting client).
* A confidential client, ``tokenvault-confidential``, authenticates with client_secret_basic or
  client_secret_post (its secret is CONFIDENTIAL_SECRET); a wrong secret gets ``invalid_client``.
* The authorization code grant with PKCE (S256 required) at ``GET /authorize``, for loopback
  redirect URIs ``http://127.0.0.1:<any port>/callback`` (RFC 8252 §7.3). The test plays the
  browser: it adds ``user=NAME`` (and ``deny=1`` to refuse) to the URL the client built, and
  follows the redirect.
* Test-controlled behaviour, per user, for that user's refresh requests (``POST /faults``):
  ``kind=status500|status503|status429|html|hang|hostile_error`` with ``count`` (how many requests it hits)
  and ``retry_after`` (seconds, for 429/503); ``kind=no_rotation`` makes refreshes keep the
  refresh token; ``kind=reuse_interval`` with ``seconds`` (default 10) gives the user a reuse
  interval: a spent refresh token presented again within that many seconds of its rotation is
  accepted (counted as ``reused_within_interval``) instead of revoking the family. A ``hang``
  holds the request without answering (for ``hang_seconds``, default 30) and then drops it;
  ``silent`` accepts the request and never answers it (until the server stops). Device codes
  (``POST /device/control``): ``slow_down_next=1`` answers the next poll with ``slow_down``,
  ``rate_limit=off`` stops answering fast polls with ``slow_down``, ``expire=1`` expires the code
  now. ``hostile_error`` answers ``invalid_client`` with an ``error_description`` full of terminal
  escapes, and ``POST /hostile/device_authorization`` hands out a user code holding U+009B and a
  bidi override.
* Faults that let the request through (it is counted, rotated and answered as usual):
  ``kind=hold`` holds the user's next refresh request before it is handled, until the test posts
  ``POST /release`` with ``user`` (or 60 s pass); ``/stats`` reports ``held`` (requests being held
  now), so a test knows a request is in flight without sleeping. ``kind=bad_expires_in``,
  ``bad_refresh_expiry`` and ``tab_id_token`` rotate as usual and then spoil one field of the 200
  answer (``expires_in: -1``, ``refresh_token_expires_in: -5``, an ``id_token`` with a tab).
* RFC 7009 revocation at ``POST /revoke`` (every client authentication method): revoking a
  refresh token revokes its whole token family, revoking an access token that token alone.
  Faults for a user's revocation requests: ``kind=revoke_error`` answers ``invalid_request``
  (HTTP 400), ``kind=revoke_silent`` never answers. /stats counts ``revocations`` (taken) and
  ``revocation_requests``.
* Discovery: ``/.well-known/openid-configuration`` and ``/.well-known/oauth-authorization-server``
  for the server's own issuer, and per tenant issuer ``/tenants/NAME`` (OpenID style under the
  issuer, RFC 8414 style inserted after ``/.well-known/oauth-authorization-server``). A tenant
  named ``mixup-*`` names another issuer in its document; ``oauth-only-*`` has only the RFC 8414
  document. ``GET /discovery/stats?path=...`` counts the requests for one document path.
* OpenID Connect ID tokens (idtokens.py): a token answer whose scope holds ``openid`` carries an
  ``id_token`` signed with RS256 or ES256 (keys at ``/jwks``), with the authorization request's
  ``nonce``; ``/idtoken/control`` spoils the next one and ``/idtoken/rotate`` rotates the keys.
* /stats also counts the refresh requests that a fault answered (``faults_served``), the
  device polls per user code (``GET /device/stats?user_code=``), and gives the arrival times of a
  user's refresh requests (``refresh_times``), so tests can check back-off server-side.
* DPoP (RFC 9449; the checks are in dpop.py, the JOSE work is joserfc's on cryptography, nothing
  hand-written). Discovery documents (own issuer and tenants) list
  ``dpop_signing_alg_values_supported: ["ES256", "EdDSA"]``.

  - Proofs. A proof is one ``DPoP`` header (two or more are refused) holding a compact JWS with
    ``typ`` ``dpop+jwt``, ``alg`` ES256 (a P-256 ``jwk``) or EdDSA (an Ed25519 ``jwk``), never
    none/HS*/RS*; its ``jwk`` header is a public key (a private member such as ``d`` is refused) and
    the signature verifies with it; ``htm`` is the request's method; ``htu`` is the URL the client
    used, compared on scheme, host, port (default ports filled in) and path, query and fragment
    ignored; ``iat`` within 60 s of the server's clock either way; ``jti`` a non-empty string not seen
    before (the replay cache keeps a jti until its iat is out of the window, then forgets it; one
    cache for the token endpoint and the resources); at a resource, ``ath`` is base64url(SHA-256(the
    ASCII access token)), unpadded. A nonce, when the user must use one, is checked after the
    signature and claims (so a bad proof is ``invalid_dpop_proof`` even without a nonce), and the
    jti is recorded only when every check passed.
  - Token endpoint, every grant (password, refresh_token, authorization_code, device_code): a
    request with a ``DPoP`` header has its proof checked. A bad proof: 400
    ``{"error": "invalid_dpop_proof", "error_description": "<fixed sentence, no token values>"}``.
    A good one: the answer has ``token_type: "DPoP"`` and the token family (every access and
    refresh token descended from that grant) is bound to the key's RFC 7638 SHA-256 thumbprint
    (base64url, no padding), from then on. A refresh of a bound family needs a valid proof by the
    same key; without one, or with another key's, it is 400 ``invalid_dpop_proof`` and nothing is
    spent, rotated or revoked (authlib never sees the request). A refresh of an unbound family with
    a proof binds the family from then on. Without a ``DPoP`` header and an unbound grant,
    everything is as before (Bearer). Requests refused or challenged for DPoP are counted in the
    ``dpop_*`` counters only (not in refresh_requests/refresh_rejected).
  - Nonces. ``POST /faults`` with ``kind=dpop_nonce`` makes the server require its nonce in that
    user's proofs from then on, at the token endpoint (the user of a password grant is the form's
    ``username``; of a refresh the refresh token's; of a code or device code its record's) and at
    the resources. One server-wide nonce, replaced every 300 s (dpop.NONCE_LIFETIME) and at once by
    ``kind=dpop_nonce_rotate`` (any user; for tests of a stale nonce); only the current one is
    accepted. A missing or stale nonce: the token endpoint answers 400 ``{"error": "use_dpop_nonce",
    "error_description": ...}`` with ``DPoP-Nonce: <nonce>``; a resource answers 401 with
    ``WWW-Authenticate: DPoP error="use_dpop_nonce"`` and ``DPoP-Nonce``. Every answer to such a
    user's DPoP request (successes and refusals) carries the current ``DPoP-Nonce``.
  - Resources ``GET /api/me`` and ``GET /api/data`` (and ``/api/held/ID``): a bound access token
    must come as ``Authorization: DPoP <token>`` with a proof (``htm`` GET, ``htu`` the resource
    URL, ``ath``, the token's key, a new jti). Refusals are 401: ``WWW-Authenticate: DPoP
    error="invalid_token"`` for a bound token sent as Bearer, a proof by another key, an unbound
    token sent as DPoP, or an unknown/expired/revoked token sent as DPoP; ``DPoP
    error="invalid_dpop_proof"`` for a missing, malformed or replayed proof or a wrong
    htm/htu/iat/ath. Bearer requests with unbound tokens, the Bearer challenge and the
    resource_reject/resource_expire_after faults are as before. At /api/data a request refused for
    DPoP is not counted in resource_requests/resource_rejected (a bound token that passed its proof
    is, as a Bearer one is). ``POST /introspect`` of a bound token says ``token_type: "DPoP"`` and
    ``cnf: {"jkt": ...}``.
  - ``/stats?user=NAME`` adds ``dpop_token_requests`` (token requests with a DPoP header),
    ``dpop_nonce_challenges`` (``use_dpop_nonce`` answers, token endpoint and resources),
    ``dpop_proofs_refused`` (every refusal for DPoP: bad, missing or replayed proof, another key,
    bound token as Bearer), ``dpop_resource_requests`` (resource requests with the DPoP scheme),
    ``dpop_resource_verify_seconds`` (the time the resources spent verifying those proofs: the check,
    the key's binding and the jti recorded, so that a benchmark can tell this server's Python
    verification from the client's cost), ``dpop_resource_verify_cpu_seconds`` (the CPU time of the
    same, the handling thread's: on a loaded machine the wall time counts the neighbours too) and
    ``dpop_jkt`` (the thumbprint of the user's latest bound family, a public value; null if none).

``GET /history?user=NAME`` (history.py) lists the user's password and refresh requests with
fingerprints of the tokens presented and issued, and where each came from (Scripts/fleet).

It never logs token values or proofs: request logging is off, and /stats reports only counts.
"""

import argparse
import hmac
import json
import logging
import os
import signal
import sys
import threading
import time
import uuid
from urllib.parse import urlparse

from authlib.integrations.flask_oauth2 import AuthorizationServer
from authlib.oauth2.rfc6749 import AuthorizationCodeMixin, ClientMixin, TokenMixin, grants
from authlib.oauth2.rfc7009 import RevocationEndpoint
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oauth2.rfc8628 import (
    DEVICE_CODE_GRANT_TYPE,
    DeviceAuthorizationEndpoint,
    DeviceCodeGrant,
    DeviceCredentialDict,
)
from flask import Flask, g, jsonify, request
from werkzeug.serving import make_server

import dpop
import history
import idtokens  # signed ID tokens, /jwks and their faults (issue 31 point 6)
import providers

TEST_PASSWORD = "test-password"
PUBLIC_CLIENT_ID = "tokenvault-example"
CONFIDENTIAL_CLIENT_ID = "tokenvault-confidential"
CONFIDENTIAL_SECRET = "tv-confidential-secret-8d1f0c2b"
# Faults after which the request is handled as usual (held first, or its answer spoiled after).
PASS_THROUGH_FAULTS = ("hold", "bad_expires_in", "bad_refresh_expiry", "tab_id_token")
GRANT_TYPES = ["password", "refresh_token", DEVICE_CODE_GRANT_TYPE, "authorization_code"]
AUTH_METHODS = ["none", "client_secret_basic", "client_secret_post"]

# One lock around all state. Token requests are handled one at a time, so reuse detection and
# the counters are exact even when many clients refresh at once.
STATE_LOCK = threading.RLock()
# Set when the server is told to stop, so that requests held without an answer let go.
STOPPING = threading.Event()

# What a hostile server says: OSC 52 (set the clipboard) ended by BEL, the 8-bit CSI U+009B, a
# right-to-left override, and a C0 escape starting a colour sequence.
HOSTILE_TEXT = "\x1b]52;c;aGFja2Vk\x07 then \u009b2J and \u202eevil\x1b[31m red"


class Client(ClientMixin):
    def __init__(self, client_id):
        self.client_id = client_id

    def get_client_id(self):
        return self.client_id

    def get_default_redirect_uri(self):
        return None

    def get_allowed_scope(self, scope):
        return scope or ""

    def check_redirect_uri(self, redirect_uri):
        # RFC 8252 §7.3: any port on the loopback address.
        parsed = urlparse(redirect_uri or "")
        return parsed.scheme == "http" and parsed.hostname == "127.0.0.1" and parsed.path == "/callback"

    def check_client_secret(self, client_secret):
        return self.client_id == CONFIDENTIAL_CLIENT_ID and hmac.compare_digest(client_secret, CONFIDENTIAL_SECRET)

    def check_endpoint_auth_method(self, method, endpoint):
        if self.client_id == CONFIDENTIAL_CLIENT_ID:
            return method in ("client_secret_basic", "client_secret_post")
        return method == "none"

    def check_response_type(self, response_type):
        return response_type == "code"

    def check_grant_type(self, grant_type):
        return grant_type in GRANT_TYPES


class Token(TokenMixin):
    def __init__(self, fields, user, client_id, family):
        self.access_token = fields["access_token"]
        self.refresh_token = fields.get("refresh_token")
        self.scope = fields.get("scope", "")
        self.expires_in = int(fields["expires_in"])
        self.issued_at = time.time()
        self.user = user
        self.client_id = client_id
        self.family = family
        self.refresh_spent = False
        # Set when this access token alone was revoked (RFC 7009 with token_type_hint=access_token).
        self.access_revoked = False
        # Set when a resource_expire_after fault ended this access token early.
        self.access_expired = False
        self.spent_at = None
        # The RFC 7638 thumbprint of the DPoP key this token (its family) is bound to, or None.
        self.jkt = None

    def check_client(self, client):
        return client.get_client_id() == self.client_id

    def get_scope(self):
        return self.scope

    def get_expires_in(self):
        return self.expires_in

    def is_expired(self):
        return time.time() >= self.issued_at + self.expires_in

    def is_revoked(self):
        return STATE.families[self.family]["revoked"]

    def get_user(self):
        return self.user

    def get_client(self):
        return Client(self.client_id)


class State:
    def __init__(self):
        self.by_access = {}
        self.by_refresh = {}
        # family id -> {"user": name, "revoked": bool}
        self.families = {}
        # user name -> counters
        self.stats = {}
        # device code -> DeviceCredentialDict, user code -> (user, approved)
        self.device_codes = {}
        self.user_grants = {}
        # user name -> list of pending faults [{"kind", "retry_after", "hang_seconds"}], flags
        self.faults = {}
        # user name -> (threading.Event, count) of refresh requests held by a "hold" fault
        self.holds = {}
        self.no_rotation = set()
        # user name -> seconds during which a spent refresh token is still accepted
        self.reuse_interval = {}
        self.refresh_times = {}
        # authorization code -> AuthorizationCode
        self.codes = {}
        # user code -> polls seen, kept after the device code is used
        self.device_polls = {}
        # discovery document path -> requests served
        self.discovery_requests = {}
        # hold id -> {"arrived": Event, "release": Event} (/api/held)
        self.held = {}
        # user name -> {"reject": n, "expire_after": n or None} (/api/data faults)
        self.resource_faults = {}
        # user name -> expires_in of the access tokens issued to the user from now on
        self.lifetimes = {}
        # users whose token and resource requests must carry the server's DPoP nonce
        self.dpop_nonce_users = set()
        # user name -> thumbprint of the DPoP key of the user's latest bound token family
        self.dpop_jkt = {}

    def counters(self, user):
        return self.stats.setdefault(
            user,
            {
                "refresh_requests": 0,
                "refresh_succeeded": 0,
                "refresh_rejected": 0,
                "reuse_detected": 0,
                "families_revoked": 0,
                "tokens_issued": 0,
                "device_authorizations": 0,
                "device_polls": 0,
                "faults_served": 0,
                "codes_issued": 0,
                "revocations": 0,
                "revocation_requests": 0,
                "reused_within_interval": 0,
                "resource_requests": 0,
                "resource_rejected": 0,
                "dpop_token_requests": 0,
                "dpop_nonce_challenges": 0,
                "dpop_proofs_refused": 0,
                "dpop_resource_requests": 0,
                "dpop_resource_verify_seconds": 0.0,
                "dpop_resource_verify_cpu_seconds": 0.0,
            },
        )

    def revoke_family(self, family):
        record = self.families[family]
        if not record["revoked"]:
            record["revoked"] = True
            self.counters(record["user"])["families_revoked"] += 1


STATE = State()
DPOP = dpop.Verifier()


def query_client(client_id):
    if client_id in (PUBLIC_CLIENT_ID, CONFIDENTIAL_CLIENT_ID):
        return Client(client_id)
    return None


def user_of_refresh_token(value):
    with STATE_LOCK:
        token = STATE.by_refresh.get(value or "")
        return token.user if token is not None else None


def save_token(fields, oauth_request):
    with STATE_LOCK:
        user = oauth_request.user
        previous = oauth_request.refresh_token  # the Token being rotated, for the refresh grant
        if previous is not None:
            family = previous.family
        else:
            family = uuid.uuid4().hex
            STATE.families[family] = {"user": user, "revoked": False, "jkt": None}
        if user in STATE.lifetimes:
            # The same dict is the response's body: the client is told this lifetime too.
            fields["expires_in"] = STATE.lifetimes[user]
        # A token request with a valid DPoP proof (checked in handle_token) binds the family to the key.
        jkt = g.get("dpop_jkt")
        if jkt is not None:
            STATE.families[family]["jkt"] = jkt
            STATE.dpop_jkt[user] = jkt
            fields["token_type"] = "DPoP"
        if "openid" in (fields.get("scope") or "").split():
            # OpenID Connect: an ID token, with the nonce the authorization request sent (idtokens.py).
            code = getattr(oauth_request, "authorization_code", None)
            fields["id_token"] = idtokens.issue(
                request.host_url.rstrip("/"), oauth_request.client.get_client_id(), user, getattr(code, "nonce", None))
        token = Token(fields, user, oauth_request.client.get_client_id(), family)
        token.jkt = STATE.families[family]["jkt"]
        STATE.by_access[token.access_token] = token
        if token.refresh_token:
            STATE.by_refresh[token.refresh_token] = token
        STATE.counters(user)["tokens_issued"] += 1


class PasswordGrant(grants.ResourceOwnerPasswordCredentialsGrant):
    TOKEN_ENDPOINT_AUTH_METHODS = AUTH_METHODS

    def authenticate_user(self, username, password):
        if username and password == TEST_PASSWORD:
            return username
        return None


class RotatingRefreshTokenGrant(grants.RefreshTokenGrant):
    TOKEN_ENDPOINT_AUTH_METHODS = AUTH_METHODS
    INCLUDE_NEW_REFRESH_TOKEN = True

    def authenticate_refresh_token(self, refresh_token):
        token = STATE.by_refresh.get(refresh_token)
        if token is None or token.is_revoked():
            return None
        if token.refresh_spent:
            interval = STATE.reuse_interval.get(token.user)
            if interval is not None and time.time() - token.spent_at <= interval:
                # Within the reuse interval (Auth0's overlap period, Okta's grace period): accepted,
                # and answered with new tokens of the same family.
                STATE.counters(token.user)["reused_within_interval"] += 1
                self.INCLUDE_NEW_REFRESH_TOKEN = True
                return token
            # Reuse of a rotated refresh token: someone raced or stole it. Revoke the family.
            STATE.counters(token.user)["reuse_detected"] += 1
            STATE.revoke_family(token.family)
            return None
        # Per user, the tests may ask for refreshes that keep the refresh token (no rotation).
        self.INCLUDE_NEW_REFRESH_TOKEN = token.user not in STATE.no_rotation
        return token

    def authenticate_user(self, refresh_token):
        return refresh_token.user

    def revoke_old_credential(self, refresh_token):
        if self.INCLUDE_NEW_REFRESH_TOKEN:
            if not refresh_token.refresh_spent:
                refresh_token.spent_at = time.time()
            refresh_token.refresh_spent = True
        else:
            # Without rotation the old refresh token stays; it now also serves the new access token.
            STATE.by_refresh[refresh_token.refresh_token] = refresh_token


class AuthorizationCode(AuthorizationCodeMixin):
    def __init__(self, code, client_id, redirect_uri, scope, user, challenge, method, nonce=None):
        self.code = code
        self.nonce = nonce
        self.client_id = client_id
        self.redirect_uri = redirect_uri
        self.scope = scope
        self.user = user
        self.code_challenge = challenge
        self.code_challenge_method = method
        self.expires_at = time.time() + 120

    def get_redirect_uri(self):
        return self.redirect_uri

    def get_scope(self):
        return self.scope

    def is_expired(self):
        return time.time() > self.expires_at


class PKCEAuthorizationCodeGrant(grants.AuthorizationCodeGrant):
    TOKEN_ENDPOINT_AUTH_METHODS = AUTH_METHODS

    def save_authorization_code(self, code, request):
        with STATE_LOCK:
            STATE.codes[code] = AuthorizationCode(
                code,
                request.client.get_client_id(),
                request.payload.redirect_uri,
                request.payload.scope or "",
                request.user,
                request.payload.data.get("code_challenge"),
                request.payload.data.get("code_challenge_method"),
                request.payload.data.get("nonce"),
            )
            STATE.counters(request.user)["codes_issued"] += 1

    def query_authorization_code(self, code, client):
        found = STATE.codes.get(code)
        if found is not None and found.client_id == client.get_client_id() and not found.is_expired():
            return found
        return None

    def delete_authorization_code(self, authorization_code):
        STATE.codes.pop(authorization_code.code, None)

    def authenticate_user(self, authorization_code):
        return authorization_code.user


class ApprovingDeviceCodeGrant(DeviceCodeGrant):
    TOKEN_ENDPOINT_AUTH_METHODS = AUTH_METHODS

    def query_device_credential(self, device_code):
        return STATE.device_codes.get(device_code)

    def query_user_grant(self, user_code):
        return STATE.user_grants.get(user_code)

    def should_slow_down(self, credential):
        now = time.time()
        last = credential.get("last_poll")
        credential["last_poll"] = now
        if credential.get("slow_down_next"):
            credential["slow_down_next"] = False
            return True
        if credential.get("rate_limit") == "off":
            return False
        return last is not None and now - last < credential["interval"] - 0.2

    def create_token_response(self):
        # A device code is good for one token only.
        status, body, headers = super().create_token_response()
        STATE.device_codes.pop(self.request.payload.data.get("device_code"), None)
        return status, body, headers


class TestRevocationEndpoint(RevocationEndpoint):
    """RFC 7009. Revoking a refresh token revokes its whole family (every access and refresh
    token of that login); revoking an access token revokes that access token alone."""

    CLIENT_AUTH_METHODS = AUTH_METHODS

    def query_token(self, token_string, token_type_hint):
        if token_type_hint == "access_token":
            return STATE.by_access.get(token_string)
        if token_type_hint == "refresh_token":
            return STATE.by_refresh.get(token_string)
        return STATE.by_access.get(token_string) or STATE.by_refresh.get(token_string)

    def revoke_token(self, token, request):
        with STATE_LOCK:
            hint = request.form.get("token_type_hint")
            value = request.form.get("token")
            if hint == "access_token" or (hint is None and token.access_token == value):
                token.access_revoked = True
            else:
                STATE.revoke_family(token.family)
            STATE.counters(token.user)["revocations"] += 1


def metadata_for(issuer):
    """The discovery document of `issuer`; every tenant shares the root's endpoints."""
    root = request.host_url.rstrip("/")
    return {
        "issuer": issuer,
        "token_endpoint": root + "/token",
        "authorization_endpoint": root + "/authorize",
        "device_authorization_endpoint": root + "/device_authorization",
        "revocation_endpoint": root + "/revoke",
        "jwks_uri": root + "/jwks",
        "token_endpoint_auth_methods_supported": AUTH_METHODS,
        "revocation_endpoint_auth_methods_supported": AUTH_METHODS,
        "grant_types_supported": GRANT_TYPES,
        "response_types_supported": ["code"],
        "code_challenge_methods_supported": ["S256"],
        "dpop_signing_alg_values_supported": dpop.ALGORITHMS,
    }


class TestDeviceAuthorizationEndpoint(DeviceAuthorizationEndpoint):
    CLIENT_AUTH_METHODS = AUTH_METHODS
    EXPIRES_IN = 600
    INTERVAL = 1

    def get_verification_uri(self):
        return request.host_url.rstrip("/") + "/device"

    def save_device_credential(self, client_id, scope, data):
        with STATE_LOCK:
            credential = DeviceCredentialDict(
                client_id=client_id, scope=scope, expires_at=time.time() + data["expires_in"], **data
            )
            STATE.device_codes[data["device_code"]] = credential


def create_app(expires_in):
    app = Flask(__name__)
    app.config["OAUTH2_REFRESH_TOKEN_GENERATOR"] = True
    app.config["OAUTH2_TOKEN_EXPIRES_IN"] = {
        "password": expires_in,
        "refresh_token": expires_in,
        DEVICE_CODE_GRANT_TYPE: expires_in,
        "authorization_code": expires_in,
    }
    server = AuthorizationServer(app, query_client=query_client, save_token=save_token)
    server.register_grant(PasswordGrant)
    server.register_grant(RotatingRefreshTokenGrant)
    server.register_grant(ApprovingDeviceCodeGrant)
    server.register_grant(PKCEAuthorizationCodeGrant, [CodeChallenge(required=True)])
    server.register_endpoint(TestDeviceAuthorizationEndpoint)
    server.register_endpoint(TestRevocationEndpoint)

    def take_fault():
        """The fault due for this refresh request, if a test asked for one. Counted as a refresh request."""
        if request.form.get("grant_type") != "refresh_token":
            return None
        with STATE_LOCK:
            known = STATE.by_refresh.get(request.form.get("refresh_token", ""))
            user = known.user if known is not None else None
            pending = STATE.faults.get(user) if user else None
            index = next((i for i, f in enumerate(pending or []) if not f["kind"].startswith("revoke_")), None)
            if index is None:
                return None
            fault = pending.pop(index)
            if fault["kind"] in PASS_THROUGH_FAULTS:
                return dict(fault, user=user)
            counters = STATE.counters(user)
            counters["refresh_requests"] += 1
            counters["faults_served"] += 1
            STATE.refresh_times.setdefault(user, []).append(time.time())
            return fault

    def fault_response(fault):
        kind = fault["kind"]
        if kind == "silent":
            # Accept the request and never answer: the connection stays open until the client
            # gives up or the server stops.
            STOPPING.wait()
            return "", 503
        if kind == "hang":
            # Never answer within the client's time-out; outside the state lock, so nobody else waits.
            threading.Event().wait(fault.get("hang_seconds", 30))
            return "", 504
        if kind == "hostile_error":
            # An OAuth error whose words are terminal escapes: OSC 52 (writes the clipboard), the
            # 8-bit CSI U+009B and a bidi override. The client must print them escaped.
            body = {"error": "invalid_client", "error_description": HOSTILE_TEXT}
            return jsonify(body), 401
        if kind == "html":
            page = "<!DOCTYPE html><html><head><title>403 Forbidden</title></head><body><h1>Forbidden</h1></body></html>"
            return page, 403, {"Content-Type": "text/html; charset=utf-8"}
        status = {"status500": 500, "status503": 503, "status429": 429}[kind]
        headers = {"Content-Type": "text/html"}
        if fault.get("retry_after") is not None:
            headers["Retry-After"] = str(fault["retry_after"])
        return f"<html><body>{status}</body></html>", status, headers

    @app.post("/faults")
    def faults():
        user = request.form.get("user", "")
        kind = request.form.get("kind", "")
        if not user or kind not in (
            "status500", "status503", "status429", "html", "hang", "silent", "no_rotation", "hostile_error", "revoke_error",
            "revoke_silent", "reuse_interval", "resource_reject", "resource_expire_after", "lifetime", "dpop_nonce",
            "dpop_nonce_rotate",
        ) + PASS_THROUGH_FAULTS:
            return jsonify(error="need user and a known kind"), 400
        with STATE_LOCK:
            if kind == "no_rotation":
                STATE.no_rotation.add(user)
            elif kind == "reuse_interval":
                STATE.reuse_interval[user] = float(request.form.get("seconds", "10"))
            elif kind == "lifetime":
                STATE.lifetimes[user] = int(request.form.get("seconds", "3600"))
            elif kind == "dpop_nonce":
                STATE.dpop_nonce_users.add(user)
            elif kind == "dpop_nonce_rotate":
                DPOP.rotate_nonce()
            elif kind == "resource_reject":
                faults = STATE.resource_faults.setdefault(user, {"reject": 0, "expire_after": None})
                faults["reject"] += int(request.form.get("count", "1"))
            elif kind == "resource_expire_after":
                faults = STATE.resource_faults.setdefault(user, {"reject": 0, "expire_after": None})
                faults["expire_after"] = int(request.form.get("uses", "1"))
            else:
                fault = {"kind": kind}
                if request.form.get("retry_after"):
                    fault["retry_after"] = int(request.form["retry_after"])
                if request.form.get("hang_seconds"):
                    fault["hang_seconds"] = float(request.form["hang_seconds"])
                for _ in range(int(request.form.get("count", "1"))):
                    STATE.faults.setdefault(user, []).append(dict(fault))
        return jsonify(ok=True)

    def hold(user):
        """Holds this request, outside the state lock, until the test releases it (bounded)."""
        with STATE_LOCK:
            event, count = STATE.holds.get(user) or (None, 0)
            if event is None or event.is_set():
                event = threading.Event()
            STATE.holds[user] = (event, count + 1)
        event.wait(60)
        with STATE_LOCK:
            event, count = STATE.holds[user]
            STATE.holds[user] = (event, count - 1)

    def spoil(response, kind):
        """The 200 answer with one field a client must refuse; the rotation already happened."""
        if response.status_code != 200:
            return response
        body = response.get_json()
        if kind == "bad_expires_in":
            body["expires_in"] = -1
        elif kind == "bad_refresh_expiry":
            body["refresh_token_expires_in"] = -5
        elif kind == "tab_id_token":
            body["id_token"] = "eyJhbGciOiJub25lIn0\t.e30."
        response.set_data(json.dumps(body))
        return response

    @app.post("/release")
    def release():
        user = request.form.get("user", "")
        with STATE_LOCK:
            event, _ = STATE.holds.get(user) or (None, 0)
        if event is None:
            return jsonify(error="nothing held for that user"), 400
        event.set()
        return jsonify(ok=True)

    @app.post("/token")
    def token():
        fault = take_fault()
        if fault is not None and fault["kind"] not in PASS_THROUGH_FAULTS:
            return fault_response(fault)
        if fault is not None and fault["kind"] == "hold":
            hold(fault["user"])
        response = handle_token()
        if fault is not None and fault["kind"] != "hold":
            response = spoil(response, fault["kind"])
        return response

    def token_request_user():
        """The user a token request is for, if the server knows it yet (None for a pending device code)."""
        grant_type = request.form.get("grant_type")
        if grant_type == "password":
            return request.form.get("username") or None
        if grant_type == "refresh_token":
            known = STATE.by_refresh.get(request.form.get("refresh_token", ""))
            return known.user if known is not None else None
        if grant_type == "authorization_code":
            code = STATE.codes.get(request.form.get("code", ""))
            return code.user if code is not None else None
        if grant_type == DEVICE_CODE_GRANT_TYPE:
            credential = STATE.device_codes.get(request.form.get("device_code", ""))
            grant = STATE.user_grants.get(credential["user_code"]) if credential is not None else None
            return grant[0] if grant else None
        return None

    def dpop_token_refusal(user, bound_jkt):
        """Checks the token request's DPoP proof (RFC 9449 §5). Returns None and sets g.dpop_jkt to the
        key's thumbprint (the issued tokens are bound to it), or returns the 400 answer. `bound_jkt` is
        the key the refreshed grant is bound to: then a proof with that key is required."""
        headers = request.headers.getlist("DPoP")
        counters = STATE.counters(user) if user is not None else None
        nonce_required = user in STATE.dpop_nonce_users
        if headers and counters is not None:
            counters["dpop_token_requests"] += 1
        extra = {"DPoP-Nonce": DPOP.current_nonce()} if nonce_required else {}
        try:
            if not headers:
                raise dpop.ProofError("the refresh token is bound to a DPoP key: a DPoP proof is required")
            claims, jkt = DPOP.check(headers, request.method, request.url, nonce_required=nonce_required)
            if bound_jkt is not None and jkt != bound_jkt:
                raise dpop.ProofError("the refresh token is bound to another DPoP key")
            DPOP.record(claims)
        except dpop.NonceError as error:
            if counters is not None:
                counters["dpop_nonce_challenges"] += 1
            body = {"error": "use_dpop_nonce", "error_description": str(error)}
            return jsonify(body), 400, dict(extra, **{"Cache-Control": "no-store"})
        except dpop.ProofError as error:
            if counters is not None:
                counters["dpop_proofs_refused"] += 1
            body = {"error": "invalid_dpop_proof", "error_description": str(error)}
            return jsonify(body), 400, dict(extra, **{"Cache-Control": "no-store"})
        g.dpop_jkt = jkt
        g.dpop_extra_headers = extra
        return None

    def handle_token():
        with STATE_LOCK:
            # DPoP first: a refused or challenged proof is counted in the dpop_* counters only, and it
            # neither spends nor revokes anything (the grant is not even looked at by authlib).
            bound_jkt = None
            if request.form.get("grant_type") == "refresh_token":
                known = STATE.by_refresh.get(request.form.get("refresh_token", ""))
                if known is not None:
                    bound_jkt = STATE.families[known.family]["jkt"]
            if request.headers.getlist("DPoP") or bound_jkt is not None:
                refusal = dpop_token_refusal(token_request_user(), bound_jkt)
                if refusal is not None:
                    return refusal
            response = handle_token_grant()
            for name, value in (g.get("dpop_extra_headers") or {}).items():
                response.headers[name] = value
            return response

    def handle_token_grant():
        with STATE_LOCK:
            is_refresh = request.form.get("grant_type") == "refresh_token"
            user = None
            if is_refresh:
                known = STATE.by_refresh.get(request.form.get("refresh_token", ""))
                user = known.user if known is not None else "(unknown)"
                STATE.counters(user)["refresh_requests"] += 1
                STATE.refresh_times.setdefault(user, []).append(time.time())
            elif request.form.get("grant_type") == DEVICE_CODE_GRANT_TYPE:
                credential = STATE.device_codes.get(request.form.get("device_code", ""))
                if credential is not None:
                    grant = STATE.user_grants.get(credential["user_code"])
                    STATE.counters(grant[0] if grant else "(pending)")["device_polls"] += 1
                    code = credential["user_code"]
                    STATE.device_polls[code] = STATE.device_polls.get(code, 0) + 1
            response = server.create_token_response()
            if is_refresh:
                counters = STATE.counters(user)
                if response.status_code == 200:
                    counters["refresh_succeeded"] += 1
                else:
                    counters["refresh_rejected"] += 1
            return response

    @app.post("/device_authorization")
    def device_authorization():
        with STATE_LOCK:
            return server.create_endpoint_response(TestDeviceAuthorizationEndpoint.ENDPOINT_NAME)

    @app.post("/hostile/device_authorization")
    def hostile_device_authorization():
        # A device authorization answer whose user code holds U+009B (the 8-bit CSI) and a bidi
        # override: a client must refuse it or print it escaped, never show it as it is.
        return jsonify(
            device_code=uuid.uuid4().hex,
            user_code="AB\u009b31mCD\u202eEF",
            verification_uri=request.host_url.rstrip("/") + "/device",
            expires_in=600,
            interval=1,
        )

    @app.get("/device")
    def device_page():
        return (
            "<form method=post>User code <input name=user_code> User <input name=username>"
            "<button name=approve value=yes>Approve</button><button name=approve value=no>Deny</button></form>"
        )

    @app.post("/device")
    def device_approve():
        user_code = request.form.get("user_code", "").strip().upper()
        username = request.form.get("username", "").strip()
        approved = request.form.get("approve", "yes") == "yes"
        with STATE_LOCK:
            known = any(c["user_code"] == user_code for c in STATE.device_codes.values())
            if not known or not username:
                return jsonify(error="unknown user code or missing user"), 400
            STATE.user_grants[user_code] = (username, approved)
            if approved:
                STATE.counters(username)["device_authorizations"] += 1
        return jsonify(approved=approved)

    @app.post("/device/control")
    def device_control():
        user_code = request.form.get("user_code", "").strip().upper()
        with STATE_LOCK:
            credential = next((c for c in STATE.device_codes.values() if c["user_code"] == user_code), None)
            if credential is None:
                return jsonify(error="unknown user code"), 400
            if request.form.get("slow_down_next") == "1":
                credential["slow_down_next"] = True
            if request.form.get("rate_limit"):
                credential["rate_limit"] = request.form["rate_limit"]
            if request.form.get("expire") == "1":
                credential["expires_at"] = time.time() - 1
        return jsonify(ok=True)

    @app.get("/device/stats")
    def device_stats():
        user_code = request.args.get("user_code", "").strip().upper()
        with STATE_LOCK:
            return jsonify(polls=STATE.device_polls.get(user_code, 0))

    @app.get("/authorize")
    def authorize():
        # The test plays the user: user=NAME logs in and approves, deny=1 refuses.
        user = request.args.get("user", "")
        with STATE_LOCK:
            try:
                grant = server.get_consent_grant(end_user=user or None)
            except Exception as error:  # an invalid request is answered, never redirected
                return jsonify(error=getattr(error, "error", "invalid_request")), 400
            grant_user = None if request.args.get("deny") == "1" or not user else user
            return server.create_authorization_response(grant_user=grant_user, grant=grant)

    def revocation_fault():
        """The fault due for this revocation request (kinds revoke_error, revoke_silent), if any."""
        with STATE_LOCK:
            value = request.form.get("token", "")
            known = STATE.by_refresh.get(value) or STATE.by_access.get(value)
            if known is None:
                return None
            STATE.counters(known.user)["revocation_requests"] += 1
            pending = STATE.faults.get(known.user) or []
            for index, fault in enumerate(pending):
                if fault["kind"].startswith("revoke_"):
                    return pending.pop(index)
            return None

    @app.post("/revoke")
    def revoke():
        fault = revocation_fault()
        if fault is not None and fault["kind"] == "revoke_silent":
            STOPPING.wait()
            return "", 503
        if fault is not None:
            return jsonify(error="invalid_request", error_description="the test asked for an error"), 400
        with STATE_LOCK:
            return server.create_endpoint_response(TestRevocationEndpoint.ENDPOINT_NAME)

    def discovery(issuer, path):
        with STATE_LOCK:
            STATE.discovery_requests[path] = STATE.discovery_requests.get(path, 0) + 1
        return jsonify(metadata_for(issuer))

    # Discovery (OpenID Connect Discovery 1.0 and RFC 8414). The root issuer is the server's own
    # URL; /tenants/NAME is an issuer of its own (requests counted per document path), except:
    # a tenant named mixup-* serves a document that names another issuer, and one named
    # oauth-only-* has no OpenID document, only the RFC 8414 one.
    @app.get("/.well-known/openid-configuration")
    def openid_configuration():
        return discovery(request.host_url.rstrip("/"), request.path)

    @app.get("/.well-known/oauth-authorization-server")
    def oauth_metadata():
        return discovery(request.host_url.rstrip("/"), request.path)

    @app.get("/tenants/<name>/.well-known/openid-configuration")
    def tenant_openid_configuration(name):
        if name.startswith("oauth-only-"):
            with STATE_LOCK:
                STATE.discovery_requests[request.path] = STATE.discovery_requests.get(request.path, 0) + 1
            return jsonify(error="not_found"), 404
        issuer = request.host_url.rstrip("/") + "/tenants/" + name
        if name.startswith("mixup-"):
            issuer = "https://attacker.example/tenants/" + name
        return discovery(issuer, request.path)

    @app.get("/.well-known/oauth-authorization-server/tenants/<name>")
    def tenant_oauth_metadata(name):
        issuer = request.host_url.rstrip("/") + "/tenants/" + name
        if name.startswith("mixup-"):
            issuer = "https://attacker.example/tenants/" + name
        return discovery(issuer, request.path)

    @app.get("/discovery/stats")
    def discovery_stats():
        with STATE_LOCK:
            return jsonify(requests=STATE.discovery_requests.get(request.args.get("path", ""), 0))

    def introspect(value):
        """RFC 7662 introspection of an access token against the server's own token store."""
        token = STATE.by_access.get(value)
        if (
            token is None or token.is_expired() or token.is_revoked() or token.access_revoked
            or token.access_expired
        ):
            return {"active": False}, token
        answer = {
            "active": True, "client_id": token.client_id, "username": token.user, "scope": token.scope,
            "token_type": "Bearer", "exp": int(token.issued_at + token.expires_in), "iat": int(token.issued_at),
        }
        if token.jkt is not None:
            # RFC 9449 §6.2: a DPoP-bound token's confirmation is the thumbprint of its key.
            answer["token_type"] = "DPoP"
            answer["cnf"] = {"jkt": token.jkt}
        return answer, token

    def challenge(scheme, error):
        """A 401 answer with the challenge of the scheme the client used (DPoP or Bearer)."""
        name = "DPoP" if scheme == "dpop" else "Bearer"
        headers = {"WWW-Authenticate": f'{name} error="{error}"'}
        if error == "use_dpop_nonce":
            headers["DPoP-Nonce"] = DPOP.current_nonce()
        return jsonify(error=error), 401, headers

    def dpop_resource_refusal(scheme, value, token):
        refusal = dpop_resource_check(scheme, value, token)
        if refusal is not None and token is not None and token.user in STATE.dpop_nonce_users:
            refusal[2]["DPoP-Nonce"] = DPOP.current_nonce()
        return refusal

    def dpop_resource_check(scheme, value, token):
        """RFC 9449 §7 at a resource: None when the request may go on (a Bearer request with an unbound
        token, as before; or a DPoP request whose proof holds and whose key is the token's), else the 401
        answer. Called with the state lock held and `token` the stored token of `value` (or None)."""
        if scheme == "bearer":
            if token is not None and token.jkt is not None:
                # A DPoP-bound token presented as a Bearer token: copied out of somewhere. Refused.
                STATE.counters(token.user)["dpop_proofs_refused"] += 1
                return challenge("dpop", "invalid_token")
            return None
        if token is None:
            return challenge("dpop", "invalid_token")
        counters = STATE.counters(token.user)
        counters["dpop_resource_requests"] += 1
        if token.jkt is None:
            counters["dpop_proofs_refused"] += 1
            return challenge("dpop", "invalid_token")
        try:
            headers = request.headers.getlist("DPoP")
            if not headers:
                raise dpop.ProofError("a DPoP proof is required")
            # The whole verification (the check, the key's binding, the jti recorded) on the clock.
            started = time.perf_counter()
            started_cpu = time.thread_time()
            try:
                claims, jkt = DPOP.check(
                    headers, request.method, request.url, access_token=value,
                    nonce_required=token.user in STATE.dpop_nonce_users,
                )
                if jkt != token.jkt:
                    counters["dpop_proofs_refused"] += 1
                    return challenge("dpop", "invalid_token")
                DPOP.record(claims)
            finally:
                counters["dpop_resource_verify_seconds"] += time.perf_counter() - started
                counters["dpop_resource_verify_cpu_seconds"] += time.thread_time() - started_cpu
        except dpop.NonceError:
            counters["dpop_nonce_challenges"] += 1
            return challenge("dpop", "use_dpop_nonce")
        except dpop.ProofError:
            counters["dpop_proofs_refused"] += 1
            return challenge("dpop", "invalid_dpop_proof")
        return None

    def resource_credentials():
        """(scheme in lower case, token) of the Authorization header; scheme '' when neither Bearer nor DPoP."""
        scheme, _, value = request.headers.get("Authorization", "").partition(" ")
        scheme = scheme.lower()
        return (scheme, value.strip()) if scheme in ("bearer", "dpop") else ("", "")

    def with_nonce(response, token):
        """A resource's answer, with the current DPoP nonce when the token's user must use one."""
        if token is not None and token.jkt is not None and token.user in STATE.dpop_nonce_users:
            response.headers["DPoP-Nonce"] = DPOP.current_nonce()
        return response

    @app.post("/introspect")
    def introspection():
        with STATE_LOCK:
            return jsonify(introspect(request.form.get("token", ""))[0])

    @app.get("/api/data")
    def data():
        scheme, value = resource_credentials()
        refused = challenge(scheme, "invalid_token")
        with STATE_LOCK:
            answer, token = introspect(value) if scheme else ({"active": False}, None)
            refusal = dpop_resource_refusal(scheme, value, token) if scheme else None
            if refusal is not None:
                return refusal
            if token is None:
                return refused
            counters = STATE.counters(token.user)
            counters["resource_requests"] += 1
            if not answer["active"]:
                counters["resource_rejected"] += 1
                return refused
            faults = STATE.resource_faults.get(token.user)
            if faults is not None and faults["reject"] > 0:
                faults["reject"] -= 1
                counters["resource_rejected"] += 1
                return refused
            if faults is not None and faults["expire_after"] is not None:
                faults["expire_after"] -= 1
                if faults["expire_after"] <= 0:
                    # This request is the token's last; the next one with it is refused.
                    faults["expire_after"] = None
                    token.access_expired = True
            item = counters["resource_requests"]
            return with_nonce(
                jsonify(user=answer["username"], item=item, data=f"item {item} of {answer['username']}"), token
            )

    @app.get("/api/me")
    def me():
        scheme, value = resource_credentials()
        with STATE_LOCK:
            token = STATE.by_access.get(value) if scheme else None
            refusal = dpop_resource_refusal(scheme, value, token) if scheme else None
            if refusal is not None:
                return refusal
            if token is None or token.is_expired() or token.is_revoked() or token.access_revoked:
                return challenge(scheme, "invalid_token")
            return with_nonce(jsonify(user=token.user), token)

    # A request to /api/held/ID is answered as /api/me is, but only once the test releases it
    # (POST /api/held/ID/release): the test looks at the running client meanwhile. GET
    # /api/held/ID/arrived answers once the request has arrived. Events, not sleeps; bounded.
    def held(hold_id):
        with STATE_LOCK:
            return STATE.held.setdefault(hold_id, {"arrived": threading.Event(), "release": threading.Event()})

    @app.get("/api/held/<hold_id>")
    def held_me(hold_id):
        entry = held(hold_id)
        entry["arrived"].set()
        if not entry["release"].wait(120):
            return jsonify(error="never released"), 504
        return me()

    @app.get("/api/held/<hold_id>/arrived")
    def held_arrived(hold_id):
        return jsonify(arrived=held(hold_id)["arrived"].wait(120))

    @app.post("/api/held/<hold_id>/release")
    def held_release(hold_id):
        held(hold_id)["release"].set()
        return jsonify(ok=True)

    @app.get("/stats")
    def stats():
        user = request.args.get("user")
        with STATE_LOCK:
            if user is None:
                return jsonify(users=sorted(STATE.stats))
            held = (STATE.holds.get(user) or (None, 0))[1]
            return jsonify(dict(
                STATE.counters(user), refresh_times=STATE.refresh_times.get(user, []), held=held,
                dpop_jkt=STATE.dpop_jkt.get(user),
            ))

    @app.get("/health")
    def health():
        return jsonify(ok=True)

    # The providers' stand-ins (issue 35): Atlassian, GitHub, Google, Microsoft, GitLab.
    providers.register(app)
    # The per-user log of presented refresh tokens (fingerprints only), for Scripts/fleet.
    history.register(app, user_of_refresh_token)
    # /jwks and the ID-token controls (idtokens.py).
    idtokens.register(app)
    return app


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on (Scripts/fleet: one inside its namespaces)")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--port-file", help="write the bound port here once listening")
    parser.add_argument("--expires-in", type=int, default=5, help="access token lifetime in seconds")
    parser.add_argument("--tls-cert", help="serve https with this PEM certificate (and --tls-key)")
    parser.add_argument("--tls-key", help="the PEM key of --tls-cert")
    parser.add_argument("--client-ca", help="require a client certificate issued by this PEM CA (mutual TLS, CERT_REQUIRED)")
    parser.add_argument("--print-port", action="store_true", help="print the bound port on stdout once listening")
    args = parser.parse_args()
    # werkzeug's access log names paths only, but keep the output to startup and errors.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)

    ssl_context = None
    if args.tls_cert:
        import ssl

        ssl_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ssl_context.load_cert_chain(args.tls_cert, args.tls_key)
        if args.client_ca:
            # Mutual TLS (RFC 8705's transport): no handshake without a certificate from this CA.
            ssl_context.verify_mode = ssl.CERT_REQUIRED
            ssl_context.load_verify_locations(args.client_ca)
    httpd = make_server(args.host, args.port, create_app(args.expires_in), threaded=True, ssl_context=ssl_context)
    port = httpd.server_port
    if args.print_port:
        print(port, flush=True)
    if args.port_file:
        temporary = args.port_file + ".tmp"
        with open(temporary, "w") as handle:
            handle.write(f"{port}\n")
        os.replace(temporary, args.port_file)
    scheme = "https" if ssl_context else "http"
    print(f"oauth-server: listening on {scheme}://{args.host}:{port}", file=sys.stderr, flush=True)

    def stop(signum, frame):
        STOPPING.set()
        threading.Thread(target=httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    httpd.serve_forever()


if __name__ == "__main__":
    main()
