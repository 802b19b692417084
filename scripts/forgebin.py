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
    """The bench's logical bytes of the stream in `path` ([`event_logical_bytes`] summed)."""
    with open(path) as f:
        return sum(event_logical_bytes(json.loads(line)) for line in f if line.strip())


def event_logical_bytes(ev):
    """The bench's logical bytes of one event: user text, text and reasoning deltas, tool
    inputs as JSON, and tool outputs (the `output` text of an object output)."""
    kind = ev.get("type")
    if kind == "user":
        return len(ev.get("text", "").encode()) + sum(
            len(p.get("text", "").encode()) for p in ev.get("parts", [])
            if p.get("type") == "text")
    if kind in ("text-delta", "reasoning-delta"):
        return len(ev.get("text", "").encode())
    if kind == "tool-call":
        return json_len(ev.get("input"))
    if kind == "tool-result":
        out = ev.get("output")
        if isinstance(out, str):
            return len(out.encode())
        if isinstance(out, dict) and isinstance(out.get("output"), str):
            return len(out["output"].encode())
        return json_len(out)
    return 0
