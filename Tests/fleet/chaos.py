#!/usr/bin/env python3
"""The driver and checker of Scripts/fleet (issue 33, part 2). Run by Scripts/fleet only: it runs
in the fleet's control namespace and starts `vault` in the hosts' namespaces with `ip netns exec`.

One grant (one user of the test OAuth server, one entry in the shared PostgreSQL vault). Each
cycle waits until the stored token is due for a refresh, starts `vault get --fresh` on every host
at once, and does one fault, chosen at random, to whichever host holds the refresh lock:

  none               no fault (the control)
  cut_before_request the holder's link is cut while it holds the lock and before its token
                     request reaches the server (its packets to the OAuth server dropped first)
  cut_answer_lost    the request reached the server (held there by the `hold` fault); the link
                     is cut, then the server rotates and answers into the void
  cut_before_commit  the holder's PostgreSQL traffic is dropped, the server answers (the holder
                     receives the new tokens), then the whole link is cut before the commit
  kill9              the holder is kill -9ed while the server holds its request, or (random
                     variant) at a random moment 0-400 ms after the start
  pg_restart         PostgreSQL restarted with -m immediate while the server holds the request
                     (or at a random moment 0-500 ms after the start); the restart frees the
                     lock while the holder's request may be at the server, so it counts as an
                     interrupted flight
  failover           the primary's link is cut mid-refresh and the standby promoted: the old
                     primary is fenced (its PostgreSQL stopped at once, the service address taken
                     from it, as a failover manager's STONITH does), the standby promoted
                     (pg_ctl promote), the service address moved to it (with a gratuitous ARP, as
                     keepalived sends), then the old primary made the new standby from a fresh
                     pg_basebackup. Three variants: while the server holds the holder's request
                     (released before or after the promotion); at a random moment 0-500 ms after
                     a host took the refresh lock; and with the standby lagging (its replication link cut first, the
                     primary cut once a host acknowledged a token or a commit waits for the
                     standby). With synchronous replication (remote_apply) every acknowledged
                     write must survive; with --replication async the checker counts what the
                     promotion lost instead of failing on it

A cut host is healed at a random moment: before the server dropped its lock, or after the
others finished. The checker then reads the server's history (GET /history: fingerprints of the
refresh tokens presented and of the tokens issued, and which host sent each request) and every
process's acknowledged token (exit 0: the access token it printed, fingerprinted at once), and
asserts:

  1. no refresh token presented twice by the fleet, except once again after a flight that was
     interrupted after its request left (the first answer never committed: no host ever
     acknowledged or stored it), in a cycle that had such a fault;
  2. no refresh token that the server rejected presented again;
  3. no acknowledged token missing after recovery: after each cycle the stored token is the
     newest acknowledged one or newer (never older: a cut-off holder that comes back does not
     write over a newer token, and a promoted standby has every acknowledged write);
  4. at most one refresh per expiry: no token is refreshed while it is still fresh (a request
     presenting the refresh token of an answer arrives before that answer's token entered the
     60 s leeway), besides check 1's single re-presentation;
  5. every process ends within its bound; with a reuse interval no grant is lost, and with
     strict rotation (--strict) a grant is lost only in a cycle whose flight was interrupted
     after its request may have reached the server.

It prints the figures: faults done, exit codes, refreshes, re-presentations, grants lost, and
how long the server took to drop a cut-off holder's lock. Token values never reach the output.
"""

import argparse
import datetime
import hashlib
import json
import os
import random
import shutil
import ssl
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

CLUSTER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "Scripts", "postgres", "cluster")

FAULTS = ["none", "cut_before_request", "cut_answer_lost", "cut_before_commit", "kill9", "pg_restart", "failover"]
FAILOVER_VARIANTS = ["held", "random", "lagging"]
# A `vault get --fresh` must end within this (lock wait 30 s + operation 10 s + HTTP 20 s, and a
# PostgreSQL restart's recovery on a loaded machine).
PROCESS_BOUND = 150
SERVICE = "fleet"
ACCOUNT = "grant"


def fingerprint(value):
    return hashlib.sha256(value.encode("utf-8")).hexdigest()[:16] if value else None


class Failure(Exception):
    pass


