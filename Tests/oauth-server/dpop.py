"""DPoP proof verification (RFC 9449) for the test authorization server (server.py).

The JOSE work (parsing the compact JWS, importing the ``jwk`` header, checking the ES256 or EdDSA
signature, the RFC 7638 thumbprint) is joserfc's, on cryptography's curves: nothing here checks a
signature by hand. What this module adds is RFC 9449's rules around it: ``typ``, the allowed
algorithms, a public key only, ``htm``/``htu``, the ``iat`` window, ``jti`` replay, ``ath`` and the
server's nonce. Error descriptions are fixed sentences: they never hold a token or a proof.

It verifies as a production verifier would, with nothing left out: the ``jwk`` of a proof is
imported (and its thumbprint taken) by joserfc once, then kept, keyed by the algorithm and the
whole ``jwk`` as canonical JSON, so a later proof with the same key is checked against the key
already imported (every member must be the same; any other ``jwk`` is imported and checked anew);
the signature is still verified by joserfc for every proof. The ``jti`` replay cache forgets
entries in the order they expire (a heap), instead of scanning every remembered ``jti`` twice per
proof. Both were measured (cProfile and CPU time of `Verifier.check`, for Scripts/bench --dpop-only):
the import and the thumbprint took about 50 of a check's 340 µs, and the scan grew with the proofs
of the last minute (about 0.1 µs per jti remembered, twice a proof: a fifth of a millisecond after
a thousand). The ECDSA verification itself, cryptography's, is about half of what is left.
Profiled again (issue 32, CPU time in interleaved blocks, no profiler): a check and record took
~155 µs, of which cryptography's ECDSA verification alone ~86 µs and joserfc around it ~20 µs; the
URLs split for ``htu`` and the ``ath`` hash of the same token were the avoidable work left, and
are kept per string too (~169 -> ~157 µs). What remains is the signature and RFC 9449's checks.
"""

import base64
import functools
import hashlib
import heapq
import json
import math
import secrets
import threading
import time
import warnings
from collections import OrderedDict
from urllib.parse import urlsplit

from joserfc import jws
from joserfc.errors import JoseError, SecurityWarning
from joserfc.jwk import ECKey, OKPKey

ALGORITHMS = ["ES256", "EdDSA"]
# RFC 9864 deprecates the name "EdDSA" in favour of "Ed25519"; RFC 9449 servers (and this contract)
# still advertise "EdDSA", so joserfc's warning about the name is expected here and not printed.
warnings.filterwarnings("ignore", message="EdDSA is deprecated", category=SecurityWarning)

# How far a proof's iat may be from the server's clock, either way (seconds).
IAT_WINDOW = 60
# The server-wide nonce changes at most this often (seconds); a test can also rotate it at once.
NONCE_LIFETIME = 300
# Members of a JWK that only a private key has (EC and OKP: d; RSA: the rest).
PRIVATE_MEMBERS = ("d", "p", "q", "dp", "dq", "qi", "oth", "k")
# Public keys imported and kept, as a production verifier keeps them (least recently used out first).
KEY_CACHE_SIZE = 1024
# URLs split and access tokens hashed, kept the same way (each a pure function of its string).
URL_CACHE_SIZE = 1024
_REGISTRY = jws.JWSRegistry(algorithms=ALGORITHMS)


class ProofError(Exception):
    """A proof that is refused: ``invalid_dpop_proof`` with a description that is safe to show."""


class NonceError(Exception):
    """A proof without the server's current nonce: answered ``use_dpop_nonce`` with the nonce."""


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


# Both below are pure functions of a string a resource server meets again and again (its own
# URLs, each proof's htu, the tokens in use): kept, bounded, as a production server keeps them.
@functools.lru_cache(maxsize=URL_CACHE_SIZE)
def access_token_hash(token):
    """RFC 9449 ``ath``: base64url (no padding) of the SHA-256 of the token's ASCII bytes."""
    return b64url(hashlib.sha256(token.encode("ascii")).digest())


