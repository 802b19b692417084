#!/usr/bin/env python3
"""Google ADK's database session service on SQLite at the device, on forge-store's workloads.

Usage (as root, for the loop device), in a virtualenv with ADK:
  python3 -m venv /tmp/peers && /tmp/peers/bin/pip install google-adk==2.13.0
  /tmp/peers/bin/python scripts/peers/adk-sqlite.py --workload w1 --turns 100 [--fs ext4]

Each turn of `forge-store gen WORKLOAD --turns T` (one session) runs through ADK's own
`Runner` with an `LlmAgent` and `DatabaseSessionService` on a SQLite file
(`sqlite+aiosqlite`) of a filesystem made for the run on a loop device. The agent's
model is a scripted `BaseLlm`: step 1 answers with the turn's reasoning (a thought
part), its first text and its three function calls, whose tool (`read`) returns the
turn's tool outputs; step 2 with its second text. ADK appends each non-partial event
(the user's message, each model response, the tools' responses) to the session as it
happens. Prints the sectors the loop device wrote between a `sync` before the first
turn and one after the last, per logical byte as `forge-store bench` counts them
(17,700 a W1 turn), and the files' sizes.
"""
import asyncio
import logging
import os
import sys
from typing import AsyncGenerator

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer  # noqa: E402
from importlib.metadata import version  # noqa: E402
from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.models.base_llm import BaseLlm  # noqa: E402
from google.adk.models.llm_request import LlmRequest  # noqa: E402
from google.adk.models.llm_response import LlmResponse  # noqa: E402
from google.adk.runners import Runner  # noqa: E402
from google.adk.sessions import DatabaseSessionService  # noqa: E402
from google.genai import types  # noqa: E402

SCRIPT = {"turn": None, "n": 0, "step": 0}


class ScriptedLlm(BaseLlm):
    """Answers each call with the current turn's next step."""

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        turn, n = SCRIPT["turn"], SCRIPT["n"]
        step = SCRIPT["step"]
        SCRIPT["step"] += 1
        texts = turn["texts"] + ["", ""]
        if step == 0:
            parts = [types.Part(text=turn["reasoning"], thought=True), types.Part(text=texts[0])]
            parts += [types.Part(function_call=types.FunctionCall(
                name=c["name"], args=c["input"], id=f"{c['id']}_{n}")) for c in turn["calls"]]
        else:
            parts = [types.Part(text=texts[1])]
        yield LlmResponse(content=types.Content(role="model", parts=parts))


def read(path: str) -> str:
    """Reads a file."""
    return SCRIPT["outputs"].pop(0)


async def run(turns, db):
    service = DatabaseSessionService(f"sqlite+aiosqlite:///{db}")
    agent = LlmAgent(name="coder", instruction="You are a coding agent.",
                     model=ScriptedLlm(model="scripted"), tools=[read])
    runner = Runner(agent=agent, app_name="peer", session_service=service)
    session = await service.create_session(app_name="peer", user_id="u", session_id="peer-session")
    for n, turn in enumerate(turns):
        SCRIPT.update(turn=turn, n=n, step=0, outputs=[c["output"] or "" for c in turn["calls"]])
        message = types.Content(role="user", parts=[types.Part(text=turn["user"])])
        async for _ in runner.run_async(user_id="u", session_id=session.id, new_message=message):
            pass
        assert SCRIPT["step"] == 2, f"turn {n}: the model was called {SCRIPT['step']} times"
    stored = await service.get_session(app_name="peer", user_id="u", session_id=session.id)
    await runner.close()
    await service.close()
    return len(stored.events)


def main():
    args = peer.parse_args(__doc__)
    # The scripted model reports no token usage; ADK says so at every response.
    logging.disable(logging.WARNING)

    def body(turns, mnt):
        return f"{asyncio.run(run(turns, os.path.join(mnt, 'adk.db')))} events stored"

    peer.measure(f"Google ADK {version('google-adk')}, DatabaseSessionService on SQLite", args, "adk.db", body)


if __name__ == "__main__":
    main()
