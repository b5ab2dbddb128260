"""Signed OpenID Connect ID tokens for the test server (issue 31 point 6).

A module of its own so that server.py needs only three hooks: the authorization code keeps the
request's ``nonce``, ``save_token`` asks ``issue`` for an ``id_token`` when the scope holds
``openid``, and ``register`` adds the routes below. Signatures are joserfc's (authlib's JOSE
library, installed with Authlib), never made by hand; only the attacks below that are not a
signature (``alg: none``, a tampered payload) are put together byte by byte, as an attacker would.

* ``GET /jwks``: the published signing keys, an RSA key (RS256) and a P-256 key (ES256), each with
  a ``kid``. Requests are counted per ``probe`` query parameter (``GET /idtoken/stats?probe=P``), so
  a test that names its own ``jwks_uri`` (``/jwks?probe=P``) can count its own fetches.
* ``POST /idtoken/control`` with ``user``: ``alg=RS256|ES256`` signs that user's ID tokens with
  that key from now on; ``fault=KIND`` spoils the user's next ID token only. Kinds:
  ``bad_signature`` (last signature byte flipped), ``tampered`` (payload changed after signing),
  ``wrong_iss``, ``wrong_aud``, ``expired`` (exp an hour ago), ``future_iat`` (iat an hour ahead),
  ``wrong_nonce``, ``no_nonce``, ``alg_none`` (unsigned), ``hs256_public_key`` (HMAC keyed with the
  RSA public key, the old algorithm-confusion attack), ``jwk_header`` (signed by a key that is not
  published, the key itself in the header), ``jku_header`` (likewise, with a ``jku`` URL), and
  ``unknown_kid`` (signed by a key that is never published).
* ``POST /idtoken/rotate``: new RSA and EC keys with new ``kid`` values are published and sign
  every ID token from now on; the old keys stay published (as providers keep them for a while),
  so tests running at the same time are not disturbed.
"""

import base64
import hashlib
import hmac
import json
import threading
import time

from flask import jsonify, request
from joserfc import jwt
from joserfc.jwk import ECKey, RSAKey

LIFETIME = 300
LOCK = threading.Lock()


def _b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class _Keys:
    def __init__(self):
        self.generation = 0
        self.published = []
        self.rotate()
        # Never published: what an attacker signs with.
        self.stranger = RSAKey.generate_key(2048, parameters={"kid": "stranger-1", "alg": "RS256", "use": "sig"})

    def rotate(self):
        self.generation += 1
        number = self.generation
        self.rsa = RSAKey.generate_key(2048, parameters={"kid": f"rsa-{number}", "alg": "RS256", "use": "sig"})
        self.ec = ECKey.generate_key("P-256", parameters={"kid": f"ec-{number}", "alg": "ES256", "use": "sig"})
        self.published += [self.rsa, self.ec]


KEYS = _Keys()
# user -> "RS256" | "ES256"; user -> [fault kinds], one per ID token.
ALGORITHMS = {}
FAULTS = {}
JWKS_REQUESTS = {}
ISSUED = {}


def issue(issuer, client_id, user, nonce):
    """A signed ID token for `user`, with the user's algorithm and next fault (if any)."""
    with LOCK:
        alg = ALGORITHMS.get(user, "RS256")
        pending = FAULTS.get(user) or []
        fault = pending.pop(0) if pending else None
        ISSUED[user] = ISSUED.get(user, 0) + 1
        key = KEYS.ec if alg == "ES256" else KEYS.rsa
    now = int(time.time())
    claims = {"iss": issuer, "sub": user, "aud": client_id, "iat": now, "exp": now + LIFETIME, "auth_time": now}
    if nonce:
        claims["nonce"] = nonce
    if fault == "wrong_iss":
        claims["iss"] = "https://attacker.example"
    elif fault == "wrong_aud":
        claims["aud"] = "someone-else"
    elif fault == "expired":
        claims["iat"], claims["exp"] = now - 7200, now - 3600
    elif fault == "future_iat":
        claims["iat"] = now + 3600
        claims["exp"] = now + 3600 + LIFETIME
    elif fault == "wrong_nonce":
        claims["nonce"] = "not-the-nonce-that-was-sent"
    elif fault == "no_nonce":
        claims.pop("nonce", None)
    header = {"alg": alg, "kid": key.kid, "typ": "JWT"}
    if fault == "alg_none":
        return _b64(json.dumps({"alg": "none", "kid": key.kid}).encode()) + "." + _b64(json.dumps(claims).encode()) + "."
    if fault == "hs256_public_key":
        # The RSA public key's PEM as an HMAC secret (what a verifier that trusted `alg` would use).
        pem = KEYS.rsa.as_pem(private=False)
        signing_input = _b64(json.dumps({"alg": "HS256", "kid": KEYS.rsa.kid}).encode()) + "." + _b64(json.dumps(claims).encode())
        signature = hmac.new(pem, signing_input.encode(), hashlib.sha256).digest()
        return signing_input + "." + _b64(signature)
    if fault in ("jwk_header", "jku_header", "unknown_kid"):
        key = KEYS.stranger
        header = {"alg": "RS256", "kid": key.kid, "typ": "JWT"}
        if fault == "jwk_header":
            header["jwk"] = key.as_dict(private=False)
        if fault == "jku_header":
            header["jku"] = issuer + "/attacker/jwks"
    token = jwt.encode(header, claims, key, algorithms=[header["alg"]])
    if fault == "bad_signature":
        head, payload, signature = token.split(".")
        raw = bytearray(base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4)))
        raw[-1] ^= 0x01
        token = head + "." + payload + "." + _b64(bytes(raw))
    elif fault == "tampered":
        head, payload, signature = token.split(".")
        changed = dict(claims, sub="admin")
        token = head + "." + _b64(json.dumps(changed).encode()) + "." + signature
    return token


def register(app):
    @app.get("/jwks")
    def jwks():
        with LOCK:
            probe = request.args.get("probe", "")
            JWKS_REQUESTS[probe] = JWKS_REQUESTS.get(probe, 0) + 1
            return jsonify(keys=[key.as_dict(private=False) for key in KEYS.published])

    @app.post("/idtoken/control")
    def idtoken_control():
        user = request.form.get("user", "")
        if not user:
            return jsonify(error="user required"), 400
        with LOCK:
            if "alg" in request.form:
                if request.form["alg"] not in ("RS256", "ES256"):
                    return jsonify(error="alg is RS256 or ES256"), 400
                ALGORITHMS[user] = request.form["alg"]
            if "fault" in request.form:
                FAULTS.setdefault(user, []).append(request.form["fault"])
        return jsonify(ok=True)

    @app.post("/idtoken/rotate")
    def idtoken_rotate():
        with LOCK:
            KEYS.rotate()
            return jsonify(rsa=KEYS.rsa.kid, ec=KEYS.ec.kid)

    @app.get("/idtoken/stats")
    def idtoken_stats():
        with LOCK:
            return jsonify(
                jwks_requests=JWKS_REQUESTS.get(request.args.get("probe", ""), 0),
                issued=ISSUED.get(request.args.get("user", ""), 0),
            )
