#!/usr/bin/env python3
"""Checks the test server's DPoP (RFC 9449) verification over real HTTP.

The client side is written apart from the server's: proofs are signed with `cryptography` directly
(ES256 as raw r||s, EdDSA with Ed25519), thumbprints computed with hashlib, requests made with the
standard library's urllib. So a check here passes only when joserfc on the server accepts what an
independent signer made, and refuses what it must refuse.

    python test_dpop.py [--url http://127.0.0.1:PORT]

Without --url (or TOKENVAULT_TEST_OAUTH_URL) it starts server.py on a free port and stops it at the
end. Every test uses user names of its own, so it can share a server with other tests. Exit status 0
when every check passed, 1 otherwise. It prints no token values.
"""

import argparse
import base64
import hashlib
import json
import os
import subprocess
import sys
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request
import uuid

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

BASE = None
CLIENT_ID = "tokenvault-example"
PASSWORD = "test-password"


def b64url(data):
    if isinstance(data, str):
        data = data.encode("utf-8")
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def int_bytes(value, length):
    return value.to_bytes(length, "big")


class Key:
    """A DPoP key made with cryptography, signing proofs without any JOSE library."""

    def __init__(self, alg):
        self.alg = alg
        if alg == "ES256":
            self.private = ec.generate_private_key(ec.SECP256R1())
            numbers = self.private.public_key().public_numbers()
            self.jwk = {"kty": "EC", "crv": "P-256", "x": b64url(int_bytes(numbers.x, 32)), "y": b64url(int_bytes(numbers.y, 32))}
            required = ("crv", "kty", "x", "y")
        else:
            self.private = ed25519.Ed25519PrivateKey.generate()
            from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

            raw = self.private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
            self.jwk = {"kty": "OKP", "crv": "Ed25519", "x": b64url(raw)}
            required = ("crv", "kty", "x")
        # RFC 7638: the required members, sorted, no whitespace, SHA-256, base64url unpadded.
        canonical = json.dumps({k: self.jwk[k] for k in required}, separators=(",", ":"), sort_keys=True)
        self.thumbprint = b64url(hashlib.sha256(canonical.encode("ascii")).digest())

    def sign(self, data):
        if self.alg == "ES256":
            r, s = decode_dss_signature(self.private.sign(data, ec.ECDSA(hashes.SHA256())))
            return int_bytes(r, 32) + int_bytes(s, 32)
        return self.private.sign(data)

    def proof(self, method, url, token=None, nonce=None, iat=None, jti=None, header=None, claims=None):
        head = {"typ": "dpop+jwt", "alg": self.alg, "jwk": self.jwk}
        head.update(header or {})
        body = {"htm": method, "htu": url, "iat": int(time.time()) if iat is None else iat, "jti": jti or uuid.uuid4().hex}
        if token is not None:
            body["ath"] = b64url(hashlib.sha256(token.encode("ascii")).digest())
        if nonce is not None:
            body["nonce"] = nonce
        body.update(claims or {})
        signing_input = b64url(json.dumps(head)) + "." + b64url(json.dumps(body))
        return signing_input + "." + b64url(self.sign(signing_input.encode("ascii")))


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


OPENER = urllib.request.build_opener(NoRedirect)


class Answer:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.raw = body
        try:
            self.json = json.loads(body) if body else None
        except ValueError:
            self.json = None


def call(method, path, form=None, headers=()):
    """One HTTP request; `headers` is a list of (name, value) so that a header can be given twice."""
    data = urllib.parse.urlencode(form).encode("ascii") if form is not None else None
    request = urllib.request.Request(BASE + path, data=data, method=method)
    # urllib keeps one value per header name (test_two_dpop_headers_are_refused uses http.client).
    for name, value in headers:
        request.add_header(name, value)
    try:
        with OPENER.open(request, timeout=30) as response:
            return Answer(response.status, response.headers, response.read().decode("utf-8"))
    except urllib.error.HTTPError as error:
        return Answer(error.code, error.headers, error.read().decode("utf-8"))