@functools.lru_cache(maxsize=URL_CACHE_SIZE)
def _origin_and_path(url):
    """(scheme, host, port, path) of a URL, the parts an ``htu`` is compared on (RFC 9449 §4.3)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    port = parts.port or {"http": 80, "https": 443}.get(scheme)
    return scheme, (parts.hostname or "").lower(), port, parts.path or "/"


class Verifier:
    """Verifies proofs and keeps what that needs across requests: the jti replay cache and the nonce."""

    def __init__(self, clock=time.time):
        self._clock = clock
        self._lock = threading.Lock()
        # jti -> time after which it may be forgotten (its iat is then outside the window anyway),
        # and the same as a heap of (time, jti), so that pruning looks only at what has expired.
        self._seen = {}
        self._expiries = []
        # (alg, canonical jwk JSON) -> (joserfc key, RFC 7638 thumbprint), least recently used first.
        self._keys = OrderedDict()
        self._nonce = secrets.token_urlsafe(16)
        self._nonce_since = clock()

    def current_nonce(self):
        with self._lock:
            now = self._clock()
            if now - self._nonce_since >= NONCE_LIFETIME:
                self._nonce = secrets.token_urlsafe(16)
                self._nonce_since = now
            return self._nonce

    def rotate_nonce(self):
        """A new nonce now: proofs carrying the old one are stale from here on."""
        with self._lock:
            self._nonce = secrets.token_urlsafe(16)
            self._nonce_since = self._clock()

    def verify(self, headers, method, url, access_token=None, nonce_required=False):
        """Verifies the DPoP proof(s) in `headers` (a list of the request's DPoP header values) for a
        request of `method` to `url`. With `access_token`, ``ath`` must match it. Returns the key's
        RFC 7638 SHA-256 thumbprint (the ``jkt``). Raises ProofError or NonceError. The jti is
        recorded only when everything else holds, so a refused proof does not poison its jti."""
        claims, jkt = self.check(headers, method, url, access_token, nonce_required)
        self.record(claims)
        return jkt

    def check(self, headers, method, url, access_token=None, nonce_required=False):
        """Every check of `verify` but the recording of the jti: returns (claims, jkt)."""
        if len(headers) != 1:
            raise ProofError("exactly one DPoP header is required")
        value = headers[0].strip()
        try:
            compact = jws.extract_compact(value.encode("ascii"))
        except (JoseError, ValueError, UnicodeError, TypeError):
            raise ProofError("the DPoP proof is not a compact JWS") from None
        header = compact.protected
        if header.get("typ") != "dpop+jwt":
            raise ProofError("the DPoP proof's typ is not dpop+jwt")
        alg = header.get("alg")
        if alg not in ALGORITHMS:
            raise ProofError("the DPoP proof's alg is not one of ES256, EdDSA")
        jwk = header.get("jwk")
        if not isinstance(jwk, dict):
            raise ProofError("the DPoP proof has no jwk header")
        if any(member in jwk for member in PRIVATE_MEMBERS):
            raise ProofError("the DPoP proof's jwk is not a public key")
        key, jkt = self._public_key(jwk, alg)
        try:
            valid = jws.validate_compact(compact, key, registry=_REGISTRY)
        except (JoseError, ValueError, TypeError):
            valid = False
        if not valid:
            raise ProofError("the DPoP proof's signature does not verify with its jwk")
        try:
            claims = json.loads(compact.payload)
        except (ValueError, UnicodeError):
            raise ProofError("the DPoP proof's claims are not JSON") from None
        if not isinstance(claims, dict):
            raise ProofError("the DPoP proof's claims are not a JSON object")
        if claims.get("htm") != method:
            raise ProofError("the DPoP proof's htm is not this request's method")
        htu = claims.get("htu")
        if not isinstance(htu, str) or _origin_and_path(htu) != _origin_and_path(url):
            raise ProofError("the DPoP proof's htu is not this request's URL")
        iat = claims.get("iat")
        if isinstance(iat, bool) or not isinstance(iat, (int, float)) or not math.isfinite(iat):
            raise ProofError("the DPoP proof has no numeric iat")
        if abs(self._clock() - iat) > IAT_WINDOW:
            raise ProofError(f"the DPoP proof's iat is more than {IAT_WINDOW} s from the server's clock")
        jti = claims.get("jti")
        if not isinstance(jti, str) or not jti or len(jti) > 256:
            raise ProofError("the DPoP proof has no jti")
        if access_token is not None and claims.get("ath") != access_token_hash(access_token):
            raise ProofError("the DPoP proof's ath is not the hash of the access token")
        if nonce_required and claims.get("nonce") != self.current_nonce():
            raise NonceError("the server requires its current nonce in the DPoP proof")
        with self._lock:
            self._prune()
            if jti in self._seen:
                raise ProofError("the DPoP proof's jti was used before (a replayed proof)")
        return claims, jkt

    def record(self, claims):
        """Remembers the proof's jti: a second use of it is a replay."""
        with self._lock:
            self._prune()
            if claims["jti"] in self._seen:
                raise ProofError("the DPoP proof's jti was used before (a replayed proof)")
            # Kept until its iat is surely outside the window; a replay after that fails on iat.
            until = max(self._clock(), claims["iat"]) + IAT_WINDOW + 5
            self._seen[claims["jti"]] = until
            heapq.heappush(self._expiries, (until, claims["jti"]))

    def replay_cache_size(self):
        with self._lock:
            self._prune()
            return len(self._seen)

    def _prune(self):
        """Forgets the jtis whose time has passed, earliest first: O(log n) each, nothing else looked at."""
        now = self._clock()
        while self._expiries and self._expiries[0][0] < now:
            until, jti = heapq.heappop(self._expiries)
            if self._seen.get(jti) == until:
                del self._seen[jti]

    def key_cache_size(self):
        with self._lock:
            return len(self._keys)

    def _public_key(self, jwk, alg):
        """(key, thumbprint) of the ``jwk`` header: imported and checked by joserfc the first time
        this exact jwk comes with this alg, then taken from the cache. The cache key is the whole
        jwk, every member, so a jwk that differs in anything (an extra ``use``, another ``x``) is
        a key of its own, imported and checked as before; the checks of `_import_key` (the curve
        `alg` needs, a valid point) held for every key in the cache when it went in."""
        try:
            name = (alg, json.dumps(jwk, sort_keys=True, separators=(",", ":")))
        except (TypeError, ValueError):
            raise ProofError("the DPoP proof's jwk is not a valid public key") from None
        with self._lock:
            known = self._keys.get(name)
            if known is not None:
                self._keys.move_to_end(name)
                return known
        key = self._import_key(jwk, alg)
        known = (key, key.thumbprint())
        with self._lock:
            self._keys[name] = known
            while len(self._keys) > KEY_CACHE_SIZE:
                self._keys.popitem(last=False)
        return known

    @staticmethod
    def _import_key(jwk, alg):
        """The public key of the ``jwk`` header, of the kind `alg` needs (P-256 for ES256, Ed25519 for EdDSA)."""
        try:
            if alg == "ES256":
                if jwk.get("kty") != "EC" or jwk.get("crv") != "P-256":
                    raise ProofError("an ES256 proof needs a P-256 EC jwk")
                return ECKey.import_key(jwk)
            if jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519":
                raise ProofError("an EdDSA proof needs an Ed25519 OKP jwk")
            return OKPKey.import_key(jwk)
        except ProofError:
            raise
        except (JoseError, ValueError, TypeError, KeyError):
            raise ProofError("the DPoP proof's jwk is not a valid public key") from None
