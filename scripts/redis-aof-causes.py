#!/usr/bin/env python3
"""Where Redis's AOF bytes go: commands and bytes, by command and by kind of key.

Usage: scripts/redis-aof-causes.py FILE.jsonl [--binary PATH]
  e.g. forge-store gen w1 --turns 1 > w1.jsonl && scripts/redis-aof-causes.py w1.jsonl

Starts a throwaway `redis-server` (`appendonly yes`, `appendfsync always`, no AOF
rewrite, so the AOF holds every write of the run) in a temporary directory, replays
FILE into it with `forge-store replay` (the Redis store and its Streams bus, the CLI's
default policy), then reads the AOF back command by command. Prints the commands and
their bytes (as the AOF holds them, RESP framing included) by command and key kind:
session streams, tenant streams, and the store's keys. FILE's logical bytes (the text,
reasoning and tool input the stream carries) are counted as the bench counts them, so
the total is also given as bytes per logical byte.
Needs `redis-server` on PATH and the `forge-store` binary (target/{release,debug} or PATH).
"""
import collections
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from forgebin import binary, logical_bytes


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def commands(data):
    """(argument list, bytes) for each RESP command of an AOF file."""
    i, n = 0, len(data)
    while i < n:
        start = i
        if data[i:i + 1] != b"*":
            # The RDB preamble of a base file, or a `#` timestamp annotation.
            end = data.find(b"\r\n", i)
            if data[i:i + 1] == b"#" and end >= 0:
                i = end + 2
                continue
            sys.exit(f"unexpected byte {data[i:i + 1]!r} at {i}: not a RESP AOF")
        end = data.index(b"\r\n", i)
        count = int(data[i + 1:end])
        i = end + 2
        args = []
        for _ in range(count):
            end = data.index(b"\r\n", i)
            size = int(data[i + 1:end])
            i = end + 2
            args.append(data[i:i + size])
            i += size + 2
        yield args, i - start


def key_kind(args):
    """The kind of key a command writes, from the key layout of forge-redis."""
    if len(args) < 2:
        return "-"
    key = args[1].decode("utf-8", "replace")
    parts = key.split(":")
    if ":bus:" in key and not key.endswith(":members"):
        return "session stream"
    if key.endswith(":bus"):
        return "tenant stream"
    if ":work:" in key:
        return "work stream"
    if ":s:" in key:
        # P:t:{T}:s:hex(S)[:suffix...]
        idx = parts.index("s")
        rest = parts[idx + 2:]
        return "store " + (rest[0] if rest else "session")
    return "other " + (parts[-1] if parts else key)


def main():
    args = sys.argv[1:]
    given = None
    if "--binary" in args:
        k = args.index("--binary")
        given = args[k + 1]
        del args[k:k + 2]
    if len(args) != 1:
        sys.exit(__doc__)
    stream = os.path.abspath(args[0])
    work = tempfile.mkdtemp(prefix="redis-aof-causes-")
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", work,
         "--appendonly", "yes", "--appendfsync", "always", "--save", "",
         "--auto-aof-rewrite-percentage", "0", "--aof-timestamp-enabled", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        url = f"redis://127.0.0.1:{port}"
        subprocess.run([binary(given), "-q", "--backend", url, "replay", stream],
                       check=True, stdout=subprocess.DEVNULL)
    finally:
        server.terminate()
        server.wait()
    by_cmd = collections.Counter()
    by_cmd_bytes = collections.Counter()
    total_cmds = total_bytes = 0
    for path in sorted(glob.glob(os.path.join(work, "appendonlydir", "*.incr.aof"))):
        with open(path, "rb") as f:
            data = f.read()
        for argv, size in commands(data):
            name = argv[0].decode().upper()
            if name in ("MULTI", "EXEC", "SELECT"):
                group = name
            else:
                group = f"{name} {key_kind(argv)}"
            by_cmd[group] += 1
            by_cmd_bytes[group] += size
            total_cmds += 1
            total_bytes += size
    shutil.rmtree(work)
    logical = logical_bytes(stream)
    print(f"{total_cmds} commands, {total_bytes} AOF bytes; logical {logical} bytes: "
          f"{total_bytes / max(logical, 1):.1f}x")
    print(f"{'command, key':36} {'count':>7} {'bytes':>10} {'each':>6} {'per logical':>11}")
    for group, b in by_cmd_bytes.most_common():
        n = by_cmd[group]
        print(f"{group:36} {n:7} {b:10} {b / n:6.0f} {b / max(logical, 1):10.2f}x")


if __name__ == "__main__":
    main()