def token_url():
    return BASE + "/token"


def login(user, key=None, nonce=None):
    headers = [("DPoP", key.proof("POST", token_url(), nonce=nonce))] if key else []
    return call("POST", "/token", {"grant_type": "password", "username": user, "password": PASSWORD, "client_id": CLIENT_ID}, headers)


def refresh(refresh_token, key=None, nonce=None, proof=None):
    headers = []
    if proof is not None:
        headers = [("DPoP", proof)]
    elif key is not None:
        headers = [("DPoP", key.proof("POST", token_url(), nonce=nonce))]
    return call("POST", "/token", {"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": CLIENT_ID}, headers)


def resource(path, token, key=None, scheme="DPoP", nonce=None, proof=None):
    headers = [("Authorization", f"{scheme} {token}")]
    if proof is not None:
        headers.append(("DPoP", proof))
    elif key is not None:
        headers.append(("DPoP", key.proof("GET", BASE + path, token=token, nonce=nonce)))
    return call("GET", path, headers=headers)


def stats(user):
    return call("GET", "/stats?user=" + urllib.parse.quote(user)).json


def fault(user, kind):
    answer = call("POST", "/faults", {"user": user, "kind": kind})
    assert answer.status == 200, answer.raw


def new_user(label):
    return f"dpop-{label}-{uuid.uuid4().hex[:8]}"


