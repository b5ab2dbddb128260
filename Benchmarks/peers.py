"""The Python peers of TokenVault, driven through the same workloads as Sources/tokenvault-bench.

Run by Benchmarks/bench.py with the venv that Scripts/bench makes (Benchmarks/requirements.txt).
Every command prints one JSON object on stdout; nothing else goes there.

    peers.py w1 --peer keyring|secretstorage|cryptfile --n N --service S
                [--file PATH --password-file PATH --kdf default|cheap]
        W1: set N entries, get all in random order, overwrite all, delete all.
    peers.py seed --peer keyring|secretstorage|cryptfile --service S [--file … --password-file … --kdf …]
        Stores entry 0 (account user-00000000), for the cold-CLI runs.
    peers.py cryptfile-get --file PATH --password-file PATH --kdf default|cheap SERVICE ACCOUNT
        What `keyring get` does with keyrings.cryptfile, as one process: its own CLI can only read
        the password from a terminal, so this stands in for it. Prints the secret.

The payload is Benchmarks/token-template.json with "{{i}}" replaced by the 8-digit index: the same
bytes Sources/tokenvault-bench stores.
"""

import argparse
import json
import math
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "token-template.json"), encoding="utf-8") as template_file:
    TEMPLATE = template_file.read().strip()

# keyrings.cryptfile's own defaults (Argon2id t=15, m=64 MiB, p=2) and the cheapest Argon2id
# allows, which leaves only the cost of its file format.
CRYPTFILE_KDF = {
    "default": None,
    "cheap": {"time_cost": 1, "memory_cost": 8, "parallelism": 1},
}

# Fixed seed: every backend gets its keys in the same random order.
SEED = 20240607


def payload(index):
    return TEMPLATE.replace("{{i}}", "%08d" % index)


def account(index):
    return "user-%08d" % index


def percentile(sorted_ns, q):
    """Nearest-rank percentile of a sorted list of nanoseconds, in microseconds."""
    if not sorted_ns:
        return None
    rank = max(1, math.ceil(q * len(sorted_ns)))
    return sorted_ns[rank - 1] / 1000.0


def phase(op, items):
    """Runs op(item) for each item, timing each call and the whole phase."""
    latencies = []
    clock = time.perf_counter_ns
    start = clock()
    for item in items:
        before = clock()
        op(item)
        latencies.append(clock() - before)
    total = clock() - start
    latencies.sort()
    return {
        "count": len(latencies),
        "seconds": total / 1e9,
        "p50_us": percentile(latencies, 0.50),
        "p99_us": percentile(latencies, 0.99),
    }


class KeyringAPIPeer:
    """A peer reached through the keyring package's API: subclasses set self.keyring, self.service."""

    def set(self, index):
        self.keyring.set_password(self.service, account(index), payload(index))

    def get(self, index):
        value = self.keyring.get_password(self.service, account(index))
        if value != payload(index):
            raise SystemExit("%s: wrong value for %d" % (self.name, index))

    def delete(self, index):
        self.keyring.delete_password(self.service, account(index))


class KeyringPeer(KeyringAPIPeer):
    """Python `keyring` with its SecretService backend, used as applications use it."""

    name = "keyring"

    def __init__(self, args):
        from keyring.backends.SecretService import Keyring

        self.keyring = Keyring()
        self.service = args.service


class SecretStoragePeer:
    """secretstorage with one persistent D-Bus connection and the default collection."""

    name = "secretstorage"

    def __init__(self, args):
        import secretstorage

        self.connection = secretstorage.dbus_init()
        self.collection = secretstorage.get_default_collection(self.connection)
        if self.collection.is_locked():
            raise SystemExit("secretstorage: the default collection is locked")
        self.service = args.service

    content_type = "application/json"

    def attributes(self, index):
        return {"service": self.service, "account": account(index)}

    def label(self, index):
        return "%s/%s" % (self.service, account(index))

    def set(self, index):
        self.collection.create_item(
            self.label(index),
            self.attributes(index),
            payload(index).encode(),
            replace=True,
            content_type=self.content_type,
        )

    def get(self, index):
        item = next(self.collection.search_items(self.attributes(index)), None)
        if item is None or item.get_secret() != payload(index).encode():
            raise SystemExit("secretstorage: wrong value for %d" % index)

    def delete(self, index):
        item = next(self.collection.search_items(self.attributes(index)), None)
        if item is None:
            raise SystemExit("secretstorage: missing %d" % index)
        item.delete()


