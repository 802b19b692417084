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
import asyncio
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer  # noqa: E402
from importlib.metadata import version  # noqa: E402
from agents import Agent, Runner, SQLiteSession, function_tool, set_tracing_disabled  # noqa: E402
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call  # noqa: E402
from openai.types.responses import ResponseReasoningItem  # noqa: E402
from openai.types.responses.response_reasoning_item import Summary  # noqa: E402


def steps_of(turn, n):
    """The scripted model's two steps for a turn."""
    first = [ResponseReasoningItem(id=f"rs_{n}", type="reasoning",
                                   summary=[Summary(text=turn["reasoning"], type="summary_text")])]
    texts = turn["texts"] + ["", ""]
    first.append(assistant_message(texts[0], item_id=f"msg_{n}_0"))
    for call in turn["calls"]:
        first.append(function_call(call["name"], call["input"], call_id=f"{call['id']}_{n}"))
    return [ModelStep(output=first), ModelStep(output=[assistant_message(texts[1], item_id=f"msg_{n}_1")])]


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
    args = peer.parse_args(__doc__)
    set_tracing_disabled(True)

    def body(turns, mnt):
        items = asyncio.run(run(turns, os.path.join(mnt, "agents.db")))
        kinds = {}
        for item in items:
            kind = item.get("type", item.get("role"))
            kinds[kind] = kinds.get(kind, 0) + 1
        return f"{len(items)} items stored: {kinds}"

    peer.measure(f"OpenAI Agents SDK {version('openai-agents')}, SQLiteSession", args, "agents.db", body, image="4G")


if __name__ == "__main__":
    main()