class DPoPTests(unittest.TestCase):
    def assertRefusedAtToken(self, answer, error="invalid_dpop_proof"):
        self.assertEqual(answer.status, 400, answer.raw)
        self.assertEqual(answer.json["error"], error)

    def assertRefusedAtResource(self, answer, error):
        self.assertEqual(answer.status, 401, answer.raw)
        self.assertEqual(answer.headers.get("WWW-Authenticate"), f'DPoP error="{error}"')

    def bound_login(self, alg="ES256", label="login"):
        user, key = new_user(label), Key(alg)
        answer = login(user, key)
        self.assertEqual(answer.status, 200, answer.raw)
        self.assertEqual(answer.json["token_type"], "DPoP")
        return user, key, answer.json

    def test_discovery_lists_the_algorithms(self):
        for path in ("/.well-known/openid-configuration", "/.well-known/oauth-authorization-server",
                     "/tenants/acme/.well-known/openid-configuration", "/.well-known/oauth-authorization-server/tenants/acme"):
            self.assertEqual(call("GET", path).json["dpop_signing_alg_values_supported"], ["ES256", "EdDSA"], path)

    def check_full_flow(self, alg):
        user, key, tokens = self.bound_login(alg, "flow-" + alg)
        self.assertEqual(stats(user)["dpop_jkt"], key.thumbprint)
        introspection = call("POST", "/introspect", {"token": tokens["access_token"]}).json
        self.assertEqual(introspection["cnf"], {"jkt": key.thumbprint})
        self.assertEqual(introspection["token_type"], "DPoP")
        me = resource("/api/me", tokens["access_token"], key)
        self.assertEqual((me.status, me.json), (200, {"user": user}), me.raw)
        data = resource("/api/data", tokens["access_token"], key)
        self.assertEqual(data.status, 200, data.raw)
        self.assertEqual(data.json["user"], user)
        renewed = refresh(tokens["refresh_token"], key)
        self.assertEqual(renewed.status, 200, renewed.raw)
        self.assertEqual(renewed.json["token_type"], "DPoP")
        self.assertNotEqual(renewed.json["refresh_token"], tokens["refresh_token"])
        me = resource("/api/me", renewed.json["access_token"], key)
        self.assertEqual(me.status, 200, me.raw)
        counters = stats(user)
        self.assertEqual(counters["dpop_token_requests"], 2)
        self.assertEqual(counters["dpop_resource_requests"], 3)
        self.assertEqual(counters["dpop_proofs_refused"], 0)
        self.assertEqual(counters["refresh_succeeded"], 1)

    def test_es256_login_refresh_and_resources(self):
        self.check_full_flow("ES256")

    def test_eddsa_login_refresh_and_resources(self):
        self.check_full_flow("EdDSA")

    def test_bound_token_as_bearer_is_refused(self):
        user, key, tokens = self.bound_login()
        for path in ("/api/me", "/api/data"):
            self.assertRefusedAtResource(resource(path, tokens["access_token"], scheme="Bearer"), "invalid_token")
            # Even with a good proof alongside: a bound token never goes as Bearer.
            proof = key.proof("GET", BASE + path, token=tokens["access_token"])
            self.assertRefusedAtResource(resource(path, tokens["access_token"], scheme="Bearer", proof=proof), "invalid_token")
        self.assertEqual(stats(user)["dpop_proofs_refused"], 4)

    def test_another_keys_proof_is_refused(self):
        _, _, tokens = self.bound_login()
        for path in ("/api/me", "/api/data"):
            self.assertRefusedAtResource(resource(path, tokens["access_token"], Key("ES256")), "invalid_token")
            self.assertRefusedAtResource(resource(path, tokens["access_token"], Key("EdDSA")), "invalid_token")

    def test_missing_proof_is_refused(self):
        _, _, tokens = self.bound_login()
        self.assertRefusedAtResource(resource("/api/me", tokens["access_token"]), "invalid_dpop_proof")

    def test_replayed_proof_is_refused(self):
        _, key, tokens = self.bound_login()
        proof = key.proof("GET", BASE + "/api/me", token=tokens["access_token"])
        self.assertEqual(resource("/api/me", tokens["access_token"], proof=proof).status, 200)
        self.assertRefusedAtResource(resource("/api/me", tokens["access_token"], proof=proof), "invalid_dpop_proof")
        # At the token endpoint too: the proof of the login cannot log in again.
        proof = key.proof("POST", token_url())
        form = {"grant_type": "password", "username": new_user("replay"), "password": PASSWORD, "client_id": CLIENT_ID}
        self.assertEqual(call("POST", "/token", form, [("DPoP", proof)]).status, 200)
        self.assertRefusedAtToken(call("POST", "/token", form, [("DPoP", proof)]))

    def test_htm_and_htu_must_match(self):
        user, key = new_user("htu"), Key("ES256")
        form = {"grant_type": "password", "username": user, "password": PASSWORD, "client_id": CLIENT_ID}
        port = urllib.parse.urlsplit(BASE).port
        for proof in (
            key.proof("GET", token_url()),
            key.proof("POST", BASE + "/revoke"),
            key.proof("POST", BASE.replace(str(port), str(port + 1)) + "/token"),
            key.proof("POST", "https" + BASE[len("http"):] + "/token"),
            key.proof("post", token_url()),
        ):
            self.assertRefusedAtToken(call("POST", "/token", form, [("DPoP", proof)]))
        # Query and fragment are not compared; a default port is the same port.
        answer = call("POST", "/token", form, [("DPoP", key.proof("POST", token_url() + "?a=b#c"))])
        self.assertEqual(answer.status, 200, answer.raw)
        token = answer.json["access_token"]
        self.assertRefusedAtResource(resource("/api/me", token, proof=key.proof("GET", BASE + "/api/data", token=token)), "invalid_dpop_proof")
        self.assertRefusedAtResource(resource("/api/me", token, proof=key.proof("POST", BASE + "/api/me", token=token)), "invalid_dpop_proof")
        self.assertEqual(resource("/api/me", token, proof=key.proof("GET", BASE + "/api/me?x=1", token=token)).status, 200)

    def test_iat_window(self):
        user, key = new_user("iat"), Key("EdDSA")
        form = {"grant_type": "password", "username": user, "password": PASSWORD, "client_id": CLIENT_ID}
        now = int(time.time())
        # NaN (json.loads reads it) compares false with everything: it must not slip through the window.
        for iat in (now - 120, now + 120, "now", float("nan"), float("inf")):
            self.assertRefusedAtToken(call("POST", "/token", form, [("DPoP", key.proof("POST", token_url(), iat=iat))]))
        self.assertEqual(call("POST", "/token", form, [("DPoP", key.proof("POST", token_url(), iat=now - 30))]).status, 200)

    def test_malformed_proofs_are_refused(self):
        user, key = new_user("malformed"), Key("ES256")
        form = {"grant_type": "password", "username": user, "password": PASSWORD, "client_id": CLIENT_ID}
        private_jwk = dict(key.jwk, d=b64url(int_bytes(key.private.private_numbers().private_value, 32)))
        good = key.proof("POST", token_url())
        head, body, signature = good.split(".")
        unsigned_head = b64url(json.dumps({"typ": "dpop+jwt", "alg": "none", "jwk": key.jwk}))
        hs_head = b64url(json.dumps({"typ": "dpop+jwt", "alg": "HS256", "jwk": key.jwk}))
        tampered_body = b64url(json.dumps(dict(json.loads(base64.urlsafe_b64decode(body + "==")), htu=token_url() + "x")))
        for proof in (
            key.proof("POST", token_url(), header={"typ": "JWT"}),
            key.proof("POST", token_url(), header={"typ": None}),
            key.proof("POST", token_url(), header={"jwk": private_jwk}),
            key.proof("POST", token_url(), header={"jwk": Key("ES256").jwk}),  # signed by another key
            key.proof("POST", token_url(), header={"alg": "ES384"}),
            key.proof("POST", token_url(), claims={"jti": ""}),
            unsigned_head + "." + body + ".",
            hs_head + "." + body + "." + signature,
            head + "." + tampered_body + "." + signature,
            "not a jws",
        ):
            answer = call("POST", "/token", form, [("DPoP", proof)])
            self.assertRefusedAtToken(answer)
            self.assertTrue(answer.json["error_description"])
        self.assertEqual(stats(user)["dpop_proofs_refused"], 10)
        self.assertEqual(stats(user)["tokens_issued"], 0)
        # ath must be the hash of the token presented.
        _, key, tokens = self.bound_login()
        proof = key.proof("GET", BASE + "/api/me", token=tokens["access_token"] + "x")
        self.assertRefusedAtResource(resource("/api/me", tokens["access_token"], proof=proof), "invalid_dpop_proof")
        proof = key.proof("GET", BASE + "/api/me")  # no ath at all
        self.assertRefusedAtResource(resource("/api/me", tokens["access_token"], proof=proof), "invalid_dpop_proof")

    def test_a_known_key_does_not_stand_for_another_jwk(self):
        # The server keeps the keys it imported (dpop.Verifier._public_key): a jwk that differs from a
        # known one in any member is checked as a new key, never answered from what is kept.
        user, key, tokens = self.bound_login(label="cache")
        token = tokens["access_token"]
        self.assertEqual(resource("/api/me", token, key).status, 200)
        other = Key("ES256")
        for jwk in (
            dict(key.jwk, y=other.jwk["y"]),  # the known x, another point: not on the curve
            dict(key.jwk, x=other.jwk["x"]),
            other.jwk,  # another key altogether, signed by this one
            dict(key.jwk, use="enc"),  # the known point, but not a signing key
            dict(key.jwk, key_ops=["encrypt"]),
        ):
            proof = key.proof("GET", BASE + "/api/me", token=token, header={"jwk": jwk})
            self.assertRefusedAtResource(resource("/api/me", token, proof=proof), "invalid_dpop_proof")
        # The same point under the same alg with an extra harmless member is the same key (its thumbprint).
        proof = key.proof("GET", BASE + "/api/me", token=token, header={"jwk": dict(key.jwk, kid="k1")})
        self.assertEqual(resource("/api/me", token, proof=proof).status, 200)
        self.assertEqual(resource("/api/me", token, key).status, 200)
        self.assertEqual(stats(user)["dpop_proofs_refused"], 5)

    def test_two_dpop_headers_are_refused(self):
        import http.client

        user, key = new_user("two"), Key("ES256")
        parts = urllib.parse.urlsplit(BASE)
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        body = urllib.parse.urlencode({"grant_type": "password", "username": user, "password": PASSWORD, "client_id": CLIENT_ID})
        connection.putrequest("POST", "/token")
        connection.putheader("Content-Type", "application/x-www-form-urlencoded")
        connection.putheader("Content-Length", str(len(body)))
        connection.putheader("DPoP", key.proof("POST", token_url()))
        connection.putheader("DPoP", key.proof("POST", token_url()))
        connection.endheaders(body.encode("ascii"))
        response = connection.getresponse()
        answer = json.loads(response.read())
        connection.close()
        self.assertEqual((response.status, answer["error"]), (400, "invalid_dpop_proof"))

    def test_nonce_challenge_then_success(self):
        user, key = new_user("nonce"), Key("ES256")
        fault(user, "dpop_nonce")
        challenged = login(user, key)
        self.assertRefusedAtToken(challenged, "use_dpop_nonce")
        nonce = challenged.headers.get("DPoP-Nonce")
        self.assertTrue(nonce)
        answer = login(user, key, nonce=nonce)
        self.assertEqual(answer.status, 200, answer.raw)
        self.assertEqual(answer.json["token_type"], "DPoP")
        self.assertEqual(answer.headers.get("DPoP-Nonce"), nonce)
        token = answer.json["access_token"]
        # A resource challenges a proof without the nonce, and takes one with it.
        refused = resource("/api/me", token, key)
        self.assertRefusedAtResource(refused, "use_dpop_nonce")
        self.assertEqual(refused.headers.get("DPoP-Nonce"), nonce)
        ok = resource("/api/data", token, key, nonce=nonce)
        self.assertEqual(ok.status, 200, ok.raw)
        self.assertEqual(ok.headers.get("DPoP-Nonce"), nonce)
        # The refresh's user is the refresh token's: challenged too, then accepted with the nonce.
        self.assertRefusedAtToken(refresh(answer.json["refresh_token"], key), "use_dpop_nonce")
        renewed = refresh(answer.json["refresh_token"], key, nonce=nonce)
        self.assertEqual(renewed.status, 200, renewed.raw)
        # A rotated nonce makes the old one stale.
        fault(user, "dpop_nonce_rotate")
        stale = refresh(renewed.json["refresh_token"], key, nonce=nonce)
        self.assertRefusedAtToken(stale, "use_dpop_nonce")
        fresh = stale.headers.get("DPoP-Nonce")
        self.assertNotEqual(fresh, nonce)
        self.assertEqual(refresh(renewed.json["refresh_token"], key, nonce=fresh).status, 200)
        counters = stats(user)
        self.assertEqual(counters["dpop_nonce_challenges"], 4)
        self.assertEqual(counters["refresh_succeeded"], 2)
        self.assertEqual(counters["reuse_detected"], 0)
        # A user without the fault needs no nonce.
        self.assertEqual(login(new_user("no-nonce"), Key("ES256")).status, 200)
        self.assertIsNone(login(new_user("no-nonce"), Key("ES256")).headers.get("DPoP-Nonce"))

    def test_refresh_with_wrong_key_or_no_proof_spends_nothing(self):
        user, key, tokens = self.bound_login(label="wrongkey")
        self.assertRefusedAtToken(refresh(tokens["refresh_token"], Key("ES256")))
        self.assertRefusedAtToken(refresh(tokens["refresh_token"], Key("EdDSA")))
        self.assertRefusedAtToken(refresh(tokens["refresh_token"]))
        renewed = refresh(tokens["refresh_token"], key)
        self.assertEqual(renewed.status, 200, renewed.raw)
        self.assertEqual(renewed.json["token_type"], "DPoP")
        counters = stats(user)
        self.assertEqual((counters["reuse_detected"], counters["families_revoked"]), (0, 0))
        self.assertEqual(counters["dpop_proofs_refused"], 3)
        self.assertEqual(counters["dpop_jkt"], key.thumbprint)
        self.assertEqual(resource("/api/me", renewed.json["access_token"], key).status, 200)

    def test_code_and_device_grants_bind_too(self):
        # Authorization code with PKCE: the test plays the browser (user=NAME) and takes the code.
        user, key = new_user("code"), Key("EdDSA")
        verifier = b64url(os.urandom(32))
        challenge = b64url(hashlib.sha256(verifier.encode("ascii")).digest())
        redirect_uri = "http://127.0.0.1:9/callback"
        query = urllib.parse.urlencode({
            "response_type": "code", "client_id": CLIENT_ID, "redirect_uri": redirect_uri, "state": "s",
            "code_challenge": challenge, "code_challenge_method": "S256", "user": user,
        })
        redirect = call("GET", "/authorize?" + query)
        self.assertEqual(redirect.status, 302, redirect.raw)
        code = urllib.parse.parse_qs(urllib.parse.urlsplit(redirect.headers["Location"]).query)["code"][0]
        fault(user, "dpop_nonce")  # the code's user: its record says who
        form = {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri,
                "client_id": CLIENT_ID, "code_verifier": verifier}
        challenged = call("POST", "/token", form, [("DPoP", key.proof("POST", token_url()))])
        self.assertRefusedAtToken(challenged, "use_dpop_nonce")
        nonce = challenged.headers["DPoP-Nonce"]
        answer = call("POST", "/token", form, [("DPoP", key.proof("POST", token_url(), nonce=nonce))])
        self.assertEqual(answer.status, 200, answer.raw)
        self.assertEqual(answer.json["token_type"], "DPoP")
        self.assertEqual(stats(user)["dpop_jkt"], key.thumbprint)
        # Device authorization grant.
        user, key = new_user("device"), Key("ES256")
        device = call("POST", "/device_authorization", {"client_id": CLIENT_ID}).json
        self.assertEqual(call("POST", "/device", {"user_code": device["user_code"], "username": user}).status, 200)
        form = {"grant_type": "urn:ietf:params:oauth:grant-type:device_code", "device_code": device["device_code"], "client_id": CLIENT_ID}
        answer = call("POST", "/token", form, [("DPoP", key.proof("POST", token_url()))])
        self.assertEqual(answer.status, 200, answer.raw)
        self.assertEqual(answer.json["token_type"], "DPoP")
        self.assertEqual(resource("/api/me", answer.json["access_token"], key).json, {"user": user})

    def test_bearer_flows_unchanged(self):
        user = new_user("bearer")
        answer = login(user)
        self.assertEqual(answer.status, 200, answer.raw)
        self.assertEqual(answer.json["token_type"], "Bearer")
        self.assertIsNone(answer.headers.get("DPoP-Nonce"))
        token = answer.json["access_token"]
        self.assertEqual(resource("/api/me", token, scheme="Bearer").json, {"user": user})
        self.assertEqual(resource("/api/data", token, scheme="Bearer").status, 200)
        introspection = call("POST", "/introspect", {"token": token}).json
        self.assertEqual(introspection["token_type"], "Bearer")
        self.assertNotIn("cnf", introspection)
        renewed = refresh(answer.json["refresh_token"])
        self.assertEqual((renewed.status, renewed.json["token_type"]), (200, "Bearer"))
        # Reuse detection as before: the spent refresh token revokes the family.
        self.assertEqual(refresh(answer.json["refresh_token"]).json["error"], "invalid_grant")
        self.assertEqual(stats(user)["reuse_detected"], 1)
        refused = resource("/api/me", "no-such-token", scheme="Bearer")
        self.assertEqual((refused.status, refused.headers.get("WWW-Authenticate")), (401, 'Bearer error="invalid_token"'))
        refused = call("GET", "/api/data")
        self.assertEqual((refused.status, refused.headers.get("WWW-Authenticate")), (401, 'Bearer error="invalid_token"'))
        # An unbound token sent with the DPoP scheme is not a DPoP token.
        fresh = login(new_user("bearer")).json["access_token"]
        key = Key("ES256")
        self.assertRefusedAtResource(resource("/api/me", fresh, key), "invalid_token")
        counters = stats(user)
        self.assertEqual((counters["dpop_token_requests"], counters["dpop_jkt"]), (0, None))

    def test_refusals_show_no_token_values(self):
        user, key, tokens = self.bound_login(label="quiet")
        answers = [
            refresh(tokens["refresh_token"], Key("ES256")),
            refresh(tokens["refresh_token"]),
            resource("/api/me", tokens["access_token"], scheme="Bearer"),
            resource("/api/me", tokens["access_token"], Key("ES256")),
        ]
        for answer in answers:
            for value in (tokens["access_token"], tokens["refresh_token"]):
                self.assertNotIn(value, answer.raw)
                self.assertNotIn(value, str(answer.headers))


