"""The refresh history of the test OAuth server, per user: what Scripts/fleet's checker reads.

Every password and refresh-token request to ``POST /token`` is recorded when it arrives (before
any fault holds it) and again when it is answered: the user, the address it came from (in
Scripts/fleet, which namespace "host" sent it), the fingerprint of the refresh token presented,
the status, the OAuth error, and the fingerprints of the access and refresh tokens handed out.
``GET /history?user=NAME`` returns the user's records in the order they were answered, with the
requests still unanswered (held) after them. Token values are never kept or shown: a fingerprint
is the first 16 hex digits of the value's SHA-256.
"""

import hashlib
import threading
import time

from flask import g, jsonify, request

_LOCK = threading.Lock()
# user name -> [record] in the order answered; records are dicts of plain values
_ANSWERED = {}
# id(record) -> record, for the requests that arrived and are not answered yet
_PENDING = {}
_SEQUENCE = [0]


def fingerprint(value):
    if not value:
        return None
    return hashlib.sha256(value.encode("utf-8")).hexdigest()[:16]


def register(app, user_of_refresh_token):
    """Adds the recording hooks and ``GET /history`` to ``app``. ``user_of_refresh_token``
    names the user a refresh token was issued to (None if unknown)."""

    @app.before_request
    def arrived():
        if request.method != "POST" or request.path != "/token":
            return
        grant = request.form.get("grant_type")
        if grant not in ("refresh_token", "password"):
            return
        presented = request.form.get("refresh_token") if grant == "refresh_token" else None
        user = user_of_refresh_token(presented) if presented else request.form.get("username")
        record = {
            "user": user or "(unknown)",
            "grant": grant,
            "from": request.remote_addr,
            "arrived": time.time(),
            "presented": fingerprint(presented),
        }
        with _LOCK:
            _PENDING[id(record)] = record
        g.fleet_history = record

    @app.after_request
    def answered(response):
        record = g.pop("fleet_history", None)
        if record is None:
            return response
        body = response.get_json(silent=True) if response.is_json else None
        body = body if isinstance(body, dict) else {}
        record.update(
            status=response.status_code,
            answered=time.time(),
            error=body.get("error"),
            access=fingerprint(body.get("access_token")),
            refresh=fingerprint(body.get("refresh_token")),
        )
        with _LOCK:
            _PENDING.pop(id(record), None)
            _SEQUENCE[0] += 1
            record["seq"] = _SEQUENCE[0]
            _ANSWERED.setdefault(record["user"], []).append(record)
        return response

    @app.get("/history")
    def history():
        user = request.args.get("user", "")
        with _LOCK:
            answered = [dict(r) for r in _ANSWERED.get(user, [])]
            pending = [dict(r) for r in _PENDING.values() if r["user"] == user]
        return jsonify(answered=answered, pending=sorted(pending, key=lambda r: r["arrived"]))
