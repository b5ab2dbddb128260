"""Runs TokenVault and its peers side by side (issue 7) and reports ratios, raw figures and goals.

Scripts/bench runs this inside a private D-Bus session with a throwaway gnome-keyring, with the
venv of Benchmarks/requirements.txt, after building `vault` and `tokenvault-bench` in release
mode. Every measurement is a fresh process: Sources/tokenvault-bench for TokenVault,
Benchmarks/peers.py for the Python peers. Each prints one JSON object; this script only runs
them, takes medians and writes the report (to stdout, and as Markdown to --output).
"""

import argparse
import datetime
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE = os.path.join(HERE, "token-template.json")
PEERS = os.path.join(HERE, "peers.py")

FULL = {
    "mode": "full",
    # Rounds of the fast measurements (TokenVault's file backend, floor, scale, multi-process).
    "runs": 3,
    # Rounds of W1 for Python keyring and keyrings.cryptfile: each takes minutes at N=1,000 on 2
    # busy cores, so one round keeps the run near 15 min. --rounds K raises it.
    "slow_runs": 1,
    # Rounds of W1 for TokenVault on gnome-keyring and the secretstorage rows that issue 17's goals
    # compare it with: gnome-keyring rewrites its file on every change, and one round's medians
    # moved by 20-40 % between rounds on this machine, so one round could decide a goal by chance.
    # Their order is reversed in every other round.
    "ss_runs": 3,
    "w1_n": 1000,
    # keyrings.cryptfile with its default Argon2id runs about 1-3 ops/s: N=1,000 would take an hour.
    "cryptfile_default_n": 10,
    "scale_ns": [100, 1000, 10000, 100000],
    "scale_gets": 100000,
    "scale_sets": 300,
    "scale_batch": 10000,
    "mp_writers": 4,
    "mp_count": 250,
    "floor_blocks": 10,
    "floor_per_block": 50,
    # Repetitions of each cold command, interleaved: fast commands, then Argon2id ones.
    "cli_runs": 30,
    "cli_slow_runs": 5,
    "cli_warmup": 2,
}

QUICK = {
    "mode": "quick",
    "runs": 1,
    "slow_runs": 1,
    "ss_runs": 1,
    "w1_n": 100,
    "cryptfile_default_n": 3,
    "scale_ns": [100, 1000, 10000],
    "scale_gets": 20000,
    "scale_sets": 100,
    "scale_batch": 10000,
    "mp_writers": 4,
    "mp_count": 50,
    "floor_blocks": 4,
    "floor_per_block": 25,
    "cli_runs": 5,
    "cli_slow_runs": 1,
    "cli_warmup": 1,
}

W1_BACKENDS = [
    # id, label, TokenVault?, how many rounds (the config key)
    ("tv-file", "TokenVault file (key file)", True, "runs"),
    ("tv-ss", "TokenVault secret-service", True, "ss_runs"),
    ("keyring", "Python keyring (SecretService)", False, "slow_runs"),
    ("secretstorage", "secretstorage (one connection)", False, "ss_runs"),
    ("secretstorage-tv-shape", "secretstorage writing TokenVault's item shape", False, "ss_runs"),
    ("cryptfile-cheap", "keyrings.cryptfile, cheap KDF", False, "slow_runs"),
    ("cryptfile-default", "keyrings.cryptfile, default Argon2id", False, "slow_runs"),
]
LABELS = {backend: label for backend, label, _, _ in W1_BACKENDS}
PHASES = ["set", "get", "overwrite", "delete"]
CRYPTFILE_PASSWORD = "tokenvault-bench-throwaway-passphrase"


def log(message):
    sys.stderr.write("bench: %s\n" % message)
    sys.stderr.flush()


class Unavailable(Exception):
    pass


