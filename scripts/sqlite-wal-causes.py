#!/usr/bin/env python3
"""Where SQLite's WAL bytes go: frames per commit, by table, index and overflow.

Usage: scripts/sqlite-wal-causes.py FILE.jsonl [sqlite options]
  e.g. scripts/sqlite-wal-causes.py w1.jsonl page_size=1024

Replays FILE (replay format; `forge-store gen w1 --turns N` writes one) into a fresh
SQLite file with automatic checkpoints off, while this script holds a connection open
so the WAL survives the writer's exit. Then it reads every WAL frame header (the page
number, and whether the frame ends a commit) and maps pages to the b-tree that owns
them with SQLite's `dbstat` table. Prints, per b-tree, the frames and bytes written,
and per commit the average, so the floor of the layout is visible by cause.
Needs the `forge-store` binary on PATH or in target/{release,debug}.
"""
import collections
import os
import shutil
import sqlite3
import struct
import subprocess
import sys
import tempfile

from forgebin import binary


def frames(wal):
    """(page number, ends a commit) for every frame of the WAL file."""
    with open(wal, "rb") as f:
        head = f.read(32)
        if len(head) < 32:
            return [], 0
        magic, _, page_size = struct.unpack(">III", head[:12])
        if magic not in (0x377F0682, 0x377F0683):
            sys.exit(f"{wal} is not a WAL file")
        out = []
        while True:
            fh = f.read(24)
            if len(fh) < 24:
                break
            pgno, commit_size = struct.unpack(">II", fh[:8])
            if len(f.read(page_size)) < page_size:
                break
            out.append((pgno, commit_size != 0))
        return out, page_size


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    stream = os.path.abspath(sys.argv[1])
    options = "&".join(["wal_autocheckpoint=0"] + sys.argv[2:])
    work = tempfile.mkdtemp(prefix="sqlite-wal-causes-")
    db = os.path.join(work, "forge.db")
    # Create the file and the schema, then hold a connection while the writer runs: the
    # writer's close is then not the last, so it neither checkpoints nor deletes the WAL.
    subprocess.run([binary(), "--backend", f"sqlite://{db}?{options}", "sessions"],
                   check=True, capture_output=True)
    holder = sqlite3.connect(db)
    holder.execute("SELECT count(*) FROM sqlite_schema").fetchall()
    subprocess.run([binary(), "-q", "--backend", f"sqlite://{db}?{options}", "replay", stream],
                   check=True, stdout=subprocess.DEVNULL)
    wal_copy = os.path.join(work, "copy.wal")
    shutil.copyfile(db + "-wal", wal_copy)
    owner = {}
    for name, pageno, pagetype in holder.execute("SELECT name, pageno, pagetype FROM dbstat"):
        owner[pageno] = name + (" (overflow)" if pagetype == "overflow" else "")
    holder.close()
    fr, page_size = frames(wal_copy)
    commits = sum(1 for _, c in fr if c)
    by = collections.Counter(owner.get(p, "(other)") for p, _ in fr)
    frame_bytes = page_size + 24
    total = len(fr) * frame_bytes
    print(f"page size {page_size}; {len(fr)} frames in {commits} commits; "
          f"{total} WAL bytes ({total / max(commits, 1):.0f} per commit)")
    print(f"{'b-tree':32} {'frames':>8} {'per commit':>11} {'bytes':>12} {'share':>6}")
    for name, n in by.most_common():
        print(f"{name:32} {n:8} {n / max(commits, 1):11.2f} {n * frame_bytes:12} "
              f"{100 * n / len(fr):5.1f}%")
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