def open_cryptfile(path, password_file, kdf):
    from keyrings.cryptfile.cryptfile import CryptFileKeyring

    keyring = CryptFileKeyring()
    keyring.file_path = path
    for name, value in (CRYPTFILE_KDF[kdf] or {}).items():
        setattr(keyring, name, value)
    with open(password_file, encoding="utf-8") as handle:
        # Setting the key creates the file (with its password reference) or checks it.
        keyring.keyring_key = handle.read().rstrip("\n")
    return keyring


class CryptFilePeer(KeyringAPIPeer):
    """keyrings.cryptfile: an INI file, one Argon2id + AES-GCM per get and per set."""

    name = "cryptfile"

    def __init__(self, args):
        self.keyring = open_cryptfile(args.file, args.password_file, args.kdf)
        self.service = args.service


class SecretStorageTokenVaultShapePeer(SecretStoragePeer):
    """secretstorage writing items of TokenVault's shape: the xdg:schema attribute beside service
    and account, TokenVault's label and content type. gnome-keyring's work per write grows with an
    item's attributes (one client, 400 items, three rounds: a CreateItem took 8.3-9.7 ms with two
    attributes, 10.5-15.0 ms with a third, issue 17), so this row compares the two clients with
    the provider doing the same work; the plain secretstorage row stays the goal's reference."""

    name = "secretstorage-tv-shape"

    content_type = "text/plain"

    def attributes(self, index):
        return {"service": self.service, "account": account(index), "xdg:schema": "dev.tokenvault.Credential"}

    def label(self, index):
        return "%s token for %s" % (self.service, account(index))


PEERS = {"keyring": KeyringPeer, "secretstorage": SecretStoragePeer,
         "secretstorage-tv-shape": SecretStorageTokenVaultShapePeer, "cryptfile": CryptFilePeer}


def w1(args):
    peer = PEERS[args.peer](args)
    indices = list(range(args.n))
    shuffled = indices[:]
    random.Random(SEED).shuffle(shuffled)
    result = {"n": args.n}
    result["set"] = phase(peer.set, indices)
    result["get"] = phase(peer.get, shuffled)
    result["overwrite"] = phase(peer.set, indices)
    result["delete"] = phase(peer.delete, indices)
    return result


def seed(args):
    PEERS[args.peer](args).set(0)
    return {"service": args.service, "account": account(0)}


def cryptfile_get(args):
    keyring = open_cryptfile(args.file, args.password_file, args.kdf)
    value = keyring.get_password(args.service_name, args.account_name)
    if value is None:
        sys.stderr.write("cryptfile-get: not found\n")
        sys.exit(2)
    sys.stdout.write(value + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("w1", "seed"):
        command = commands.add_parser(name)
        command.add_argument("--peer", choices=sorted(PEERS), required=True)
        command.add_argument("--service", required=True)
        command.add_argument("--file")
        command.add_argument("--password-file")
        command.add_argument("--kdf", choices=sorted(CRYPTFILE_KDF), default="default")
        if name == "w1":
            command.add_argument("--n", type=int, required=True)
    command = commands.add_parser("cryptfile-get")
    command.add_argument("--file", required=True)
    command.add_argument("--password-file", required=True)
    command.add_argument("--kdf", choices=sorted(CRYPTFILE_KDF), default="default")
    command.add_argument("service_name")
    command.add_argument("account_name")
    args = parser.parse_args()

    if args.command == "cryptfile-get":
        cryptfile_get(args)
        return
    result = w1(args) if args.command == "w1" else seed(args)
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