class Bench:
    def __init__(self, args, config):
        self.args = args
        self.config = config
        self.scratch = args.scratch
        self.bench = args.bench_bin
        self.vault = args.vault_bin
        self.python = sys.executable
        self.results = {"config": config, "w1": {}, "floor": [], "scale": {}, "mp": {}, "cli": {}}
        self.key_file = self.path("bench.key")
        with open(os.open(self.key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as handle:
            handle.write(os.urandom(32))
        self.password_file = self.path("bench.passphrase")
        with open(os.open(self.password_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as handle:
            handle.write(CRYPTFILE_PASSWORD + "\n")

    def path(self, name):
        return os.path.join(self.scratch, name)

    def run_json(self, argv, **kwargs):
        process = subprocess.run(argv, capture_output=True, text=True, **kwargs)
        if process.returncode != 0:
            raise RuntimeError("%s failed (exit %d): %s" % (" ".join(argv[:3]), process.returncode, process.stderr.strip()))
        return json.loads(process.stdout.strip().splitlines()[-1])

    def tv(self, *arguments):
        return self.run_json([self.bench, *arguments])

    def peer(self, *arguments):
        return self.run_json([self.python, PEERS, *arguments])

    # Workloads

    def floor(self):
        directory = self.path("floor")
        os.mkdir(directory, 0o700)
        result = self.tv("floor", "--dir", directory, "--key-file", self.key_file, "--template", TEMPLATE,
                         "--blocks", str(self.config["floor_blocks"]), "--per-block", str(self.config["floor_per_block"]))
        shutil.rmtree(directory)
        return result

    def w1(self, backend, run):
        n = self.config["cryptfile_default_n"] if backend == "cryptfile-default" else self.config["w1_n"]
        service = "bench-%s-r%d" % (backend, run)
        if backend == "tv-file":
            vault = self.path("w1-r%d.vault" % run)
            result = self.tv("w1", "--backend", "file", "--n", str(n), "--service", service, "--template", TEMPLATE,
                             "--file", vault, "--key-file", self.key_file)
            result["open_note"] = "vault opened before the timed phases"
            os.remove(vault)
        elif backend == "tv-ss":
            result = self.tv("w1", "--backend", "secret-service", "--n", str(n), "--service", service, "--template", TEMPLATE)
        elif backend in ("keyring", "secretstorage", "secretstorage-tv-shape"):
            result = self.peer("w1", "--peer", backend, "--n", str(n), "--service", service)
        else:
            kdf = backend.split("-")[1]
            path = self.path("cryptfile-%s-r%d.cfg" % (kdf, run))
            result = self.peer("w1", "--peer", "cryptfile", "--kdf", kdf, "--n", str(n), "--service", service,
                               "--file", path, "--password-file", self.password_file)
            os.remove(path)
        return result

    def scale(self, n, run):
        vault = self.path("scale-%d-r%d.vault" % (n, run))
        fill = self.tv("scale-fill", "--file", vault, "--key-file", self.key_file, "--n", str(n),
                       "--batch", str(self.config["scale_batch"]), "--template", TEMPLATE)
        # The crypto floor of the open below (issue 17), on the same file before its sets.
        floor = self.tv("decrypt-floor", "--file", vault, "--key-file", self.key_file)
        measure = self.tv("scale-measure", "--file", vault, "--key-file", self.key_file, "--n", str(n),
                          "--gets", str(self.config["scale_gets"]), "--sets", str(self.config["scale_sets"]),
                          "--template", TEMPLATE)
        for leftover in (vault, vault + ".lock"):
            if os.path.exists(leftover):
                os.remove(leftover)
        measure["fill"] = fill
        measure["decrypt_floor"] = floor
        return measure

    def multi_process(self, writers, run):
        vault = self.path("mp-%d-r%d.vault" % (writers, run))
        count = self.config["mp_count"]
        self.tv("count", "--file", vault, "--key-file", self.key_file)  # creates the vault
        processes = [
            subprocess.Popen(
                [self.bench, "mp-writer", "--file", vault, "--key-file", self.key_file, "--writer", str(w),
                 "--count", str(count), "--template", TEMPLATE],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            for w in range(writers)
        ]
        for process in processes:
            if process.stdout.readline().strip() != "ready":
                raise RuntimeError("a writer process did not start")
        for process in processes:
            process.stdin.write("go\n")
            process.stdin.flush()
        reports = []
        for process in processes:
            out, _ = process.communicate()
            if process.returncode != 0:
                raise RuntimeError("a writer process failed")
            reports.append(json.loads(out.strip().splitlines()[-1]))
        entries = self.tv("count", "--file", vault, "--key-file", self.key_file)["entries"]
        for leftover in (vault, vault + ".lock"):
            if os.path.exists(leftover):
                os.remove(leftover)
        seconds = (max(r["end_ns"] for r in reports) - min(r["start_ns"] for r in reports)) / 1e9
        return {
            "writers": writers,
            "count": count,
            "seconds": seconds,
            "sets_per_s": writers * count / seconds,
            "p50_us": statistics.median(r["set"]["p50_us"] for r in reports),
            "p99_us": max(r["set"]["p99_us"] for r in reports),
            "entries": entries,
            "expected": writers * count,
        }

    def cli(self):
        """Cold `get` as a whole process: each command is checked once, then timed, interleaved."""
        token = json.loads(open(TEMPLATE).read().strip().replace("{{i}}", "00000000"))
        secret = open(TEMPLATE).read().strip().replace("{{i}}", "00000000")
        service, account = "bench-cli", "user-00000000"
        env = dict(os.environ)
        keyring_env = dict(env, PYTHON_KEYRING_BACKEND="keyring.backends.SecretService.Keyring")
        commands = []  # (id, label, argv, env, expected stdout, slow)

        def add(ident, label, argv, expected, slow=False, run_env=None, setup=None):
            try:
                if setup is not None:
                    setup()
            except Unavailable as error:
                self.results["cli"][ident] = {"label": label, "unavailable": str(error)}
                return
            commands.append((ident, label, argv, run_env or env, expected, slow))

        def vault_set(*options):
            def setup():
                process = subprocess.run([self.vault, "set", service, account, *options], input=secret,
                                         capture_output=True, text=True)
                if process.returncode != 0:
                    raise Unavailable(process.stderr.strip() or "exit %d" % process.returncode)
            return setup

        file_options = ["--backend", "file", "--file", self.path("cli-key.vault"), "--key-file", self.key_file]
        pass_options = ["--backend", "file", "--file", self.path("cli-pass.vault"), "--passphrase-file", self.password_file]
        ss_options = ["--backend", "secret-service"]
        add("baseline", "/bin/true (process start-up floor)", ["/bin/true"], "")
        add("vault-version", "vault --version", [self.vault, "--version"], None)
        add("vault-key", "vault get, file, key file", [self.vault, "get", service, account, *file_options],
            token["access_token"], setup=vault_set(*file_options))
        add("vault-pass", "vault get, file, passphrase (Argon2id MODERATE)", [self.vault, "get", service, account, *pass_options],
            token["access_token"], slow=True, setup=vault_set(*pass_options))
        add("vault-ss", "vault get, secret-service", [self.vault, "get", service, account, *ss_options],
            token["access_token"], setup=vault_set(*ss_options))
        add("keyring", "keyring get (Python keyring, SecretService)", [os.path.join(os.path.dirname(self.python), "keyring"), "get", service, account],
            secret, run_env=keyring_env, setup=lambda: self.peer("seed", "--peer", "keyring", "--service", service))
        add("secret-tool", "secret-tool lookup (libsecret's C tool)", ["secret-tool", "lookup", "service", service + "-ss", "account", account],
            secret, setup=lambda: self.peer("seed", "--peer", "secretstorage", "--service", service + "-ss"))
        for kdf, slow in (("cheap", False), ("default", True)):
            path = self.path("cli-cryptfile-%s.cfg" % kdf)
            add("cryptfile-" + kdf, "keyrings.cryptfile get, %s KDF (Python script)" % kdf,
                [self.python, PEERS, "cryptfile-get", "--file", path, "--password-file", self.password_file, "--kdf", kdf, service, account],
                secret, slow=slow,
                setup=lambda path=path, kdf=kdf: self.peer("seed", "--peer", "cryptfile", "--kdf", kdf, "--service", service,
                                                         "--file", path, "--password-file", self.password_file))

        for ident, label, argv, run_env, expected, slow in commands:
            process = subprocess.run(argv, capture_output=True, text=True, env=run_env)
            if process.returncode != 0 or (expected is not None and process.stdout.strip() != expected):
                self.results["cli"][ident] = {
                    "label": label,
                    "unavailable": (process.stderr.strip() or "wrong output") + " (exit %d)" % process.returncode,
                }
                continue
            for _ in range(self.config["cli_warmup"]):
                subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=run_env, check=True)
            self.results["cli"][ident] = {"label": label, "times_ms": []}
        live = [c for c in commands if "times_ms" in self.results["cli"][c[0]]]
        for repetition in range(self.config["cli_runs"]):
            for ident, label, argv, run_env, expected, slow in live:
                if slow and repetition >= self.config["cli_slow_runs"]:
                    continue
                start = time.perf_counter_ns()
                subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=run_env, check=True)
                self.results["cli"][ident]["times_ms"].append((time.perf_counter_ns() - start) / 1e6)

    # The whole run

    def run(self):
        config = self.config
        started = time.monotonic()
        timings = {}

        section = time.monotonic()
        for run in range(config["runs"]):
            log("round %d of %d: fsync floor and W1" % (run + 1, config["runs"]))
            self.results["floor"].append(self.floor())
            for backend, label, _, rounds in (W1_BACKENDS if run % 2 == 0 else W1_BACKENDS[::-1]):
                if run >= config[rounds]:
                    continue
                entry = self.results["w1"].setdefault(backend, [])
                if entry and "unavailable" in entry[0]:
                    continue
                log("  W1 %s" % label)
                try:
                    result = self.w1(backend, run)
                except RuntimeError as error:
                    # A backend that fails part-way is reported, not measured, and the run goes on.
                    result = {"unavailable": "failed: %s" % error}
                if "unavailable" in result:
                    print("%s: unavailable (%s)" % (label, result["unavailable"]), flush=True)
                entry.append(result)
        timings["floor and W1"] = time.monotonic() - section

        section = time.monotonic()
        for run in range(config["runs"]):
            for n in config["scale_ns"]:
                log("scale N=%d, round %d of %d" % (n, run + 1, config["runs"]))
                self.results["scale"].setdefault(str(n), []).append(self.scale(n, run))
        timings["scale"] = time.monotonic() - section

        section = time.monotonic()
        for run in range(config["runs"]):
            for writers in sorted({1, config["mp_writers"]}):
                log("multi-process, %d writer(s), round %d of %d" % (writers, run + 1, config["runs"]))
                self.results["mp"].setdefault(str(writers), []).append(self.multi_process(writers, run))
        timings["multi-process"] = time.monotonic() - section

        section = time.monotonic()
        log("cold CLI")
        self.cli()
        timings["cold CLI"] = time.monotonic() - section

        self.results["timings"] = timings
        self.results["seconds"] = time.monotonic() - started
        self.results["meta"] = metadata(self.args)


def metadata(args):
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "command": args.command,
        "date": datetime.date.today().isoformat(),
        "cores": os.cpu_count(),
        "cpu": cpu,
        "kernel": platform.release(),
        "filesystem": args.filesystem,
        "peers": args.peer_versions,
        "tokenvault": args.tokenvault_version,
        "swift": args.swift_version,
        "python": platform.python_version(),
    }


# Report

def rate(phase):
    return phase["count"] / phase["seconds"] if phase["seconds"] > 0 else float("inf")


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt_rate(value):
    if value is None:
        return "–"
    if value >= 100:
        return "{:,.0f}".format(value)
    if value >= 10:
        return "{:.1f}".format(value)
    return "{:.2f}".format(value)


def fmt_time_us(us):
    """A latency in µs, in the unit that reads best."""
    if us is None:
        return "–"
    if us >= 1000:
        return ("{:.0f} ms" if us >= 100000 else "{:.1f} ms" if us >= 10000 else "{:.2f} ms").format(us / 1000)
    return ("{:.0f} µs" if us >= 100 else "{:.1f} µs").format(us)


def fmt_ratio(value):
    if value is None:
        return "–"
    if value >= 100:
        return "{:,.0f}×".format(value)
    if value >= 10:
        return "{:.0f}×".format(value)
    return "{:.2f}×".format(value)


def table(header, rows):
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]
    def line(cells):
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"
    out = [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(row) for row in rows]
    return "\n".join(out)


def plural(count, word):
    return "%d %s%s" % (count, word, "" if count == 1 else "s")


def rounds_text(config):
    fast, slow = config["runs"], min(config["runs"], config["slow_runs"])
    ss = min(config["runs"], config["ss_runs"])
    if fast == 1:
        return "One round"
    if slow == fast and ss == fast:
        return "Figures are medians of %d rounds" % fast
    return ("Figures are medians of %d rounds (TokenVault secret-service and secretstorage W1: %s, in alternating "
            "order), except W1 of Python keyring and keyrings.cryptfile: %s, as each takes minutes (`--rounds K` for "
            "more)" % (fast, plural(ss, "round"), plural(slow, "round")))


class Report:
    def __init__(self, results, args):
        self.r = results
        self.args = args
        self.config = results["config"]
        self.goals = []

    # medians

    def w1_runs(self, backend):
        runs = self.r["w1"].get(backend, [])
        if not runs:
            return None, "not run"
        if "unavailable" in runs[0]:
            return None, runs[0]["unavailable"]
        return runs, None

    def w1_phase(self, backend, phase):
        """(ops/s, p50 µs, p99 µs): medians over runs; None when unavailable."""
        runs, _ = self.w1_runs(backend)
        if runs is None:
            return None
        return (median(rate(r[phase]) for r in runs), median(r[phase]["p50_us"] for r in runs),
                median(r[phase]["p99_us"] for r in runs))

    def floor(self):
        out = {}
        for flush in ("fdatasync", "fsync", "set"):
            out[flush] = (median(rate(f[flush]) for f in self.r["floor"]),
                          median(f[flush]["p50_us"] for f in self.r["floor"]),
                          median(f[flush]["p99_us"] for f in self.r["floor"]))
        return out

    def scale(self, n, key):
        runs = self.r["scale"].get(str(n))
        if not runs:
            return None
        return median(key(r) for r in runs)

    def cli(self, ident):
        entry = self.r["cli"].get(ident)
        if not entry or "times_ms" not in entry:
            return None
        return median(entry["times_ms"])

    # goals

    def goal(self, source, text, measured, met, detail):
        status = "NOT MEASURED" if met is None else "MET" if met else "MISSED"
        self.goals.append((source, text, measured, status, detail))

    def check_goals(self):
        def ratio(a, b):
            return None if a is None or b is None else a / b

        tv_ss = self.w1_phase("tv-ss", "get")
        _, ss_why = self.w1_runs("tv-ss")
        for peer, factor in (("keyring", 5.0), ("secretstorage", 0.8)):
            other = self.w1_phase(peer, "get")
            if tv_ss is None:
                self.goal("#7", "Secret Service gets ≥ %g× %s" % (factor, LABELS[peer]), "–", None,
                          "TokenVault secret-service: unavailable (%s)" % ss_why)
            else:
                value = ratio(tv_ss[0], other[0] if other else None)
                self.goal("#7", "Secret Service gets ≥ %g× %s" % (factor, LABELS[peer]), fmt_ratio(value),
                          None if value is None else value >= factor,
                          "%s vs %s gets/s" % (fmt_rate(tv_ss[0]), fmt_rate(other[0]) if other else "–"))

        ns = self.config["scale_ns"]
        warm_n = 1000 if 1000 in ns else ns[-1]
        warm = self.scale(warm_n, lambda r: rate(r["get"]))
        w1_get = self.w1_phase("tv-file", "get")
        self.goal("#7 #4", "file: warm gets ≥ 200,000/s", fmt_rate(warm) + "/s", warm >= 200000,
                  "%s random gets at N=%s, one at a time through load(_:) (W1's %s gets, which also compare "
                  "each value: %s/s)" % ("{:,}".format(self.config["scale_gets"]), "{:,}".format(warm_n),
                                         "{:,}".format(self.config["w1_n"]), fmt_rate(w1_get[0])))

        floor = self.floor()
        fraction = floor["set"][0] / floor["fdatasync"][0]
        self.goal("#7", "file: durable sets ≥ 40% of the fsync floor", "{:.0%}".format(fraction), fraction >= 0.4,
                  "%s sets/s vs %s appends+fdatasync/s, interleaved in the same process" % (
                      fmt_rate(floor["set"][0]), fmt_rate(floor["fdatasync"][0])))

        small, large = ns[0], ns[-1]
        p50_small = self.scale(small, lambda r: r["set"]["p50_us"])
        p50_large = self.scale(large, lambda r: r["set"]["p50_us"])
        mean_small = self.scale(small, lambda r: r["set"]["seconds"] / r["set"]["count"])
        mean_large = self.scale(large, lambda r: r["set"]["seconds"] / r["set"]["count"])
        growth = p50_large / p50_small
        note = "" if large == 100000 else " (--quick: largest N run)"
        self.goal("#7 #4", "file: set cost at N=%s ≤ 1.5× N=%s%s" % ("{:,}".format(large), small, note), fmt_ratio(growth), growth <= 1.5,
                  "p50 %s vs %s; mean %s vs %s (%s)" % (fmt_time_us(p50_large), fmt_time_us(p50_small),
                                                   fmt_time_us(mean_large * 1e6), fmt_time_us(mean_small * 1e6),
                                                   fmt_ratio(mean_large / mean_small)))

        for phase in ("set", "get"):
            tv = self.w1_phase("tv-file", phase)
            peer = self.w1_phase("cryptfile-cheap", phase)
            value = ratio(tv[0], peer[0] if peer else None)
            self.goal("#7", "file: W1 %ss ≥ 50× keyrings.cryptfile (cheap KDF)" % phase, fmt_ratio(value),
                      None if value is None else value >= 50,
                      "%s vs %s %ss/s at N=%s" % (fmt_rate(tv[0]), fmt_rate(peer[0]) if peer else "–", phase, "{:,}".format(self.config["w1_n"])))

        cold = self.cli("vault-key")
        self.goal("#7", "cold `vault get` with a key file < 30 ms", "–" if cold is None else "%.1f ms" % cold,
                  None if cold is None else cold < 30,
                  "median of %d whole-process runs; /bin/true takes %s ms" % (
                      len(self.r["cli"].get("vault-key", {}).get("times_ms", [])),
                      "–" if self.cli("baseline") is None else "%.1f" % self.cli("baseline")))

        # Issue 17: start like a C tool, every Secret Service operation at least even with secretstorage.
        runs = lambda ident: len(self.r["cli"].get(ident, {}).get("times_ms", []))
        secret_tool = self.cli("secret-tool")
        self.goal("#17", "cold `vault get`, file, key file ≤ 10 ms", "–" if cold is None else "%.1f ms" % cold,
                  None if cold is None else cold <= 10, "median of %d runs" % runs("vault-key"))
        value = ratio(cold, secret_tool)
        self.goal("#17", "cold `vault get`, file, key file ≤ 0.6× `secret-tool lookup`", fmt_ratio(value),
                  None if value is None else value <= 0.6,
                  "%s ms vs %s ms (medians, same run)" % ("–" if cold is None else "%.1f" % cold,
                                                          "–" if secret_tool is None else "%.1f" % secret_tool))
        version = self.cli("vault-version")
        self.goal("#17", "cold `vault --version` ≤ 6 ms", "–" if version is None else "%.1f ms" % version,
                  None if version is None else version <= 6, "median of %d runs" % runs("vault-version"))
        cold_ss = self.cli("vault-ss")
        value = ratio(cold_ss, secret_tool)
        self.goal("#17", "cold `vault get`, Secret Service ≤ 1.0× `secret-tool lookup`", fmt_ratio(value),
                  None if value is None else value <= 1.0,
                  "%s ms vs %s ms (medians, same run)" % ("–" if cold_ss is None else "%.1f" % cold_ss,
                                                          "–" if secret_tool is None else "%.1f" % secret_tool))
        for phase, factor in (("set", 1.0), ("get", 1.5), ("overwrite", 1.0), ("delete", 1.0)):
            tv = self.w1_phase("tv-ss", phase)
            peer = self.w1_phase("secretstorage", phase)
            value = ratio(tv[0] if tv else None, peer[0] if peer else None)
            self.goal("#17", "Secret Service W1 %ss ≥ %g× secretstorage (one connection)" % (phase, factor), fmt_ratio(value),
                      None if value is None else value >= factor,
                      "%s vs %s ops/s" % (fmt_rate(tv[0]) if tv else "–", fmt_rate(peer[0]) if peer else "–"))
        if 100000 not in ns:
            self.goal("#17", "file, N=100,000: RSS added by open ≤ 1.0× the file's size", "–", None,
                      "N=100,000 is not run in --quick mode")
        if 100000 in ns:
            added = self.scale(100000, lambda r: (r["rss_after_open_kib"] - r["rss_before_open_kib"]) * 1024 / r["file_bytes"])
            self.goal("#17", "file, N=100,000: RSS added by open ≤ 1.0× the file's size", fmt_ratio(added), added <= 1.0,
                      "%.1f MiB added for a %.1f MB file" % (
                          self.scale(100000, lambda r: r["rss_after_open_kib"] - r["rss_before_open_kib"]) / 1024,
                          self.scale(100000, lambda r: r["file_bytes"]) / 1e6))
        if 100000 in ns:
            # CPU time of the process (the machine is shared; wall time is printed beside it).
            cpu = self.scale(100000, lambda r: r["open_cpu_seconds"] / r["decrypt_floor"]["cpu_seconds"])
            wall = self.scale(100000, lambda r: r["open_seconds"] / r["decrypt_floor"]["seconds"])
            self.goal("#17", "file, N=100,000: open ≤ 1.3× a decrypt-only loop", fmt_ratio(cpu), cpu <= 1.3,
                      "CPU time: open %.0f ms vs %.0f ms to only decrypt the same %s records in memory (median of %d "
                      "passes; the open itself checks every tag but decrypts only the names: %.0f ms for that crypto "
                      "alone, %s); wall: %.0f vs %.0f ms (%s)" % (
                          self.scale(100000, lambda r: r["open_cpu_seconds"]) * 1000,
                          self.scale(100000, lambda r: r["decrypt_floor"]["cpu_seconds"]) * 1000,
                          "{:,}".format(self.scale(100000, lambda r: r["decrypt_floor"]["records"])),
                          self.scale(100000, lambda r: r["decrypt_floor"]["passes"]),
                          self.scale(100000, lambda r: r["decrypt_floor"]["names_only_cpu_seconds"]) * 1000,
                          fmt_ratio(self.scale(100000, lambda r: r["open_cpu_seconds"] / r["decrypt_floor"]["names_only_cpu_seconds"])) + " of it",
                          self.scale(100000, lambda r: r["open_seconds"]) * 1000,
                          self.scale(100000, lambda r: r["decrypt_floor"]["seconds"]) * 1000, fmt_ratio(wall)))
        else:
            self.goal("#17", "file, N=100,000: open ≤ 1.3× a decrypt-only loop", "–", None,
                      "N=100,000 is not run in --quick mode")

        if 10000 in ns:
            open_10k = self.scale(10000, lambda r: r["open_seconds"])
            self.goal("#4", "file: open 10,000 tokens with a key file < 100 ms", "%.0f ms" % (open_10k * 1000), open_10k < 0.1,
                      "fresh process, file in the page cache")
            batch = self.scale(10000, lambda r: r["fill"]["fill"]["p50_us"])
            self.goal("#4", "file: a batch of 10,000 sets < 1 s", fmt_time_us(batch), batch < 1e6,
                      "saveAll of 10,000 entries, one fdatasync")
        throughput = self.scale(large, lambda r: r["file_bytes"] / r["open_seconds"] / 1e6)
        self.goal("#4", "file: open reads ≥ 20 MB/s", "%.0f MB/s" % throughput, throughput >= 20,
                  "N=%s, %s MB file" % ("{:,}".format(large), "%.1f" % (self.scale(large, lambda r: r["file_bytes"]) / 1e6)))

    # sections

    def header(self):
        m = self.r.get("meta", {})
        lines = [
            "## Benchmarks",
            "",
            "Measured with `%s` on %s: %s cores (%s), Linux %s, %s; the measurements took %.0f s (%s mode)." % (
                m.get("command", "?"), m.get("date", "?"), m.get("cores", "?"), m.get("cpu", "?"), m.get("kernel", "?"),
                m.get("filesystem", "?"), self.r["seconds"], self.config["mode"]),
            "Peers on the same private gnome-keyring and the same disk: %s. TokenVault %s, %s, Python %s." % (
                m.get("peers", "?"), m.get("tokenvault", "?"), m.get("swift", "?"), m.get("python", "?")),
            "Payload: an OAuth token JSON of %d bytes (Benchmarks/token-template.json). %s; latencies are p50/p99 of "
            "one operation. The machine is shared and noisy: compare ratios within this run, not across runs." % (
                len(open(TEMPLATE).read().strip().replace("{{i}}", "00000000")), rounds_text(self.config)),
        ]
        return "\n".join(lines)

    def ratios(self):
        rows = []
        pairs = [
            ("tv-ss", "keyring"), ("tv-ss", "secretstorage"), ("tv-ss", "secretstorage-tv-shape"),
            ("tv-file", "cryptfile-cheap"), ("tv-file", "cryptfile-default"),
        ]
        for ours, theirs in pairs:
            _, why = self.w1_runs(ours)
            name = "%s vs %s" % (LABELS[ours], LABELS[theirs])
            if theirs == "cryptfile-default":
                name += " (its N=%d)" % self.config["cryptfile_default_n"]
            if why is not None:
                rows.append([name] + ["unavailable (%s)" % why] + [""] * (len(PHASES) - 1))
                continue
            cells = []
            for phase in PHASES:
                a, b = self.w1_phase(ours, phase), self.w1_phase(theirs, phase)
                cells.append("–" if a is None or b is None else fmt_ratio(a[0] / b[0]))
            rows.append([name] + cells)
        out = ["### Ratios: TokenVault ÷ peer, W1 operations per second (higher is better for TokenVault)", "",
               table(["comparison"] + PHASES, rows), ""]
        rows = []
        ours = [("vault-key", "vault get, key file"), ("vault-pass", "vault get, passphrase"), ("vault-ss", "vault get, secret-service")]
        theirs = [("keyring", "keyring get"), ("secret-tool", "secret-tool lookup"),
                  ("cryptfile-cheap", "cryptfile get, cheap KDF"), ("cryptfile-default", "cryptfile get, default Argon2id")]
        for ident, name in ours:
            entry = self.r["cli"].get(ident, {})
            if "unavailable" in entry:
                rows.append([name] + ["unavailable (%s)" % entry["unavailable"]] + [""] * (len(theirs) - 1))
                continue
            mine = self.cli(ident)
            rows.append([name] + ["–" if self.cli(t) is None or mine is None else fmt_ratio(self.cli(t) / mine) for t, _ in theirs])
        out += ["### Ratios: cold `get` as a whole process, peer's time ÷ TokenVault's (higher is better for TokenVault)", "",
                table(["TokenVault command"] + [name for _, name in theirs], rows)]
        return "\n".join(out)

    def goals_table(self):
        rows = [[source, text, measured, "**%s**" % status, detail] for source, text, measured, status, detail in self.goals]
        met = sum(1 for g in self.goals if g[3] == "MET")
        missed = sum(1 for g in self.goals if g[3] == "MISSED")
        unmeasured = sum(1 for g in self.goals if g[3] == "NOT MEASURED")
        return "\n".join(["### Goals (issues #17, #7 and #4)", "",
                          table(["issue", "goal", "measured", "status", "how"], rows), "",
                          "%d met, %d missed, %d not measured." % (met, missed, unmeasured)])

    def w1_table(self):
        rows = []
        for backend, label, _, _ in W1_BACKENDS:
            runs, why = self.w1_runs(backend)
            if runs is None:
                rows.append([label, "", "", "unavailable (%s)" % why, "", "", ""])
                continue
            cells = []
            for phase in PHASES:
                ops, p50, p99 = self.w1_phase(backend, phase)
                cells.append("%s/s · %s / %s" % (fmt_rate(ops), fmt_time_us(p50), fmt_time_us(p99)))
            rows.append([label, "{:,}".format(runs[0]["n"]), str(len(runs))] + cells)
        return "\n".join([
            "### W1: set all, get all (random order), overwrite all, delete all", "",
            "Each cell: operations per second · p50 / p99 latency of one operation.", "",
            table(["backend", "N", "rounds"] + PHASES, rows), "",
            "keyrings.cryptfile with its default Argon2id (t=15, m=64 MiB, p=2) runs at N=%d, not %s: it derives a key "
            "for every operation, so N=1,000 would take the better part of an hour. Its cheap run uses t=1, m=8 KiB, p=1, "
            "which leaves the cost of its format (it parses and rewrites the whole INI file per operation). TokenVault's "
            "file vault is opened with a key file before the timed phases; every set and delete is durable (fdatasync), "
            "while keyrings.cryptfile's writes are not synced." % (
                self.config["cryptfile_default_n"], "{:,}".format(self.config["w1_n"])),
        ])

    def scale_table(self):
        rows = []
        for n in self.config["scale_ns"]:
            runs = self.r["scale"].get(str(n))
            if not runs:
                continue
            s = lambda key: self.scale(n, key)
            rows.append([
                "{:,}".format(n),
                "%s/s · %s / %s" % (fmt_rate(s(lambda r: rate(r["set"]))), fmt_time_us(s(lambda r: r["set"]["p50_us"])),
                                    fmt_time_us(s(lambda r: r["set"]["p99_us"]))),
                "%s/s · %s / %s" % (fmt_rate(s(lambda r: rate(r["get"]))), fmt_time_us(s(lambda r: r["get"]["p50_us"])),
                                    fmt_time_us(s(lambda r: r["get"]["p99_us"]))),
                "%.1f ms (%.1f ms CPU; decrypt only %.1f ms CPU, tags and names only %.1f ms CPU)" % (
                    s(lambda r: r["open_seconds"]) * 1000, s(lambda r: r["open_cpu_seconds"]) * 1000,
                    s(lambda r: r["decrypt_floor"]["cpu_seconds"]) * 1000,
                    s(lambda r: r["decrypt_floor"]["names_only_cpu_seconds"]) * 1000),
                "%.0f" % s(lambda r: r["file_bytes"] / n),
                "%.1f MiB" % (s(lambda r: r["rss_after_open_kib"] - r["rss_before_open_kib"]) / 1024),
                "%.1f MiB" % (s(lambda r: r["peak_rss_kib"]) / 1024),
                "%s (%d×)" % (fmt_time_us(s(lambda r: r["fill"]["fill"]["p50_us"])), math.ceil(n / self.config["scale_batch"])),
            ])
        c = self.config
        return "\n".join([
            "### Scale: file backend, key file", "",
            table(["N", "durable set (new key)", "warm get (random key)", "open", "bytes/entry",
                   "RSS added by open", "peak RSS", "fill: one saveAll batch"], rows), "",
            "Per N and round: one process fills the vault with saveAll batches of %s; a fresh process opens it (timed, "
            "file in the page cache), makes %s random gets and %d durable sets of new keys, and reports getrusage's "
            "ru_maxrss before and after the open and at the end. Before it, another process reads the same file into "
            "memory and times loops that only authenticate and decrypt its records (issue 17's crypto floor), and loops "
            "that do only the crypto an open does: every record's tag checked, only its names decrypted." % ("{:,}".format(c["scale_batch"]),
                                                                     "{:,}".format(c["scale_gets"]), c["scale_sets"]),
        ])

    def mp_table(self):
        rows = []
        single = median(r["sets_per_s"] for r in self.r["mp"].get("1", [])) if "1" in self.r["mp"] else None
        for writers in sorted(self.r["mp"], key=int):
            runs = self.r["mp"][writers]
            total = median(r["sets_per_s"] for r in runs)
            lost = sum(r["expected"] - r["entries"] for r in runs)
            rows.append([writers, runs[0]["count"], fmt_rate(total) + "/s",
                         "%s / %s" % (fmt_time_us(median(r["p50_us"] for r in runs)), fmt_time_us(median(r["p99_us"] for r in runs))),
                         "–" if single is None else fmt_ratio(total / single),
                         "all %s present" % "{:,}".format(runs[0]["expected"]) if lost == 0 else "%d LOST" % lost])
        return "\n".join(["### Multi-process: writer processes on one file vault, distinct keys", "",
                          table(["writers", "sets each", "total durable sets", "set p50 / p99", "vs 1 writer", "entries after"], rows)])

    def floor_table(self):
        floor = self.floor()
        base = floor["fdatasync"][0]
        names = [("fdatasync", "append %d bytes + fdatasync" % self.r["floor"][0]["size"]),
                 ("fsync", "append %d bytes + fsync" % self.r["floor"][0]["size"]),
                 ("set", "TokenVault file: durable set of a new key")]
        rows = [[label, fmt_rate(floor[name][0]) + "/s", fmt_time_us(floor[name][1]), fmt_time_us(floor[name][2]),
                 "{:.0%}".format(floor[name][0] / base)] for name, label in names]
        w1 = self.w1_phase("tv-file", "set")
        c = self.config
        return "\n".join([
            "### Floor: what a durable write costs on this disk, in the same run", "",
            table(["operation", "rate", "p50", "p99", "÷ fdatasync rate"], rows), "",
            "Measured in %d interleaved blocks of %d of each, so all three share the machine's noise; the vault is "
            "fresh, in the same directory. W1's sets (N=%s) ran at %s/s, %.0f%% of this floor." % (
                c["floor_blocks"], c["floor_per_block"], "{:,}".format(c["w1_n"]), fmt_rate(w1[0]), 100 * w1[0] / base),
        ])

    def cli_table(self):
        rows = []
        base = self.cli("vault-key")
        order = ["baseline", "vault-key", "vault-pass", "vault-ss", "keyring", "secret-tool", "cryptfile-cheap", "cryptfile-default"]
        for ident in sorted(self.r["cli"], key=lambda i: order.index(i) if i in order else len(order)):
            entry = self.r["cli"][ident]
            if "unavailable" in entry:
                rows.append([entry["label"], "", "unavailable (%s)" % entry["unavailable"], "", ""])
                continue
            times = entry["times_ms"]
            rows.append([entry["label"], len(times), "%.1f ms" % median(times), "%.1f ms" % min(times),
                         "–" if base is None else fmt_ratio(median(times) / base)])
        return "\n".join(["### Cold CLI: one whole process per `get`", "",
                          table(["command", "runs", "median", "min", "÷ vault get (key file)"], rows), "",
                          "keyrings.cryptfile's own CLI (`keyring get` with its backend) reads the password only from a "
                          "terminal, so a Python script that does the same get with the password from a file stands in "
                          "for it. `keyring get` has PYTHON_KEYRING_BACKEND set to its SecretService backend."])

    def render(self):
        self.check_goals()
        parts = [self.header(), self.ratios(), self.goals_table(), self.w1_table(), self.scale_table(),
                 self.cli_table(), self.mp_table(), self.floor_table()]
        return "\n\n".join(parts) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, help="rounds of every measurement, the slow peers' too")
    parser.add_argument("--scratch", required=True)
    parser.add_argument("--bench-bin", required=True)
    parser.add_argument("--vault-bin", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--command", default="Scripts/bench")
    parser.add_argument("--filesystem", default="unknown")
    parser.add_argument("--peer-versions", default="")
    parser.add_argument("--swift-version", default="")
    parser.add_argument("--tokenvault-version", default="")
    parser.add_argument("--report-only", help="re-render the report from a results JSON file")
    args = parser.parse_args()

    if args.report_only:
        with open(args.report_only) as handle:
            results = json.load(handle)
    else:
        config = dict(QUICK if args.quick else FULL)
        if args.rounds:
            config["runs"] = config["slow_runs"] = config["ss_runs"] = args.rounds
        bench = Bench(args, config)
        bench.run()
        results = bench.results
        with open(os.path.splitext(args.output)[0] + ".json", "w") as handle:
            json.dump(results, handle, indent=1)
    text = Report(results, args).render()
    with open(args.output, "w") as handle:
        handle.write(text)
    print()
    print(text, end="")


if __name__ == "__main__":
    main()
