"""What the peer scripts share: the workload turn by turn, and the measurement at a
loop device."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from forgebin import binary, logical_bytes  # noqa: E402


def turns_of(path):
    """Each turn's user text, reasoning, texts (one per text block) and tool calls."""
    turns = []
    blocks = {}
    for line in open(path):
        if not line.strip():
            continue
        ev = json.loads(line)
        kind = ev.get("type")
        if kind == "user":
            turns.append({"user": ev.get("text", ""), "reasoning": "", "texts": [], "calls": []})
            blocks = {}
        elif not turns:
            continue
        elif kind == "reasoning-delta":
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
    """The peer scripts' arguments: `--workload w1|w2 --turns T --fs ext4|xfs`."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--workload", default="w1", choices=["w1", "w2"])
    ap.add_argument("--turns", type=int, default=100)
    ap.add_argument("--fs", default="ext4", choices=["ext4", "xfs"])
    return ap.parse_args()


def sectors(dev):
    """Sectors the block device `dev` has written."""
    with open(f"/sys/block/{dev}/stat") as f:
        return int(f.read().split()[6])


def measure(name, args, stem, body, image="8G"):
    """Generates the workload, makes a filesystem of `args.fs` on a loop device (an
    `image`-sized sparse file) and mounts it, runs `body(turns, mount)` between a `sync`
    before and one after, and prints what the device wrote per logical byte, the sizes
    of the mount's files whose names start with `stem`, and `body`'s own summary."""
    work = tempfile.mkdtemp(prefix="peer-")
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
            subprocess.run(["sync"], check=True)
            before = sectors(dev)
            summary = body(turns, mnt)
            subprocess.run(["sync"], check=True)
            wrote = (sectors(dev) - before) * 512
            files = {n: os.path.getsize(os.path.join(mnt, n)) for n in sorted(os.listdir(mnt))
                     if n.startswith(stem)}
        finally:
            subprocess.run(["umount", mnt], check=False)
    finally:
        subprocess.run(["rm", "-rf", work], check=False)
    print(f"{name}, {args.workload.upper()} T = {args.turns}, {args.fs}: the device wrote "
          f"{wrote} bytes, {wrote / logical:.2f}x the {logical} logical bytes; files {files}; "
          f"{summary}")
