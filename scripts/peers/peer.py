"""What the peer scripts share: the workload turn by turn, the measurement at a loop
device, and the JSON rows `forge-store bench --peers FILE` draws.

Also a command line for `opencode.sh`:
  peer.py turns STREAM DIR          each turn of STREAM as DIR/turn-N.json (+ its tool
                                    outputs as DIR/turn-N-out-K.txt) for mock-llm.mjs
  peer.py logical STREAM            the stream's logical bytes
  peer.py record FILE SYSTEM WORKLOAD TURNS FS DEVICE_BYTES LOGICAL_BYTES COMMAND
                                    adds (or replaces) one row of FILE
"""
import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from forgebin import binary, event_logical_bytes, logical_bytes  # noqa: E402


def turns_of(path):
    """Each turn's user text, reasoning, texts (one per text block), tool calls, and
    logical bytes (as the benchmark counts them)."""
    turns = []
    blocks = {}
    for line in open(path):
        if not line.strip():
            continue
        ev = json.loads(line)
        kind = ev.get("type")
        if kind == "user":
            turns.append({"user": ev.get("text", ""), "reasoning": "", "texts": [], "calls": [],
                          "logical": 0})
            blocks = {}
        if turns:
            turns[-1]["logical"] += event_logical_bytes(ev)
        if kind == "user" or not turns:
            continue
        if kind == "reasoning-delta":
            turns[-1]["reasoning"] += ev.get("text", "")
        elif kind == "text-start":
            blocks[ev["id"]] = len(turns[-1]["texts"])
            turns[-1]["texts"].append("")
        elif kind == "text-delta":
            turns[-1]["texts"][blocks[ev["id"]]] += ev.get("text", "")
        elif kind == "tool-call":
            turns[-1]["calls"].append({"id": ev["toolCallId"], "name": ev["toolName"],
                                       "input": ev.get("input", {}), "output": None})
        elif kind == "tool-result":
            for call in turns[-1]["calls"]:
                if call["id"] == ev["toolCallId"]:
                    out = ev.get("output")
                    call["output"] = out if isinstance(out, str) else json.dumps(out)
    return turns