class Fleet:
    def __init__(self, args):
        self.args = args
        self.random = random.Random(args.seed)
        self.hosts = []  # [(namespace, address)]
        for item in args.hosts:
            namespace, address = item.split("=")
            self.hosts.append((namespace, address))
        self.ssl = ssl.create_default_context(cafile=args.oauth_ca)
        self.password = open(args.database_password_file).read().strip()
        self.user = f"fleet-{args.seed}"
        self.strict = args.strict
        # the PostgreSQL nodes [(namespace, address, directory)]; the primary holds the service address
        self.nodes = [tuple(item.split("=", 2)) for item in args.postgres_nodes]
        self.primary = 0
        self.failovers = {}  # variant -> count
        self.failover_cycles = set()
        self.failover_seconds = []  # from the primary's cut to the promoted standby holding the address
        self.reseed_seconds = []  # from the promotion to the new standby streaming
        self.failover_lost = []  # (cycle, what): acknowledged writes a promotion lost (async only)
        self.cycle_seconds = {}  # fault -> [seconds]
        # figures
        self.faults = {}
        self.exits = {}
        self.acknowledged = []  # (cycle, host, access fingerprint)
        self.stored_after = []  # (cycle, access fingerprint)
        self.lock_drops = []  # seconds from the cut to the lock's release by the server
        self.cycle_of_request = {}  # history seq -> cycle
        self.cycle_fault = {}
        self.lost_cycles = []
        self.lost_by_fault = {}
        self.set_at = 0.0
        self.stored_due = 0.0
        self.interrupted_cycles = set()
        self.grants_lost = 0
        self.violations = []
        self.cycle = 0
        self.logins = 0

    # --- plumbing -------------------------------------------------------------------------
    def http(self, method, path, form=None):
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        request = urllib.request.Request(self.args.oauth + path, data=data, method=method)
        try:
            with urllib.request.urlopen(request, context=self.ssl, timeout=30) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            raise Failure(f"{method} {path}: HTTP {error.code}") from None

    def history(self):
        return self.http("GET", "/history?" + urllib.parse.urlencode({"user": self.user}))

    def stats(self):
        return self.http("GET", "/stats?" + urllib.parse.urlencode({"user": self.user}))

    def environment(self, index):
        home = os.path.join(self.args.scratch, f"h{index + 1}")
        return {
            "PATH": "/usr/bin:/bin",
            "HOME": os.path.join(home, "home"),
            "XDG_RUNTIME_DIR": os.path.join(home, "runtime"),
            "TMPDIR": os.path.join(home, "tmp"),
            "TOKEN_VAULT_BACKEND": "postgres",
            "TOKEN_VAULT_DATABASE_URL": self.args.database_url,
            "TOKEN_VAULT_DATABASE_PASSWORD_FILE": self.args.database_password_file,
            "TOKEN_VAULT_KEY_FILE": os.path.join(home, "vault.key"),
            "TOKEN_VAULT_CACERT": self.args.oauth_ca,
        }

    def vault(self, index, arguments, stdin=None):
        namespace = self.hosts[index][0]
        environment = [f"{k}={v}" for k, v in self.environment(index).items()]
        command = ["ip", "netns", "exec", namespace, "env", "-i", *environment, self.args.vault, *arguments]
        process = subprocess.Popen(
            command, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        process.started = time.monotonic()
        process.host = index
        return process

    def nft(self, index, script, namespace=None):
        namespace = namespace or self.hosts[index][0]
        subprocess.run(["ip", "netns", "exec", namespace, "nft", "-f", "-"], input=script.encode(), check=True)

    def cut(self, index, what="all", namespace=None):
        """Drops the host's packets without a word (no RST, no ICMP): all, or one service's."""
        oauth = self.args.oauth.split("//")[1].split(":")[0]
        oauth_port = self.args.oauth.rsplit(":", 1)[1]
        match = {
            "all": "",
            "oauth": f"ip daddr {oauth} tcp dport {oauth_port} ",
            "postgres": f"ip daddr {self.args.database_address} tcp dport 5432 ",
        }[what] if not what.startswith("peer:") else f"ip daddr {what[5:]} "
        back = match.replace("daddr", "saddr").replace("dport", "sport")
        self.nft(index, f"add rule inet fleet output {match}drop\nadd rule inet fleet input {back}drop\n", namespace)

    def heal(self, index, namespace=None):
        self.nft(index, "flush chain inet fleet output\nflush chain inet fleet input\n", namespace)

    def cluster(self, *arguments, namespace=None, check=True):
        command = [CLUSTER, *arguments]
        if namespace:
            command = ["ip", "netns", "exec", namespace, *command]
        result = subprocess.run(command, capture_output=True, text=True)
        if check and result.returncode != 0:
            raise Failure(f"cycle {self.cycle}: cluster {arguments[0]} failed: {result.stderr.strip()[-400:]}")
        return result

    def psql(self, sql, node=None):
        directory = self.nodes[self.primary if node is None else node][2]
        result = self.cluster("psql", directory, "tokenvault", sql, check=False)
        if result.returncode != 0:
            return None  # the cluster is restarting
        return result.stdout.strip()

    def holder_address(self):
        rows = self.psql(
            "SELECT host(a.client_addr) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted")
        return rows.splitlines()[0] if rows else None

    def host_of(self, address):
        for index, (_, host_address) in enumerate(self.hosts):
            if host_address == address:
                return index
        return None

    def wait_until(self, what, predicate, bound=60):
        deadline = time.monotonic() + bound
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.02)
        raise Failure(f"cycle {self.cycle}: waited {bound} s for {what}")

    def finish(self, process):
        try:
            out, err = process.communicate(timeout=max(1, PROCESS_BOUND - (time.monotonic() - process.started)))
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            self.violations.append(f"cycle {self.cycle}: host {process.host + 1}'s vault get --fresh did not end within {PROCESS_BOUND} s")
            return None
        status = process.returncode
        self.exits[status] = self.exits.get(status, 0) + 1
        if status == 0:
            self.acknowledged.append((self.cycle, process.host, fingerprint(out.decode().strip())))
        elif status == 7:
            process.lost = True
        # stderr is vault's own message, which never holds a token; keep the first line.
        process.message = err.decode(errors="replace").strip().splitlines()[:1]
        return status

    # --- the grant ------------------------------------------------------------------------
    def login(self):
        token = self.http("POST", "/token", {
            "grant_type": "password", "username": self.user, "password": "test-password",
            "client_id": "tokenvault-example"})
        process = self.vault(0, [
            "set", SERVICE, ACCOUNT, "--token-url", self.args.oauth + "/token",
            "--client-id", "tokenvault-example"], stdin=True)
        out, err = process.communicate(input=json.dumps(token).encode(), timeout=60)
        if process.returncode != 0:
            raise Failure(f"vault set exited {process.returncode}: {err.decode(errors='replace').strip()}")
        self.logins += 1
        self.set_at = time.time()  # `vault set` counts the token's lifetime from its own reading
        # Requests up to here belong to the grants before this login (blame below).
        self.login_seq = max([r["seq"] for r in self.history()["answered"]], default=0)

    def stored(self):
        """The stored token's fingerprints, read on the first host after recovery."""
        process = self.vault(0, ["get", SERVICE, ACCOUNT, "--json", "--allow-expired"])
        out, err = process.communicate(timeout=PROCESS_BOUND)
        if process.returncode != 0:
            raise Failure(f"cycle {self.cycle}: reading the entry back exited {process.returncode}: {err.decode(errors='replace').strip()}")
        body = json.loads(out)
        if body.get("expires_at"):
            # Whole seconds: due 60 s before, and one more for the rounding.
            self.stored_due = datetime.datetime.fromisoformat(body["expires_at"].replace("Z", "+00:00")).timestamp() - 59
        return fingerprint(body.get("access_token")), fingerprint(body.get("refresh_token"))

    def wait_due(self):
        """The stored token is fresh for 4 s after it was issued (64 s lifetime, 60 s leeway)."""
        issued = [r["answered"] for r in self.history()["answered"] if r["status"] == 200]
        if issued:
            # An answer sent into a cut can still arrive when the link is back (TCP retransmits
            # it), later than the server answered: the stored expiry says when the token is due.
            due = max(issued[-1] + 4.5, self.set_at + 4.5, self.stored_due)
            while time.time() < due:
                time.sleep(min(0.2, due - time.time()))

    # --- one cycle ------------------------------------------------------------------------
    def start_all(self, order=None):
        order = order if order is not None else list(range(len(self.hosts)))
        return {index: self.vault(index, ["get", SERVICE, ACCOUNT, "--fresh"]) for index in order}

    def holder_or_ended(self, processes):
        """The lock holder's address, or True once a host has ended (the lock came and went)."""
        address = self.holder_address()
        return address or any(p.poll() is not None for p in processes.values())

    def held_or_all_ended(self, processes):
        held = self.held_request()
        if held is None and all(p.poll() is not None for p in processes.values()):
            raise Failure(f"cycle {self.cycle}: every host ended before a token request reached the server "
                          f"(exits {[p.returncode for p in processes.values()]})")
        return held

    def held_request(self):
        pending = self.history()["pending"]
        return pending[0] if pending else None

    def measure_lock_drop(self, holder, cut_at):
        """Waits until the server no longer counts the cut-off holder as the lock's holder."""
        address = self.hosts[holder][1]
        self.wait_until("the server to drop the cut-off holder's lock", lambda: self.holder_address() != address, bound=120)
        self.lock_drops.append(time.monotonic() - cut_at)

    def run_cycle(self, fault):
        started = time.monotonic()
        self.variant = None
        self.cycle += 1
        self.faults[fault] = self.faults.get(fault, 0) + 1
        self.wait_due()
        first_seq = max([r["seq"] for r in self.history()["answered"]], default=0)
        processes = {}
        statuses = {}
        healed = set()
        holder = None
        self.cycle_fault[self.cycle] = fault
        try:
            if fault == "none":
                processes = self.start_all()
            elif fault == "failover":
                holder = self.run_failover(processes)
            elif fault == "cut_before_request":
                holder = self.random.randrange(len(self.hosts))
                self.cut(holder, "oauth")
                processes[holder] = self.vault(holder, ["get", SERVICE, ACCOUNT, "--fresh"])
                def holds_lock():
                    if processes[holder].poll() is not None:
                        out, err = processes[holder].communicate()
                        raise Failure(f"cycle {self.cycle}: host {holder + 1}'s vault get --fresh ended ({processes[holder].returncode}) "
                                      f"before it took the lock: {err.decode(errors='replace').strip()[:200]}")
                    return self.holder_address() == self.hosts[holder][1]
                self.wait_until("the first host to take the lock", holds_lock)
                self.cut(holder, "all")
                cut_at = time.monotonic()
                others = [i for i in range(len(self.hosts)) if i != holder]
                processes.update(self.start_all(others))
                if self.random.random() < 0.3:
                    time.sleep(self.random.uniform(0, 8))  # heal before the server drops the lock
                else:
                    self.measure_lock_drop(holder, cut_at)
                    for i in others:
                        statuses[i] = self.finish(processes[i])
                self.heal(holder)
                healed.add(holder)
            elif fault in ("cut_answer_lost", "cut_before_commit") or (fault in ("kill9", "pg_restart") and self.random.random() < 0.6):
                self.http("POST", "/faults", {"user": self.user, "kind": "hold"})
                processes = self.start_all()
                held = self.wait_until("the server to hold the holder's token request", lambda: self.held_or_all_ended(processes))
                holder = self.host_of(held["from"])
                if holder is None:
                    raise Failure(f"cycle {self.cycle}: a held request from an unknown address")
                if fault == "cut_answer_lost":
                    self.cut(holder, "all")
                    cut_at = time.monotonic()
                    self.interrupted_cycles.add(self.cycle)
                    self.http("POST", "/release", {"user": self.user})
                elif fault == "cut_before_commit":
                    self.cut(holder, "postgres")
                    self.http("POST", "/release", {"user": self.user})
                    self.wait_until("the server to answer the held request", lambda: not self.history()["pending"])
                    time.sleep(self.random.uniform(0, 0.3))
                    self.cut(holder, "all")
                    cut_at = time.monotonic()
                    self.interrupted_cycles.add(self.cycle)
                elif fault == "kill9":
                    processes[holder].kill()
                    self.interrupted_cycles.add(self.cycle)
                    time.sleep(self.random.uniform(0, 0.2))
                    self.http("POST", "/release", {"user": self.user})
                else:  # pg_restart while the request is held
                    # The restart ends every session, and so frees the lock while the holder's
                    # request is at the server: the next host finds the holder's journal, written
                    # before the server's start, and waits for the holder's answer instead of
                    # presenting the same refresh token (PostgresStore.flightCutOffByRestart).
                    self.interrupted_cycles.add(self.cycle)
                    self.restart_postgres()
                    self.http("POST", "/release", {"user": self.user})
                if fault.startswith("cut_"):
                    if self.random.random() < 0.3:
                        time.sleep(self.random.uniform(0, 8))
                    else:
                        self.measure_lock_drop(holder, cut_at)
                        for i in [i for i in processes if i != holder]:
                            statuses[i] = self.finish(processes[i])
                    self.heal(holder)
                    healed.add(holder)
            elif fault == "kill9":  # at a random moment
                processes = self.start_all()
                time.sleep(self.random.uniform(0, 0.4))
                address = self.holder_address()
                victim = self.host_of(address) if address else self.random.randrange(len(self.hosts))
                if victim in processes:
                    holder = victim
                    processes[victim].kill()
                    self.interrupted_cycles.add(self.cycle)  # it may have presented
            else:  # pg_restart at a random moment
                processes = self.start_all()
                time.sleep(self.random.uniform(0, 0.5))
                self.interrupted_cycles.add(self.cycle)
                self.restart_postgres()
            for i, process in processes.items():
                if i not in statuses:
                    statuses[i] = self.finish(process)
        finally:
            for index in range(len(self.hosts)):
                if index not in healed:
                    self.heal(index)
            for process in processes.values():
                if process.poll() is None:
                    process.kill()
                    process.communicate()
        # Recovery: the entry as stored now.
        access, refresh = self.stored()
        self.stored_after.append((self.cycle, access))
        history = self.history()["answered"]
        for record in history:
            if record["seq"] > first_seq:
                self.cycle_of_request.setdefault(record["seq"], self.cycle)
        lost = [i for i, s in statuses.items() if s == 7]
        summary = " ".join(f"h{i + 1}:{s}" for i, s in sorted(statuses.items()))
        seconds = time.monotonic() - started
        self.cycle_seconds.setdefault(fault, []).append(seconds)
        label = f"{fault}/{self.variant}" if self.variant else fault
        print(f"cycle {self.cycle:4d} {label:18s} holder={'h%d' % (holder + 1) if holder is not None else '-':3s} "
              f"exits {summary} ({seconds:.0f} s)", flush=True)
        for i, process in processes.items():
            if statuses.get(i) not in (0, None) and getattr(process, "message", None) and statuses.get(i) != 7:
                print(f"           h{i + 1}: {process.message[0][:200]}", flush=True)
        if lost:
            self.grants_lost += 1
            self.lost_cycles.append(self.cycle)
            blamed = self.blame(fault, history)
            self.lost_by_fault[blamed] = self.lost_by_fault.get(blamed, 0) + 1
            # with a reuse interval a lost grant is a failure, unless asynchronous replication lost
            # the answers that would have kept it (decided by the checker, which sees the history)
            self.login()

    def blame(self, fault, history):
        """The fault of the cycle in which this grant died: the cycle of its first refused
        request. A killed holder's request that the server answered after its successor's revokes
        the family in the kill's cycle, while every host of that cycle already has a token; the
        loss shows in the next cycle, whatever that cycle's fault."""
        refused = [r for r in history if r["seq"] > getattr(self, "login_seq", 0) and r["status"] != 200]
        if refused:
            cycle = self.cycle_of_request.get(min(r["seq"] for r in refused))
            if cycle in self.cycle_fault:
                return self.cycle_fault[cycle]
        return fault

    def restart_postgres(self):
        namespace, _, directory = self.nodes[self.primary]
        # pg_ctl starts the new postmaster from this process: inside the primary's namespace.
        self.cluster("restart", directory, "immediate", namespace=namespace)

    # --- replication ----------------------------------------------------------------------
    def standby_streaming(self):
        """The standby is connected and (sync) counted as synchronous by the primary."""
        # `ANY 1 (pg1, pg2)` names the synchronous standby "quorum"
        wanted = ("streaming sync", "streaming quorum") if self.args.replication == "sync" else ("streaming async",)
        state = self.psql("SELECT state || ' ' || sync_state FROM pg_stat_replication WHERE application_name IN ('pg1', 'pg2')")
        return state in wanted

    def garp(self, namespace, address):
        """A gratuitous ARP for address from namespace's eth0, as keepalived sends on takeover,
        so that the hosts' neighbour tables move to the new primary at once."""
        script = (
            "import socket, struct, sys\n"
            "s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)\n"
            "s.bind(('eth0', 0))\n"
            "mac = s.getsockname()[4]\n"
            "ip = socket.inet_aton(sys.argv[1])\n"
            "arp = struct.pack('!HHBBH', 1, 0x0800, 6, 4, 1) + mac + ip + bytes(6) + ip\n"
            "s.send(b'\\xff' * 6 + mac + b'\\x08\\x06' + arp)\n")
        subprocess.run(["ip", "netns", "exec", namespace, sys.executable, "-c", script, address], check=True)

    def failover(self, release=None):
        """The primary is already cut off. Fence it, promote the standby, move the service
        address, then make the old primary the new standby. `release` runs right after the
        promoted standby holds the address."""
        old, new = self.primary, 1 - self.primary
        old_namespace, _, old_directory = self.nodes[old]
        new_namespace, new_address, new_directory = self.nodes[new]
        started = time.monotonic()
        # Fence: the old primary's PostgreSQL is stopped through the out-of-band path (as a
        # failover manager's STONITH), and the service address is taken from it, before the
        # standby takes over: a cut-off primary must never answer on the service address again.
        self.cluster("fence", old_directory)
        subprocess.run(["ip", "-n", old_namespace, "addr", "del", f"{self.args.database_address}/32", "dev", "eth0"], check=True)
        self.heal(None, new_namespace)  # the lagging variant cut the standby's replication link
        self.cluster("promote", new_directory, namespace=new_namespace)
        subprocess.run(["ip", "-n", new_namespace, "addr", "add", f"{self.args.database_address}/32", "dev", "eth0"], check=True)
        self.garp(new_namespace, self.args.database_address)
        self.primary = new
        promoted = time.monotonic()
        self.failover_seconds.append(promoted - started)
        if release:
            release()
        # The old primary, its link back, becomes the new standby from a fresh base backup (with
        # synchronous replication the new primary's commits wait until then).
        self.heal(None, old_namespace)
        self.cluster("standby", old_directory, new_directory, new_address, os.path.basename(old_directory), namespace=old_namespace)
        self.wait_until("the new standby to stream", self.standby_streaming, bound=60)
        self.reseed_seconds.append(time.monotonic() - promoted)

    def run_failover(self, processes):
        """One failover cycle; returns (holder or None, processes)."""
        variant = self.random.choice(FAILOVER_VARIANTS)
        self.failovers[variant] = self.failovers.get(variant, 0) + 1
        self.failover_cycles.add(self.cycle)
        primary_namespace = self.nodes[self.primary][0]
        holder = None
        if variant == "held":
            self.http("POST", "/faults", {"user": self.user, "kind": "hold"})
            processes.update(self.start_all())
            held = self.wait_until("the server to hold the holder's token request", lambda: self.held_or_all_ended(processes))
            holder = self.host_of(held["from"])
            # The journal is committed, the request is at the server: its answer must be
            # committed on the promoted standby, or re-presented once.
            self.interrupted_cycles.add(self.cycle)
            self.cut(None, "all", primary_namespace)
            release = lambda: self.http("POST", "/release", {"user": self.user})
            if self.random.random() < 0.5:
                release()  # the answer reaches the holder while its database is gone
                self.failover()
            else:
                self.failover(release)
        elif variant == "random":
            processes.update(self.start_all())
            # mid-refresh: a random moment after a host took the lock (its journal, its request
            # or its commit may be in flight)
            # (a refresh can take and free the lock between two looks: then the cut falls after it)
            address = self.wait_until("a host to take the refresh lock", lambda: self.holder_or_ended(processes))
            holder = self.host_of(address) if address is not True else None
            time.sleep(self.random.uniform(0, 0.5))
            self.interrupted_cycles.add(self.cycle)
            self.cut(None, "all", primary_namespace)
            self.failover()
        else:  # lagging: the standby's replication link is cut first
            standby_namespace = self.nodes[1 - self.primary][0]
            self.cut(None, f"peer:{self.nodes[self.primary][1]}", standby_namespace)
            processes.update(self.start_all())
            def acknowledged_or_waiting():
                if any(p.poll() == 0 for p in processes.values()):
                    return True
                if all(p.poll() is not None for p in processes.values()):
                    raise Failure(f"cycle {self.cycle}: every host ended, none acknowledged "
                                  f"(exits {[p.returncode for p in processes.values()]})")
                waiting = self.psql("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
                return waiting not in (None, "0")
            self.wait_until("a host to acknowledge a token or a commit to wait for the standby", acknowledged_or_waiting)
            address = self.holder_address()
            holder = self.host_of(address) if address else None
            self.interrupted_cycles.add(self.cycle)
            self.cut(None, "all", primary_namespace)
            self.failover()
        self.variant = variant
        return holder

    # --- the checker ----------------------------------------------------------------------
    def check(self):
        history = self.history()
        answered = [r for r in history["answered"] if r["grant"] == "refresh_token"]
        issued = {}  # access fingerprint -> seq of the answer that issued it
        for record in history["answered"]:
            if record["status"] == 200 and record["access"]:
                issued[record["access"]] = record["seq"]
        acknowledged = {fp for (_, _, fp) in self.acknowledged}
        stored = {fp for (_, fp) in self.stored_after}
        committed = acknowledged | stored
        # 3. acknowledged tokens: issued by the server, and never newer than what is stored after
        # recovery. After a promotion with asynchronous replication an older token is what that
        # set-up loses (counted, not a failure); with synchronous replication it is a failure.
        newest = 0
        lost_cycles = set()
        counted_missing = set()
        for cycle in range(1, self.cycle + 1):
            for (c, host, fp) in self.acknowledged:
                if c == cycle:
                    if fp not in issued:
                        self.violations.append(f"cycle {cycle}: host {host + 1} acknowledged a token the server never issued")
                    else:
                        newest = max(newest, issued[fp])
            after = [fp for (c, fp) in self.stored_after if c == cycle]
            if after and issued.get(after[0], 0) < newest:
                missing_now = {fp for (c, _, fp) in self.acknowledged if c <= cycle and issued.get(fp, 0) > issued.get(after[0], 0)}
                missing = len(missing_now - counted_missing)
                counted_missing |= missing_now
                if cycle in self.failover_cycles and self.args.replication == "async":
                    self.failover_lost.append((cycle, missing))
                    lost_cycles.add(cycle)
                    newest = issued.get(after[0], 0)  # what the promoted standby had is the history from here
                else:
                    self.violations.append(
                        f"cycle {cycle} ({self.cycle_fault.get(cycle)}): after recovery the entry holds an older token than "
                        f"one a host acknowledged ({missing} acknowledged answers missing)")
        # 1. presented twice
        by_token = {}
        # In the order the requests arrived: two requests in flight at once (a killed holder's and
        # its successor's) may be answered in the other order.
        for record in sorted(answered, key=lambda r: r["arrived"]):
            by_token.setdefault(record["presented"], []).append(record)
        representations = 0
        representations_after_loss = 0
        async_tokens = set()  # refresh tokens presented again because a promotion lost their answer
        for token, records in by_token.items():
            if len(records) < 2:
                continue
            first = records[0]
            cycle = self.cycle_of_request.get(first["seq"])
            deliberate = len(records) == 2 and first["access"] not in committed and cycle in self.interrupted_cycles
            if deliberate:
                representations += 1
            elif any(self.cycle_of_request.get(r["seq"]) in lost_cycles for r in records[:-1]):
                # the promoted standby lacked the answer (asynchronous replication): the next
                # flight presented the refresh token it still had, as often as that was lost
                representations_after_loss += len(records) - 1
                async_tokens.add(token)
            else:
                cycles = [self.cycle_of_request.get(r["seq"]) for r in records]
                self.violations.append(
                    f"refresh token {token} presented {len(records)} times (cycles {cycles}, "
                    f"faults {[self.cycle_fault.get(c) for c in cycles]}, from {[r['from'] for r in records]}, "
                    f"statuses {[r['status'] for r in records]}, first answer committed: {first['access'] in committed}, "
                    f"arrived {[round(r['arrived'] % 1000, 2) for r in records]}, answered {[round(r['answered'] % 1000, 2) for r in records]}), "
                    "not a single re-presentation after an interrupted flight")
        # 2. rejected then presented again. One case is not a violation: check 1's deliberate
        # re-presentation, when the flight it follows was itself refused. The host that died or
        # was cut off never saw that refusal, so the next one presents the token once more; with
        # strict rotation a family revoked by the cycle before (a killed holder's request answered
        # after its successor's) shows up this way. Counted, not failed.
        refused_then_represented = 0
        for token, records in by_token.items():
            first_cycle = self.cycle_of_request.get(records[0]["seq"])
            if (len(records) == 2 and records[0]["status"] != 200 and first_cycle in self.interrupted_cycles
                    and records[1]["from"] != records[0]["from"] and records[1]["arrived"] > records[0]["answered"]):
                refused_then_represented += 1
                continue
            for record in records:
                if record["status"] != 200 and any(r["arrived"] > record["answered"] for r in records):
                    self.violations.append(
                        f"refresh token {token} presented again after the server rejected it (cycle {self.cycle_of_request.get(record['seq'])}; "
                        f"presentations from {[r['from'] for r in records]}, statuses {[r['status'] for r in records]}, errors {[r.get('error') for r in records]}, "
                        f"arrived {[round(r['arrived'] % 1000, 2) for r in records]}, answered {[round(r['answered'] % 1000, 2) for r in records]})")
        # a grant lost with a reuse interval: a failure, unless its refusal refused a refresh
        # token that asynchronous replication made the fleet present again (then it is measured)
        async_grants_lost = 0
        for cycle in self.lost_cycles:
            if self.strict:
                continue
            refused = [r["presented"] for r in answered if r["status"] != 200 and self.cycle_of_request.get(r["seq"]) in (cycle, cycle - 1)]
            if self.args.replication == "async" and any(token in async_tokens for token in refused):
                async_grants_lost += 1
            else:
                self.violations.append(f"cycle {cycle} ({self.cycle_fault.get(cycle)}): the grant was lost (exit 7) although the server has a reuse interval")
        # 4. one refresh per expiry: a refresh that presents the refresh token of the previous
        # answer is due only once that answer's token has entered `vault get`'s 60 s leeway, 4 s
        # after it was answered (64 s tokens). A request that arrives before that was sent by a
        # host that read a fresh token (the token cannot be read before its answer): a second
        # refresh of one expiry. One that arrives later refreshes the next expiry (a host that
        # started late, or waited out a restart), which is counted.
        successes = [r for r in answered if r["status"] == 200]
        by_issued_refresh = {r["refresh"]: r for r in history["answered"] if r["status"] == 200 and r["refresh"]}
        next_expiry_in_cycle = 0
        for record in successes:
            previous = by_issued_refresh.get(record["presented"])
            if previous is None:
                continue
            if record["arrived"] < previous["answered"] + 4.0:
                self.violations.append(
                    f"cycle {self.cycle_of_request.get(record['seq'])}: the token answered at {previous['answered'] % 1000:.2f} "
                    f"was refreshed again at {record['arrived'] % 1000:.2f}, while it was still fresh")
            elif self.cycle_of_request.get(record["seq"]) == self.cycle_of_request.get(previous["seq"]):
                next_expiry_in_cycle += 1
        # 5. with strict rotation, a grant is lost only where a flight was interrupted after its
        # request may have reached the server
        # (the loss shows in the cycle after, when a killed holder's request was answered last):
        # every refusal refused a refresh token first presented in such a cycle
        # or one issued before its family was revoked by such a re-presentation's refusal
        issuer = {r["refresh"]: r for r in history["answered"] if r["status"] == 200 and r["refresh"]}
        refusals = [r for r in answered if r["status"] != 200]
        for token, records in by_token.items():
            first_cycle = self.cycle_of_request.get(records[0]["seq"])
            issued_by = issuer.get(token)
            revoked_before = issued_by is not None and any(
                issued_by["answered"] <= r["answered"] <= records[0]["arrived"] and r["presented"] != token for r in refusals)
            if any(r["status"] != 200 for r in records) and first_cycle not in self.interrupted_cycles and not revoked_before:
                self.violations.append(
                    f"refresh token {token} was refused (cycle {self.cycle_of_request.get(records[-1]['seq'])}), and the flight that "
                    f"first presented it (cycle {first_cycle}, {self.cycle_fault.get(first_cycle)}) was not interrupted")
        stats = self.stats()
        refreshes = sum(1 for r in answered if r["status"] == 200)
        rejected = sum(1 for r in answered if r["status"] != 200)
        print()
        print(f"fleet: {self.cycle} cycles, {len(self.hosts)} hosts, seed {self.args.seed}, "
              f"server {'strict rotation' if self.strict else 'rotation with a 30 s reuse interval'}")
        print("faults: " + ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items())))
        print("vault get --fresh exits: " + ", ".join(f"{k}: {v}" for k, v in sorted(self.exits.items(), key=lambda kv: (kv[0] is None, kv[0]))))
        print(f"refresh requests answered: {len(answered)} ({refreshes} rotated, {rejected} refused); "
              f"acknowledged tokens: {len(self.acknowledged)} ({len(acknowledged)} distinct)")
        print(f"re-presentations after an interrupted flight that the server had refused (the host that presented it first never saw the refusal): {refused_then_represented}")
        print(f"re-presentations after an interrupted flight: {representations} "
              f"(accepted within the reuse interval: {stats['reused_within_interval']}); "
              f"reuse detected: {stats['reuse_detected']}; families revoked: {stats['families_revoked']}; "
              f"grants lost: {self.grants_lost} (logins: {self.logins})")
        if self.lost_by_fault:
            print("grants lost by fault: " + ", ".join(f"{k} {v}" for k, v in sorted(self.lost_by_fault.items())))
        print(f"cycles in which a host refreshed the next expiry too (it read the new token after it entered the leeway): {next_expiry_in_cycle}")
        if self.failovers:
            print(f"replication: {self.args.replication}; failovers: " + ", ".join(f"{k} {v}" for k, v in sorted(self.failovers.items()))
                  + f"; fence+promote+move took median {statistics.median(self.failover_seconds):.1f} s (max {max(self.failover_seconds):.1f} s), "
                  f"the new standby streaming after median {statistics.median(self.reseed_seconds):.1f} s (max {max(self.reseed_seconds):.1f} s)")
            lost_answers = sum(m for (_, m) in self.failover_lost)
            print(f"acknowledged refresh answers missing after a promotion: {lost_answers} in {len(self.failover_lost)} of "
                  f"{len(self.failover_cycles)} failovers" + (f" (cycles {[c for (c, _) in self.failover_lost]}); "
                  f"a spent refresh token presented again because of it: {representations_after_loss}; "
                  f"grants lost because of it: {async_grants_lost}" if self.failover_lost else ""))
        print("seconds per cycle: " + ", ".join(
            f"{k} {statistics.median(v):.0f} (median; max {max(v):.0f})" for k, v in sorted(self.cycle_seconds.items()))
            + f"; all {sum(sum(v) for v in self.cycle_seconds.values()) / max(1, self.cycle):.1f} on average")
        if self.lock_drops:
            drops = sorted(self.lock_drops)
            print(f"a cut-off holder's lock dropped by the server after: min {drops[0]:.1f} s, "
                  f"median {statistics.median(drops):.1f} s, max {drops[-1]:.1f} s ({len(drops)} cuts)")
        if self.violations:
            print(f"\nfleet: {len(self.violations)} violation(s):")
            for violation in self.violations:
                print("  " + violation)
            return 1
        print("fleet: every check passed")
        return 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cycles", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--strict", action="store_true")
    parser.add_argument("--vault", required=True)
    parser.add_argument("--scratch", required=True)
    parser.add_argument("--run", required=True)
    parser.add_argument("--hosts", nargs="+", required=True)
    parser.add_argument("--oauth", required=True)
    parser.add_argument("--oauth-ca", required=True)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--database-password-file", required=True)
    parser.add_argument("--postgres-nodes", nargs=2, required=True, help="NAMESPACE=ADDRESS=DIR of the primary, then the standby")
    parser.add_argument("--database-address", required=True)
    parser.add_argument("--replication", choices=["sync", "async"], required=True)
    parser.add_argument("--faults", default=",".join(FAULTS), help="the faults to draw from, comma-separated")
    parser.add_argument("--minutes", type=float, default=0, help="start no cycle after this many minutes (0: no limit)")
    parser.add_argument("--key-file", required=True)
    args = parser.parse_args()
    fleet = Fleet(args)
    for index in range(len(fleet.hosts)):
        copy = os.path.join(args.scratch, f"h{index + 1}", "vault.key")
        shutil.copyfile(args.key_file, copy)
        os.chmod(copy, 0o600)
    if not args.strict:
        fleet.http("POST", "/faults", {"user": fleet.user, "kind": "reuse_interval", "seconds": "30"})
    fleet.wait_until("the standby to stream", fleet.standby_streaming, bound=60)
    fleet.login()
    # Every fault in the short run at least once, then at random.
    faults = args.faults.split(",")
    if not faults or any(f not in FAULTS for f in faults):
        parser.error(f"--faults takes some of {','.join(FAULTS)}")
    plan = faults[:] if args.cycles >= len(faults) else []
    fleet.random.shuffle(plan)
    plan += [fleet.random.choice(faults) for _ in range(args.cycles - len(plan))]
    try:
        deadline = time.monotonic() + args.minutes * 60 if args.minutes > 0 else None
        for fault in plan:
            if deadline is not None and time.monotonic() > deadline:
                print(f"fleet: --minutes {args.minutes:g} reached after {fleet.cycle} of {args.cycles} cycles", flush=True)
                break
            fleet.run_cycle(fault)
    except Failure as failure:
        fleet.violations.append(str(failure))
    sys.exit(fleet.check())


if __name__ == "__main__":
    main()
