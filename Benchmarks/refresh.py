"""The refresh section of Scripts/bench (issue 14): what `vault get --fresh` costs.

Goals, from the issue:
  - `vault get --fresh` on a token that is still fresh costs at most 1.1x plain `vault get`
    (no network, no lock);
  - a refresh adds at most one round trip to the token endpoint plus one durable write
    (issue 33 adds one more: the journal, "this refresh token is being presented", is made
    durable before the request leaves, so a refresh now costs two durable writes at most).

How they are measured, with the real `vault` binary against the test OAuth server
(Tests/oauth-server, authlib), which this script starts on 127.0.0.1 and stops:
  - time: whole cold processes, `vault get` and `vault get --fresh` interleaved, medians; on the
    file backend (key file) and, when Scripts/bench's private gnome-keyring is up, the Secret Service;
  - no network, no lock: one fresh `get --fresh` under `strace -f`, counting connect(2) to the
    server's port, opens of the refresh lock files (`*.locks/`) and flock(2), and the server's
    own count of token requests;
  - one round trip: the server's count of refresh requests (and strace's connects) for one
    `get --fresh` on a token that expires within the leeway;
  - one durable write: fsync(2)/fdatasync(2) calls of that refreshing `get --fresh`, against
    those of `vault set` overwriting the same entry (the vault's durable write), both under
    `strace -f`, on the file backend, where the process itself syncs.

It prints a Markdown section (and appends it to --append, the report of the rest of the bench).
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(HERE, "..", "Tests", "oauth-server", "server.py")
CLIENT_ID = "tokenvault-example"


def log(message):
    sys.stderr.write("bench refresh: %s\n" % message)
    sys.stderr.flush()


class Server:
    """The test OAuth server on a free loopback port, with tokens that live an hour (or `expires_in` s)."""

    def __init__(self, python, scratch, expires_in=3600):
        self.port_file = os.path.join(scratch, "oauth.port")
        self.log_path = os.path.join(scratch, "oauth.log")
        self.process = subprocess.Popen(
            [python, SERVER, "--port-file", self.port_file, "--expires-in", str(expires_in)],
            stdout=subprocess.DEVNULL, stderr=open(self.log_path, "w"))
        for _ in range(200):
            if os.path.exists(self.port_file) and open(self.port_file).read().strip():
                break
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        else:
            self.stop()
            raise RuntimeError("the test OAuth server did not start within 10 s")
        if self.process.poll() is not None:
            raise RuntimeError("the test OAuth server exited: " + open(self.log_path).read()[-2000:])
        self.port = int(open(self.port_file).read().strip())
        self.url = "http://127.0.0.1:%d" % self.port

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def login(self, user):
        body = urllib.parse.urlencode({"grant_type": "password", "username": user, "password": "test-password",
                                       "client_id": CLIENT_ID}).encode()
        with urllib.request.urlopen(self.url + "/token", data=body, timeout=30) as response:
            return json.loads(response.read())

    def stats(self, user):
        with urllib.request.urlopen(self.url + "/stats?" + urllib.parse.urlencode({"user": user}), timeout=30) as response:
            return json.loads(response.read())


class Refresh:
    def __init__(self, args):
        self.args = args
        self.vault = args.vault_bin
        self.scratch = args.scratch
        self.key_file = os.path.join(self.scratch, "refresh.key")
        with open(os.open(self.key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as handle:
            handle.write(os.urandom(32))
        self.backends = {
            "file": ["--backend", "file", "--file", os.path.join(self.scratch, "refresh.vault"), "--key-file", self.key_file],
        }
        if args.secret_service:
            self.backends["secret-service"] = ["--backend", "secret-service"]
        self.results = {"runs": args.runs, "time": {}, "fresh_trace": {}, "refresh": {}, "authorized": None}

    def run_vault(self, arguments, options, stdin=None, strace=None):
        argv = [self.vault, *arguments, *options]
        if strace is not None:
            argv = ["strace", "-f", "-qq", "-e", "trace=connect,openat,flock,fsync,fdatasync", "-o", strace, *argv]
        process = subprocess.run(argv, input=stdin, capture_output=True, text=True)
        if process.returncode != 0:
            raise RuntimeError("vault %s failed (exit %d): %s" % (arguments[0], process.returncode, process.stderr.strip()))
        return process.stdout

    def store(self, options, service, response, expires_in):
        """`vault set` with the refresh description, the token expiring in `expires_in` seconds."""
        fields = dict(response, expires_in=expires_in)
        return self.run_vault(["set", service, "acct", "--token-url", self.server.url + "/token", "--client-id", CLIENT_ID],
                              options, stdin=json.dumps(fields))

    def current(self, options, service):
        return json.loads(self.run_vault(["get", service, "acct", "--json", "--allow-expired"], options))

    def trace(self, path):
        """connect(2)s to the server, refresh lock files opened, flock(2)s and syncs in an strace -f log."""
        counts = {"connect_server": 0, "lock_files": 0, "flock": 0, "fsync": 0, "fdatasync": 0}
        port = "sin_port=htons(%d)" % self.server.port
        with open(path) as handle:
            for line in handle:
                if re.search(r"\bconnect\(", line) and port in line:
                    counts["connect_server"] += 1
                elif re.search(r"\bopenat\(", line) and (".locks/" in line or "token-vault/locks/" in line):
                    counts["lock_files"] += 1
                elif re.search(r"\bflock\(", line):
                    counts["flock"] += 1
                elif re.search(r"\bfdatasync\(", line):
                    counts["fdatasync"] += 1
                elif re.search(r"\bfsync\(", line):
                    counts["fsync"] += 1
        return counts

    @staticmethod
    def timed(argv):
        """Runs argv to its end: (wall ms, user+system CPU ms of the process)."""
        start = time.perf_counter_ns()
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(process.pid, 0)
        wall = (time.perf_counter_ns() - start) / 1e6
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            raise RuntimeError("%s exited %d" % (" ".join(argv[1:3]), process.returncode))
        return wall, (usage.ru_utime + usage.ru_stime) * 1000

    def measure(self):
        strace = shutil.which("strace")
        for backend, options in self.backends.items():
            service = "bench-refresh-%s" % backend
            user = "bench-%s-%d" % (backend, os.getpid())
            response = self.server.login(user)
            self.store(options, service, response, 3600)
            plain = ["get", service, "acct"]
            fresh = plain + ["--fresh"]
            expected = response["access_token"]
            for argv in (plain, fresh):
                if self.run_vault(argv, options).strip() != expected:
                    raise RuntimeError("vault %s printed another token" % " ".join(argv))
            before = self.server.stats(user)
            log("%s: %d cold runs each of `vault get` and `vault get --fresh`, interleaved" % (backend, self.args.runs))
            times = {"get": [], "get --fresh": []}
            cpu = {"get": [], "get --fresh": []}
            for repetition in range(self.args.runs + self.args.warmup):
                for name, argv in (("get", plain), ("get --fresh", fresh)):
                    wall, used = self.timed([self.vault, *argv, *options])
                    if repetition >= self.args.warmup:
                        times[name].append(wall)
                        cpu[name].append(used)
            after = self.server.stats(user)
            self.results["time"][backend] = {
                "times_ms": times,
                "cpu_ms": cpu,
                "token_requests": after["tokens_issued"] - before["tokens_issued"] + after["refresh_requests"] - before["refresh_requests"],
            }

            if strace is None:
                continue
            path = os.path.join(self.scratch, "fresh-%s.strace" % backend)
            self.run_vault(fresh, options, strace=path)
            self.results["fresh_trace"][backend] = self.trace(path)
            path = os.path.join(self.scratch, "plain-%s.strace" % backend)
            self.run_vault(plain, options, strace=path)
            self.results["fresh_trace"][backend]["plain_flock"] = self.trace(path)["flock"]

            if backend != "file":
                continue
            # The durable write a refresh must not exceed: `vault set` overwriting the same entry.
            rounds = []
            for round_ in range(self.args.refresh_rounds):
                token = self.current(options, service)
                stale = {"access_token": token["access_token"], "token_type": token["token_type"],
                         "refresh_token": token["refresh_token"]}
                set_trace = os.path.join(self.scratch, "set-%d.strace" % round_)
                fields = dict(stale, expires_in=30)  # within get --fresh's 60 s leeway: it refreshes
                self.run_vault(["set", service, "acct", "--token-url", self.server.url + "/token", "--client-id", CLIENT_ID],
                               options, stdin=json.dumps(fields), strace=set_trace)
                before = self.server.stats(user)
                refresh_trace = os.path.join(self.scratch, "refresh-%d.strace" % round_)
                start = time.perf_counter_ns()
                printed = self.run_vault(fresh, options, strace=refresh_trace).strip()
                elapsed = (time.perf_counter_ns() - start) / 1e6
                after = self.server.stats(user)
                now = self.current(options, service)
                if printed != now["access_token"] or printed == stale["access_token"]:
                    raise RuntimeError("the refreshing get --fresh did not print the new stored token")
                rounds.append({
                    "set": self.trace(set_trace),
                    "refresh": self.trace(refresh_trace),
                    "refresh_requests": after["refresh_requests"] - before["refresh_requests"],
                    "other_token_requests": after["tokens_issued"] - before["tokens_issued"] - (after["refresh_succeeded"] - before["refresh_succeeded"]),
                    "ms_under_strace": elapsed,
                })
            self.results["refresh"][backend] = rounds

    def measure_authorized(self):
        """tokenvault-bench authorized: the URLSession adapter against the header set by hand."""
        if not self.args.bench_bin:
            return
        user = "bench-authorized-%d" % os.getpid()
        response = self.server.login(user)
        before = self.server.stats(user)
        log("authorized requests: %d interleaved rounds, adapter vs header by hand" % self.args.authorized_rounds)
        process = subprocess.run(
            [self.args.bench_bin, "authorized", "--file", os.path.join(self.scratch, "authorized.vault"),
             "--key-file", self.key_file, "--url", self.server.url + "/api/data", "--token-url", self.server.url + "/token",
             "--rounds", str(self.args.authorized_rounds)],
            input=json.dumps(response), capture_output=True, text=True)
        if process.returncode != 0:
            raise RuntimeError("tokenvault-bench authorized failed: %s" % process.stderr.strip())
        result = json.loads(process.stdout)
        after = self.server.stats(user)
        result["refresh_requests"] = after["refresh_requests"] - before["refresh_requests"]
        self.results["authorized"] = result

    def measure_dpop(self):
        """tokenvault-bench dpop (issue 32): proofs/s in process (a loaded key, and through the vault),
        and a resource call with a DPoP-bound token through each adapter (URLSession, AsyncHTTPClient)
        against the same with a Bearer token."""
        if not self.args.bench_bin:
            return
        bearer_user = "bench-dpop-bearer-%d" % os.getpid()
        dpop_user = "bench-dpop-bound-%d" % os.getpid()
        response = self.server.login(bearer_user)
        log("DPoP: proofs/s, then %d interleaved resource calls through each adapter, DPoP vs Bearer" % self.args.authorized_rounds)
        process = subprocess.run(
            [self.args.bench_bin, "dpop", "--file", os.path.join(self.scratch, "dpop.vault"),
             "--key-file", self.key_file, "--url", self.server.url + "/api/data", "--token-url", self.server.url + "/token",
             "--dpop-user", dpop_user, "--rounds", str(self.args.authorized_rounds), "--seconds", "1" if self.args.quick else "3"],
            input=json.dumps(response), capture_output=True, text=True)
        if process.returncode != 0:
            raise RuntimeError("tokenvault-bench dpop failed: %s" % process.stderr.strip())
        result = json.loads(process.stdout)
        stats = self.server.stats(dpop_user)
        result["dpop_resource_requests"] = stats.get("dpop_resource_requests")
        result["dpop_proofs_refused"] = stats.get("dpop_proofs_refused")
        # The server's own time verifying the proofs (joserfc, in Python: the check, the key's binding,
        # the jti recorded), apart from the client's cost.
        result["server_verify_ms_per_request"] = (
            stats.get("dpop_resource_verify_seconds", 0.0) * 1000 / stats["dpop_resource_requests"]
            if stats.get("dpop_resource_requests") else None)
        # ... and its CPU time (the handling thread's): the wall time above counts the machine's load too.
        result["server_verify_cpu_ms_per_request"] = (
            stats["dpop_resource_verify_cpu_seconds"] * 1000 / stats["dpop_resource_requests"]
            if stats.get("dpop_resource_requests") and "dpop_resource_verify_cpu_seconds" in stats else None)
        result["refresh_requests"] = stats["refresh_requests"] + self.server.stats(bearer_user)["refresh_requests"]
        self.results["dpop"] = result

    def run(self):
        self.server = Server(self.args.oauth_python, self.scratch)
        try:
            if not self.args.adapters_only:
                self.measure()
            self.measure_authorized()
            self.measure_dpop()
        finally:
            self.server.stop()
        return self.results


def median(values):
    return statistics.median(values) if values else None


def table(header, rows):
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]
    def line(cells):
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(r) for r in rows])


def render(results, adapters_only=False):
    goals = []
    rows = []
    for backend, entry in results["time"].items():
        plain, fresh = median(entry["times_ms"]["get"]), median(entry["times_ms"]["get --fresh"])
        cpu_plain, cpu_fresh = median(entry["cpu_ms"]["get"]), median(entry["cpu_ms"]["get --fresh"])
        # The goal is judged on CPU time (user + system) of the process: the machine is shared,
        # and wall time measures the neighbours' load as much as the command. Wall time is shown too.
        ratio = cpu_fresh / cpu_plain
        wall_ratio = fresh / plain
        trace = results["fresh_trace"].get(backend)
        rows.append([backend, len(entry["times_ms"]["get"]), "%.1f ms" % cpu_plain, "%.1f ms" % cpu_fresh, "%.2f×" % ratio,
                     "%.1f ms" % plain, "%.1f ms" % fresh, "%.2f×" % wall_ratio])
        quiet = entry["token_requests"] == 0 and (trace is None or (
            trace["connect_server"] == 0 and trace["lock_files"] == 0 and trace["flock"] <= trace["plain_flock"]))
        goals.append(["%s: `vault get --fresh` on a fresh token ≤ 1.1× `vault get`" % backend, "%.2f×" % ratio,
                      "MET" if ratio <= 1.1 else "MISSED",
                      "CPU time (user+system), medians of %d interleaved cold runs: %.1f vs %.1f ms; wall %.2f×" % (
                          len(entry["times_ms"]["get"]), cpu_fresh, cpu_plain, wall_ratio)])
        goals.append(["%s: a fresh token costs no network and no lock" % backend,
                      "%d token requests, %s" % (entry["token_requests"], "no strace" if trace is None else
                                                 "%d connects, %d lock files, %d flock(2) vs %d for `vault get`" % (
                                                     trace["connect_server"], trace["lock_files"], trace["flock"], trace["plain_flock"])),
                      "MET" if quiet else "MISSED",
                      "the server's counts over all timed runs; one run under strace -f"])
    for backend, rounds in results["refresh"].items():
        trips = max(r["refresh_requests"] + r["other_token_requests"] for r in rounds)
        connects = max(r["refresh"]["connect_server"] for r in rounds)
        syncs = max(r["refresh"]["fsync"] + r["refresh"]["fdatasync"] for r in rounds)
        set_syncs = min(r["set"]["fsync"] + r["set"]["fdatasync"] for r in rounds)
        goals.append(["%s: a refresh adds one round trip to the token endpoint" % backend,
                      "%d request(s), %d connect(s)" % (trips, connects), "MET" if trips <= 1 and connects <= 1 else "MISSED",
                      "worst of %d refreshing `get --fresh`: the server's count and strace's connects" % len(rounds)])
        goals.append(["%s: … and two durable writes (the journal, then the answer)" % backend,
                      "%d sync call(s) vs %d for `vault set`" % (syncs, set_syncs), "MET" if syncs <= 2 * set_syncs else "MISSED",
                      "fsync+fdatasync under strace -f; `vault set` overwriting the same entry is one durable write; "
                      "%.0f ms per refreshing run under strace" % median([r["ms_under_strace"] for r in rounds])])
    authorized = results.get("authorized")
    if authorized:
        # The goal compares the adapter with what a user wrote without it: a fresh token from the
        # vault, the header, the request. Against a header from a token read once, the difference
        # is the vault read itself, shown beside it.
        ratio = authorized["adapter_median_ms"] / authorized["hand_fresh_median_ms"]
        floor = authorized["adapter_median_ms"] / authorized["hand_median_ms"]
        goals.append(["an authorized request through an adapter ≤ 1.05× the header set by hand (issue 31)", "%.3f×" % ratio,
                      "MET" if ratio <= 1.05 else "MISSED",
                      "URLSession adapter vs the same request with freshToken and the header set by hand, medians of %d "
                      "interleaved in-process requests to the test server's /api/data on a file vault: %.3f vs %.3f ms "
                      "(CPU %.3f vs %.3f ms); against a header from a token read once (no vault read): %.3f ms, %.3f×; "
                      "%d refresh(es)" % (
                          authorized["rounds"], authorized["adapter_median_ms"], authorized["hand_fresh_median_ms"],
                          authorized["adapter_cpu_ms_per_request"], authorized["hand_fresh_cpu_ms_per_request"],
                          authorized["hand_median_ms"], floor, authorized["refresh_requests"])])
    else:
        goals.append(["an authorized request through an adapter ≤ 1.05× the header set by hand (issue 31)", "–",
                      "NOT MEASURED", "run with --bench-bin"])
    dpop = results.get("dpop")
    if dpop:
        rate = dpop["proofs_per_cpu_second_ES256"]
        goals.append(["DPoP proofs signed in process ≥ 5,000/s on one core (issue 32)", "%.0f/s" % rate,
                      "MET" if rate >= 5000 else "MISSED",
                      "DPoPKey.proof (claims, ath, base64url, ES256 signature by swift-crypto) in a loop on one thread, "
                      "per CPU second; wall: %.0f/s; EdDSA: %.0f/s per CPU second" % (
                          dpop["proofs_per_second_ES256"], dpop["proofs_per_cpu_second_EdDSA"])])
        goals.append(["DPoP proofs through the vault, as the agent signs them (issue 32; no goal of its own)",
                      "%.0f/s" % dpop["vault_proofs_per_cpu_second"], "figure",
                      "Vault.dpopProof in a loop on one thread (each: the entry read and opened, its key loaded, a proof "
                      "signed), per CPU second; wall: %.0f/s" % dpop["vault_proofs_per_second"]])
        verify = dpop.get("server_verify_ms_per_request")
        verify_cpu = dpop.get("server_verify_cpu_ms_per_request")
        client_extra_ms = (dpop["dpop_headers_median_us"] - dpop["bearer_headers_median_us"]) / 1000
        for prefix, adapter in (("", "URLSession"), ("ahc_", "AsyncHTTPClient")):
            if prefix + "dpop_median_ms" not in dpop:
                goals.append(["a resource call with DPoP through the %s adapter ≤ 1.1× Bearer (issue 32)" % adapter, "–",
                              "NOT MEASURED", "tokenvault-bench printed no figures for this adapter (keys %s*)" % prefix])
                continue
            bearer, bound = dpop[prefix + "bearer_median_ms"], dpop[prefix + "dpop_median_ms"]
            ratio = bound / bearer
            goals.append(["a resource call with DPoP through the %s adapter ≤ 1.1× Bearer, the whole call (issue 32)" % adapter,
                          "%.3f×" % ratio, "MET" if ratio <= 1.1 else "MISSED",
                          "%s adapter, DPoP-bound token (a proof per request, verified by the test server: joserfc in "
                          "Python) vs a Bearer token, medians of %d interleaved in-process requests to /api/data on a "
                          "file vault: %.3f vs %.3f ms, +%.3f ms; of which the server's verification %s ms wall, %s ms "
                          "CPU (%s of the Bearer call; the mean over both adapters' DPoP calls) and the client's header "
                          "fields %.3f ms (%.1f%%); client CPU per request %.3f vs %.3f ms" % (
                              adapter, dpop["rounds"], bound, bearer, bound - bearer,
                              "–" if verify is None else "%.3f" % verify,
                              "–" if verify_cpu is None else "%.3f" % verify_cpu,
                              "–" if verify is None else "%.1f%%" % (100 * verify / bearer),
                              client_extra_ms, 100 * client_extra_ms / bearer,
                              dpop[prefix + "dpop_cpu_ms_per_request"], dpop[prefix + "bearer_cpu_ms_per_request"])])
        share = client_extra_ms / dpop["bearer_median_ms"]
        goals.append(["… the client's part: what DPoP adds on the client ≤ 10% of a Bearer call (issue 32's 1.1×, "
                      "the server's verification left out)", "+%.1f%%" % (100 * share), "MET" if share <= 0.1 else "MISSED",
                      "the header fields TokenAuthorizer sets (Vault.authorizationHeaders: the entry read, its key, a proof "
                      "signed), without the network: %.1f µs for DPoP vs %.1f µs for Bearer (medians of %d interleaved), "
                      "against the URLSession Bearer call's %.3f ms; the server: %s DPoP requests, %s refused; %d "
                      "refresh(es)" % (
                          dpop["dpop_headers_median_us"], dpop["bearer_headers_median_us"], dpop["rounds"],
                          dpop["bearer_median_ms"], dpop["dpop_resource_requests"], dpop["dpop_proofs_refused"],
                          dpop["refresh_requests"])])
    else:
        goals.append(["DPoP proofs and resource calls (issue 32)", "–", "NOT MEASURED", "run with --bench-bin"])
    if adapters_only:
        lines = ["### Adapters: authorized requests and DPoP (issues #31 and #32; Scripts/bench --dpop-only)", "",
                 table(["goal", "measured", "status", "how"], [[g[0], g[1], "**%s**" % g[2], g[3]] for g in goals]), "",
                 "In-process requests through the adapters against the test OAuth server (Tests/oauth-server) on "
                 "127.0.0.1, with tokens that live an hour; the cold `vault get --fresh` measurements of a full "
                 "refresh section were not run."]
        return finish(lines, goals)
    if not results["refresh"]:
        goals.append(["file: a refresh adds one round trip and one durable write", "–", "NOT MEASURED", "strace is not installed"])
    lines = ["### Refresh: `vault get --fresh` (issue #14)", "",
             table(["goal", "measured", "status", "how"], [[g[0], g[1], "**%s**" % g[2], g[3]] for g in goals]), "",
             table(["backend", "runs", "CPU `vault get`", "CPU `vault get --fresh`", "ratio",
                    "wall `vault get`", "wall `vault get --fresh`", "wall ratio"], rows), "",
             "Cold whole processes against the test OAuth server (Tests/oauth-server) on 127.0.0.1, with tokens that "
             "live an hour. On the Secret Service the durable write happens in the keyring daemon, so only the file "
             "backend's syncs are counted."]
    return finish(lines, goals)


def finish(lines, goals):
    met = sum(1 for g in goals if g[2] == "MET")
    lines.append("")
    lines.append("%d met, %d missed, %d not measured." % (met, sum(1 for g in goals if g[2] == "MISSED"),
                                                          sum(1 for g in goals if g[2] == "NOT MEASURED")))
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vault-bin", required=True)
    parser.add_argument("--bench-bin", help="tokenvault-bench, for the authorized-request measurement")
    parser.add_argument("--oauth-python", required=True, help="a Python with authlib and Flask (Tests/oauth-server/requirements.txt)")
    parser.add_argument("--scratch", required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--secret-service", action="store_true", help="also measure the Secret Service backend")
    parser.add_argument("--append", help="append the section to this Markdown report")
    parser.add_argument("--json", help="write the raw figures here")
    parser.add_argument("--adapters-only", action="store_true",
                        help="only the in-process adapter measurements (issue 31's authorized request, issue 32's DPoP): "
                             "no cold `vault` processes, no strace (Scripts/bench --dpop-only)")
    args = parser.parse_args()
    args.runs = 5 if args.quick else 30
    args.warmup = 1 if args.quick else 2
    args.refresh_rounds = 2 if args.quick else 5
    args.authorized_rounds = 100 if args.quick else 1000
    os.makedirs(args.scratch, mode=0o700, exist_ok=True)
    results = Refresh(args).run()
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=1)
    text = render(results, adapters_only=args.adapters_only)
    if args.append:
        with open(args.append, "a") as handle:
            handle.write("\n" + text)
    print()
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
