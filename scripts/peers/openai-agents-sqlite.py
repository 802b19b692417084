#!/usr/bin/env python3
"""The OpenAI Agents SDK's SQLite session at the device, on forge-store's workloads.

Usage (as root, for the loop device), in a virtualenv with the SDK:
  python3 -m venv /tmp/peers && /tmp/peers/bin/pip install openai-agents==0.24.0
  /tmp/peers/bin/python scripts/peers/openai-agents-sqlite.py --workload w1 --turns 100 [--fs ext4]

Each turn of `forge-store gen WORKLOAD --turns T` (one session) is run through the
SDK's own `Runner.run_streamed` with its `SQLiteSession` (a file on a filesystem made
for the run on a loop device) and its scripted test model (`agents.testing`), which
answers with the turn's content: step 1 a reasoning item (the turn's reasoning), an
assistant message (its first text) and the turn's three function calls, whose tool
(`read`) returns the turn's tool outputs; step 2 an assistant message (its second
text). The SDK persists what each step produced at the step's end; it never writes a
token delta. Prints the sectors the loop device wrote between a `sync` before the
first turn and one after the last, per logical byte as `forge-store bench` counts them
(17,700 a W1 turn), and the SQLite files' sizes.
"""
import argparse
import asyncio
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from forgebin import binary, logical_bytes  # noqa: E402

from agents import Agent, Runner, SQLiteSession, function_tool, set_tracing_disabled  # noqa: E402
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call  # noqa: E402
from openai.types.responses import ResponseReasoningItem  # noqa: E402
from openai.types.responses.response_reasoning_item import Summary  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from turns import turns_of  # noqa: E402


def steps_of(turn, n):
    """The scripted model's two steps for a turn."""
    first = [ResponseReasoningItem(id=f"rs_{n}", type="reasoning",
                                   summary=[Summary(text=turn["reasoning"], type="summary_text")])]
    texts = turn["texts"] + ["", ""]
    first.append(assistant_message(texts[0], item_id=f"msg_{n}_0"))
    for call in turn["calls"]:
        first.append(function_call(call["name"], call["input"], call_id=f"{call['id']}_{n}"))
    return [ModelStep(output=first), ModelStep(output=[assistant_message(texts[1], item_id=f"msg_{n}_1")])]


def sectors(dev):
    with open(f"/sys/block/{dev}/stat") as f:
        return int(f.read().split()[6])


async def run(turns, db):
    session = SQLiteSession("peer-session", db)
    outputs = []

    @function_tool
    def read(path: str) -> str:
        """Reads a file."""
        return outputs.pop(0)

    for n, turn in enumerate(turns):
        outputs[:] = [c["output"] or "" for c in turn["calls"]]
        model = ScriptedModel(steps_of(turn, n))
        agent = Agent(name="coder", instructions="You are a coding agent.", model=model, tools=[read])
        result = Runner.run_streamed(agent, turn["user"], session=session)
        async for _ in result.stream_events():
            pass
        model.assert_complete()
    items = await session.get_items()
    session.close()
    return items


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="w1", choices=["w1", "w2"])
    ap.add_argument("--turns", type=int, default=100)
    ap.add_argument("--fs", default="ext4", choices=["ext4", "xfs"])
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="peer-agents-")
    stream = os.path.join(work, "stream.jsonl")
    with open(stream, "w") as f:
        subprocess.run([binary(), "gen", args.workload, "--turns", str(args.turns)], stdout=f, check=True)
    turns = turns_of(stream)
    logical = logical_bytes(stream)
    img, mnt = os.path.join(work, "img"), os.path.join(work, "mnt")
    os.mkdir(mnt)
    subprocess.run(["truncate", "-s", "4G", img], check=True)
    subprocess.run(["mkfs." + args.fs, "-q", img], check=True)
    subprocess.run(["mount", "-o", "loop", img, mnt], check=True)
    try:
        source = subprocess.run(["findmnt", "-n", "-o", "SOURCE", mnt], check=True,
                                capture_output=True, text=True).stdout.strip()
        dev = os.path.basename(source)
        db = os.path.join(mnt, "agents.db")
        subprocess.run(["sync"], check=True)
        before = sectors(dev)
        set_tracing_disabled(True)
        items = asyncio.run(run(turns, db))
        subprocess.run(["sync"], check=True)
        wrote = (sectors(dev) - before) * 512
        files = {name: os.path.getsize(os.path.join(mnt, name)) for name in sorted(os.listdir(mnt))
                 if name.startswith("agents.db")}
    finally:
        subprocess.run(["umount", mnt], check=False)
        subprocess.run(["rm", "-rf", work], check=False)
    print(f"openai-agents SQLiteSession, {args.workload.upper()} T = {args.turns}, {args.fs}: "
          f"the device wrote {wrote} bytes, {wrote / logical:.2f}x the {logical} logical bytes; "
          f"files {files}; {len(items)} items stored")
    kinds = {}
    for item in items:
        kinds[item.get("type", item.get("role"))] = kinds.get(item.get("type", item.get("role")), 0) + 1
    print(f"items by kind: {kinds}")


if __name__ == "__main__":
    main()