def parse_args(doc):
    """The peer scripts' arguments: `--workload w1|w2 --turns T --fs ext4|xfs --json FILE`."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--workload", default="w1", choices=["w1", "w2"])
    ap.add_argument("--turns", type=int, default=100)
    ap.add_argument("--fs", default="ext4", choices=["ext4", "xfs"])
    ap.add_argument("--json", metavar="FILE",
                    help="add the result to FILE, a JSON array `forge-store bench --peers` reads")
    return ap.parse_args()


def sectors(dev):
    """Sectors the block device `dev` has written."""
    with open(f"/sys/block/{dev}/stat") as f:
        return int(f.read().split()[6])


def size_of(path):
    """Bytes of a file, or of the files under a directory."""
    if not os.path.isdir(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs
               if not os.path.islink(os.path.join(d, f)))


def record(path, system, workload, turns, fs, device_bytes, logical_bytes, command):
    """Adds one single-session row to the JSON array in `path` (made when missing),
    replacing a row of the same system, workload, sessions, turns and filesystem; rows
    kept sorted."""
    row = {"system": system, "workload": workload.upper(), "sessions": 1, "turns": int(turns),
           "filesystem": fs, "logical_bytes": int(logical_bytes),
           "device_bytes": int(device_bytes), "command": command}
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            rows = json.load(f)
    key = ("system", "workload", "sessions", "turns", "filesystem")
    rows = [r for r in rows if tuple(r.get(k) for k in key) != tuple(row[k] for k in key)]
    rows.append(row)
    rows.sort(key=lambda r: tuple(r[k] for k in key))
    with open(path, "w") as f:
        json.dump(rows, f, indent=2)
        f.write("\n")


def measure(system, args, stem, body, image="8G", server=None):
    """Generates the workload, makes a filesystem of `args.fs` on a loop device (an
    `image`-sized sparse file) and mounts it, runs `body(turns, mount)` between a `sync`
    before and one after, and prints what the device wrote per logical byte, the sizes
    of the mount's files whose names start with `stem`, and `body`'s own summary; with
    `--json FILE`, adds the row to FILE.

    `server(mount)`, when given, is a context manager started before the first `sync`
    (a database server with its data on the device, warmed up); `body` is then called
    as `body(turns, mount, srv)` and `srv.settle()` runs before the last `sync`."""
    work = tempfile.mkdtemp(prefix="peer-")
    os.chmod(work, 0o755)  # a server running as another user reaches the mount
    try:
        stream = os.path.join(work, "stream.jsonl")
        with open(stream, "w") as f:
            subprocess.run([binary(), "gen", args.workload, "--turns", str(args.turns)],
                           stdout=f, check=True)
        turns = turns_of(stream)
        logical = logical_bytes(stream)
        img, mnt = os.path.join(work, "img"), os.path.join(work, "mnt")
        os.mkdir(mnt)
        subprocess.run(["truncate", "-s", image, img], check=True)
        subprocess.run(["mkfs." + args.fs, "-q", img], check=True)
        subprocess.run(["mount", "-o", "loop", img, mnt], check=True)
        try:
            source = subprocess.run(["findmnt", "-n", "-o", "SOURCE", mnt], check=True,
                                    capture_output=True, text=True).stdout.strip()
            dev = os.path.basename(source)
            with (server(mnt) if server else contextlib.nullcontext()) as srv:
                subprocess.run(["sync"], check=True)
                before = sectors(dev)
                summary = body(turns, mnt, srv) if server else body(turns, mnt)
                if server:
                    srv.settle()
                subprocess.run(["sync"], check=True)
                wrote = (sectors(dev) - before) * 512
            files = {n: size_of(os.path.join(mnt, n)) for n in sorted(os.listdir(mnt))
                     if n.startswith(stem)}
        finally:
            subprocess.run(["umount", mnt], check=False)
    finally:
        subprocess.run(["rm", "-rf", work], check=False)
    print(f"{system}, {args.workload.upper()} T = {args.turns}, {args.fs}: the device wrote "
          f"{wrote} bytes, {wrote / logical:.2f}x the {logical} logical bytes; files {files}; "
          f"{summary}")
    if args.json:
        command = " ".join(["scripts/peers/" + os.path.basename(sys.argv[0]), "--workload",
                            args.workload, "--turns", str(args.turns), "--fs", args.fs])
        record(args.json, system, args.workload, args.turns, args.fs, wrote, logical, command)


class PgCluster:
    """A throwaway PostgreSQL cluster with its data directory on the device, as
    `forge-store bench --device` makes one: `initdb` (as the `postgres` user), the
    server's defaults (`fsync`, `synchronous_commit`, `full_page_writes` on), started on
    a free port with its socket and log off the device, then warmed up: 128 MiB of WAL
    written and checkpointed, so the measured turns use recycled WAL segments, as on a
    server that has been running, not new ones zero-filled at creation. `settle()` is a
    `CHECKPOINT`: what the WAL holds reaches the tables and indexes inside the count."""

    WARM_UP_MIB = 128

    def __init__(self, mnt):
        import glob
        import shutil
        import socket
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        self.bin = os.path.dirname(bins[-1]) if bins else os.path.dirname(
            shutil.which("initdb") or sys.exit("no PostgreSQL server binaries (initdb)"))
        self.data = os.path.join(mnt, "postgres")
        self.aside = tempfile.mkdtemp(prefix="peer-pg-")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *cmd):
        subprocess.run(["runuser", "-u", "postgres", "--", os.path.join(self.bin, cmd[0]),
                        *cmd[1:]], check=True, stdout=subprocess.DEVNULL)

    def sql(self, statement):
        import psycopg
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(statement)

    def __enter__(self):
        os.mkdir(self.data)
        subprocess.run(["chown", "-R", "postgres", self.data, self.aside], check=True)
        self._run("initdb", "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C",
                  "-D", self.data)
        opts = f"-p {self.port} -k {self.aside} -c listen_addresses=127.0.0.1"
        self._run("pg_ctl", "-D", self.data, "-o", opts, "-l",
                  os.path.join(self.aside, "log"), "-w", "-t", "60", "start")
        rows = self.WARM_UP_MIB * 512
        for statement in (
                "CREATE TABLE warm_up AS SELECT g, repeat(md5(g::text), 62) AS pad "
                f"FROM generate_series(1, {rows}) g",
                "DROP TABLE warm_up", "CHECKPOINT", "SELECT pg_switch_wal()", "CHECKPOINT"):
            self.sql(statement)
        return self

    def settle(self):
        self.sql("CHECKPOINT")

    def __exit__(self, *exc):
        subprocess.run(["runuser", "-u", "postgres", "--", os.path.join(self.bin, "pg_ctl"),
                        "-D", self.data, "-m", "fast", "-w", "-t", "60", "stop"],
                       check=False, stdout=subprocess.DEVNULL)
        subprocess.run(["rm", "-rf", self.aside], check=False)
        return False


def write_turns(stream, out):
    """Each turn of `stream` as `out/turn-N.json` ({user, reasoning, texts, calls: [{input,
    output_file}], logical}) with each tool output in `out/turn-N-out-K.txt`, for
    mock-llm.mjs's `[[turn:FILE]]`; prints the number of turns."""
    os.makedirs(out, exist_ok=True)
    turns = turns_of(stream)
    for n, turn in enumerate(turns):
        calls = []
        for k, call in enumerate(turn["calls"]):
            path = os.path.join(out, f"turn-{n}-out-{k}.txt")
            with open(path, "w") as f:
                f.write(call["output"] or "")
            calls.append({"input": call["input"], "output_file": path})
        with open(os.path.join(out, f"turn-{n}.json"), "w") as f:
            json.dump({"user": turn["user"], "reasoning": turn["reasoning"],
                       "texts": turn["texts"], "calls": calls, "logical": turn["logical"]}, f)
    print(len(turns))


if __name__ == "__main__":
    cmd = sys.argv[1:2]
    if cmd == ["turns"] and len(sys.argv) == 4:
        write_turns(sys.argv[2], sys.argv[3])
    elif cmd == ["logical"] and len(sys.argv) == 3:
        print(logical_bytes(sys.argv[2]))
    elif cmd == ["record"] and len(sys.argv) == 10:
        record(*sys.argv[2:10])
    else:
        sys.exit(__doc__)
