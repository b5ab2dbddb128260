#!/usr/bin/env python3
"""plist-racer: plays an app that writes its defaults plist while `vault migrate` rewrites it.

Used by Tests/vaultTests/MigrateRaceTests. One process serves many runs; it reads commands on
stdin and answers on stdout, one line each:

    arm PATH MODE DELAY_US MARKER   watch PATH's directory (inotify); answers "armed"
    done                            the migration has ended; answers "LAST WRITES", the racerMarker
                                    of the last write (or -1 if none) and how many writes it made

Between the two it writes PATH as an app would (its cached copy of the plist, as read at `arm`,
plus `racerMarker`), timed by the migration's own temporary file `.NAME.tmp-*`:

    rename-early   when the temporary file is created: write a new file and rename it over PATH
    rename-late    when the temporary file is closed (written and synced): the same
    inplace-held   open PATH for writing when the temporary file is created, and truncate and
                   write through that descriptor when it is closed (the old file, if it has been
                   swapped out meanwhile)
    inplace-late   when the temporary file is closed: open PATH, truncate, write, close
    twice          rename-late, then once more at the next rename event of the temporary file

each after DELAY_US microseconds of busy waiting. The timing only makes the race likely; the
test's assertions hold whatever the timing.
"""
import ctypes
import os
import plistlib
import select
import struct
import sys
import time

IN_CLOSE_WRITE, IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE = 0x8, 0x40, 0x80, 0x100
libc = ctypes.CDLL(None, use_errno=True)


def spin(microseconds):
    end = time.perf_counter() + microseconds / 1e6
    while time.perf_counter() < end:
        pass


class Run:
    def __init__(self, path, mode, delay, marker):
        self.path, self.mode, self.delay, self.marker = path, mode, delay, marker
        with open(path, "rb") as f:
            self.cache = plistlib.load(f)
        self.prefix = "." + os.path.basename(path) + ".tmp-"
        self.fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0 or libc.inotify_add_watch(
                self.fd, os.path.dirname(path).encode(), IN_CREATE | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO) < 0:
            raise OSError(ctypes.get_errno(), "inotify")
        self.held = None
        self.writes = 0
        self.last = -1

    def contents(self):
        self.last = self.marker + self.writes
        self.writes += 1
        return plistlib.dumps(dict(self.cache, racerMarker=self.last), fmt=plistlib.FMT_XML)

    def write_by_rename(self):
        data = self.contents()
        temporary = self.path + ".racer"
        with open(temporary, "wb") as f:
            f.write(data)
        os.rename(temporary, self.path)

    def write_in_place(self, fd=None):
        data = self.contents()
        own = fd is None
        if own:
            fd = os.open(self.path, os.O_WRONLY | os.O_TRUNC)
        else:
            os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        os.close(fd)

    def event(self, mask):
        wants = self.writes == 0
        if self.mode == "rename-early" and mask & IN_CREATE and wants:
            spin(self.delay)
            self.write_by_rename()
        elif self.mode in ("rename-late", "twice") and mask & IN_CLOSE_WRITE and wants:
            spin(self.delay)
            self.write_by_rename()
        elif self.mode == "twice" and mask & (IN_MOVED_FROM | IN_MOVED_TO) and self.writes == 1:
            self.write_by_rename()
        elif self.mode == "inplace-held" and mask & IN_CREATE and self.held is None and wants:
            self.held = os.open(self.path, os.O_WRONLY)
        elif self.mode == "inplace-held" and mask & IN_CLOSE_WRITE and self.held is not None:
            spin(self.delay)
            fd, self.held = self.held, None
            self.write_in_place(fd)
        elif self.mode == "inplace-late" and mask & IN_CLOSE_WRITE and wants:
            spin(self.delay)
            self.write_in_place()

    def drain(self):
        try:
            buffer = os.read(self.fd, 65536)
        except BlockingIOError:
            return
        offset = 0
        while offset < len(buffer):
            _, mask, _, length = struct.unpack_from("iIII", buffer, offset)
            name = buffer[offset + 16:offset + 16 + length].rstrip(b"\0").decode()
            offset += 16 + length
            if name.startswith(self.prefix):
                self.event(mask)

    def finish(self):
        if self.held is not None:
            os.close(self.held)
        os.close(self.fd)
        return f"{self.last} {self.writes}"


def main():
    run = None
    stdin = sys.stdin.buffer
    pending = b""
    while True:
        watched = [0] + ([run.fd] if run else [])
        ready, _, _ = select.select(watched, [], [])
        if run and run.fd in ready:
            run.drain()
        if 0 not in ready:
            continue
        chunk = os.read(0, 4096)
        if not chunk:
            return
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            words = line.decode().split()
            if words[0] == "arm":
                run = Run(words[1], words[2], int(words[3]), int(words[4]))
                answer = "armed"
            else:
                run.drain()  # whatever happened before the migration ended
                answer = run.finish()
                run = None
            sys.stdout.write(answer + "\n")
            sys.stdout.flush()


main()