class VerifierTests(unittest.TestCase):
    """dpop.Verifier in process, on a clock the test moves: the jti replay cache's expiry order."""

    def setUp(self):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import dpop

        self.dpop = dpop
        self.now = 1_000_000.0
        self.verifier = dpop.Verifier(clock=lambda: self.now)
        self.key = Key("ES256")
        self.url = "http://127.0.0.1:1/api/me"

    def verify(self, proof):
        return self.verifier.verify([proof], "GET", self.url)

    def test_replays_are_refused_until_the_iat_window_has_passed(self):
        early = self.key.proof("GET", self.url, iat=int(self.now) - 50)
        late = self.key.proof("GET", self.url, iat=int(self.now) + 50)
        now = self.key.proof("GET", self.url, iat=int(self.now))
        for proof in (late, now, early):
            self.assertEqual(self.verify(proof), self.key.thumbprint)
        self.assertEqual(self.verifier.replay_cache_size(), 3)
        self.now += 40
        for proof in (now, late):
            with self.assertRaisesRegex(self.dpop.ProofError, "replayed"):
                self.verify(proof)
        # 66 s after the start: `now` and `early` were kept until start + 65; `late`, until start + 115.
        self.now += 26
        self.assertEqual(self.verifier.replay_cache_size(), 1)
        with self.assertRaisesRegex(self.dpop.ProofError, "replayed"):
            self.verify(late)  # still remembered (its iat is still inside the window)
        self.now += 50
        self.assertEqual(self.verifier.replay_cache_size(), 0)
        with self.assertRaisesRegex(self.dpop.ProofError, "iat"):
            self.verify(late)  # forgotten, and refused on its iat, now 66 s old


