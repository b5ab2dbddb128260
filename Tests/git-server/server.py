#!/usr/bin/env python3
"""A smart-HTTP git server for the tests of `vault git-credential`: `git http-backend` (CGI)
behind a small HTTP server on 127.0.0.1, which accepts only a valid, unexpired bearer token as
the Basic-auth password.

* Listens on 127.0.0.1 on a free port and writes that port to --port-file once bound.
* Serves the repositories under --root (``GIT_PROJECT_ROOT``) with git http-backend, pushes
  included (``REMOTE_USER`` is the Basic-auth user name).
* Every request needs ``Authorization: Basic base64(user:token)``. The token is checked by asking
  the test OAuth server (--oauth-url) for ``GET /api/me`` with ``Authorization: Bearer <token>``:
  200 means a live token; anything else (unknown, expired, revoked) gets ``401`` with
  ``WWW-Authenticate: Basic realm="tokenvault-test"``, which is what makes git ask its
  credential helpers and, for a refused credential, report "Authentication failed".
* ``GET /_stats`` (no authentication) answers how many requests were refused and accepted.

It never logs a token: request logging is off. Uses only the standard library.
"""

import argparse
import base64
import json
import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STATS_LOCK = threading.Lock()
STATS = {"refused": 0, "accepted": 0}


def token_is_live(oauth_url, token):
    request = urllib.request.Request(oauth_url.rstrip("/") + "/api/me", headers={"Authorization": "Bearer " + token})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status == 200
    except urllib.error.HTTPError:
        return False


def make_handler(root, oauth_url):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format, *args):  # no request log: URLs are harmless, but keep it quiet
            pass

        def do_GET(self):
            if self.path == "/_stats":
                with STATS_LOCK:
                    body = json.dumps(STATS).encode()
                self.respond(200, {"Content-Type": "application/json"}, body)
                return
            self.serve()

        def do_POST(self):
            self.serve()

        def respond(self, status, headers, body):
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def read_body(self):
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return b"".join(chunks)
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def user(self):
            """The Basic-auth user whose password is a live token, or None."""
            scheme, _, value = self.headers.get("Authorization", "").partition(" ")
            if scheme.lower() != "basic":
                return None
            try:
                user, _, token = base64.b64decode(value.strip(), validate=True).decode().partition(":")
            except Exception:
                return None
            if not user or not token or not token_is_live(oauth_url, token):
                return None
            return user

        def serve(self):
            body = self.read_body()
            user = self.user()
            with STATS_LOCK:
                STATS["accepted" if user else "refused"] += 1
            if user is None:
                self.respond(401, {"WWW-Authenticate": 'Basic realm="tokenvault-test"'}, b"authentication required\n")
                return
            path, _, query = self.path.partition("?")
            environment = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "GIT_PROJECT_ROOT": root,
                "GIT_HTTP_EXPORT_ALL": "1",
                "REQUEST_METHOD": self.command,
                "PATH_INFO": path,
                "QUERY_STRING": query,
                "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                "CONTENT_LENGTH": str(len(body)),
                "REMOTE_USER": user,
                "REMOTE_ADDR": self.client_address[0],
                "GIT_HTTP_MAX_REQUEST_BUFFER": "100M",
            }
            if self.headers.get("Content-Encoding"):
                environment["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
            if self.headers.get("Git-Protocol"):
                environment["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
            result = subprocess.run(
                ["git", "http-backend"], input=body, env=environment, capture_output=True, timeout=60
            )
            separator = b"\r\n\r\n" if b"\r\n\r\n" in result.stdout else b"\n\n"
            head, _, payload = result.stdout.partition(separator)
            status = 200
            headers = {}
            for line in head.decode("latin-1").splitlines():
                name, _, value = line.partition(":")
                if name.lower() == "status":
                    status = int(value.strip().split()[0])
                elif name:
                    headers[name] = value.strip()
            if result.returncode != 0 and status == 200:
                status = 500
                sys.stderr.write(result.stderr.decode(errors="replace"))
            self.respond(status, headers, payload)

    return Handler


def main():
    # A child of a multi-threaded test runner may start with signals blocked; stopping by PID needs them.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, help="the directory holding the bare repositories")
    parser.add_argument("--oauth-url", required=True, help="the test OAuth server, which checks tokens at /api/me")
    parser.add_argument("--port-file", required=True, help="write the bound port here once listening")
    args = parser.parse_args()

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(os.path.abspath(args.root), args.oauth_url))
    temporary = args.port_file + ".tmp"
    with open(temporary, "w") as handle:
        handle.write(f"{httpd.server_port}\n")
    os.replace(temporary, args.port_file)

    def stop(signum, frame):
        threading.Thread(target=httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    httpd.serve_forever()


if __name__ == "__main__":
    main()
