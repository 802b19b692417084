"""What the measurement scripts beside this file share: the `forge-store` binary, and
the logical bytes of a recorded stream as the benchmark counts them."""
import json
import os
import shutil
import sys


def binary(given=None):
    """`given`, else target/{release,debug}/forge-store of this checkout, else PATH."""
    if given:
        return given
    here = os.path.dirname(os.path.abspath(__file__))
    for kind in ("release", "debug"):
        p = os.path.join(here, "..", "target", kind, "forge-store")
        if os.path.exists(p):
            return p
    found = shutil.which("forge-store")
    if not found:
        sys.exit("forge-store not found: cargo build -p forge-store-cli")
    return found


def json_len(v):
    return len(json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode())


def logical_bytes(path):
    """The bench's logical bytes: user text, text and reasoning deltas, tool inputs as
    JSON, and tool outputs (the `output` text of an object output)."""
    total = 0
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            ev = json.loads(line)
            kind = ev.get("type")
            if kind == "user":
                total += len(ev.get("text", "").encode())
                total += sum(len(p.get("text", "").encode()) for p in ev.get("parts", [])
                             if p.get("type") == "text")
            elif kind in ("text-delta", "reasoning-delta"):
                total += len(ev.get("text", "").encode())
            elif kind == "tool-call":
                total += json_len(ev.get("input"))
            elif kind == "tool-result":
                out = ev.get("output")
                if isinstance(out, str):
                    total += len(out.encode())
                elif isinstance(out, dict) and isinstance(out.get("output"), str):
                    total += len(out["output"].encode())
                else:
                    total += json_len(out)
    return total