def start_server():
    """server.py on a free port; it prints the port once it listens (no polling)."""
    here = os.path.dirname(os.path.abspath(__file__))
    process = subprocess.Popen(
        [sys.executable, os.path.join(here, "server.py"), "--print-port", "--expires-in", "60"],
        stdout=subprocess.PIPE, text=True,
    )
    line = process.stdout.readline()
    if not line.strip().isdigit():
        process.kill()
        raise SystemExit("test_dpop: the test server did not start")
    return process, f"http://127.0.0.1:{line.strip()}"


def main():
    global BASE
    parser = argparse.ArgumentParser(description="DPoP checks of the test OAuth server")
    parser.add_argument("--url", default=os.environ.get("TOKENVAULT_TEST_OAUTH_URL"))
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args()
    process = None
    if args.url:
        BASE = args.url.rstrip("/")
    else:
        process, BASE = start_server()
    try:
        suite = unittest.TestSuite(unittest.defaultTestLoader.loadTestsFromTestCase(case) for case in (DPoPTests, VerifierTests))
        result = unittest.TextTestRunner(verbosity=2 if args.verbose else 1).run(suite)
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=30)
    sys.exit(0 if result.wasSuccessful() and result.testsRun > 0 else 1)


if __name__ == "__main__":
    main()
