#!/usr/bin/env python3
"""LangGraph's SQLite checkpointer at the device, on forge-store's workloads.

Usage (as root, for the loop device), in a virtualenv with LangGraph:
  python3 -m venv /tmp/peers && /tmp/peers/bin/pip install langgraph==1.2.24 \\
      langgraph-checkpoint-sqlite==3.1.2 langchain-core==1.8.3
  /tmp/peers/bin/python scripts/peers/langgraph-sqlite.py --workload w1 --turns 100 [--fs ext4]

Each turn of `forge-store gen WORKLOAD --turns T` (one thread) runs through a LangGraph
tool-calling agent graph, compiled with `SqliteSaver` on a file of a filesystem made for
the run on a loop device: an `agent` node whose scripted model answers step 1 with the
turn's reasoning, first text and three tool calls, a `tools` node whose `read` tool
returns the turn's tool outputs, and `agent` again for step 2's text. LangGraph writes a
checkpoint after every node (a super-step): the thread's whole state, the message list
included, so a turn's checkpoints grow with the thread. Prints the sectors the loop
device wrote between a `sync` before the first turn and one after the last, per
logical byte as `forge-store bench` counts them (17,700 a W1 turn), and the files' sizes.
"""
import os
import sqlite3
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer  # noqa: E402
from importlib.metadata import version  # noqa: E402
from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: E402
from langgraph_graph import graph, run_turns  # noqa: E402


def main():
    args = peer.parse_args(__doc__)

    def body(turns, mnt):
        conn = sqlite3.connect(os.path.join(mnt, "checkpoints.db"), check_same_thread=False)
        saver = SqliteSaver(conn)
        saver.setup()
        script = {"turn": None, "n": 0, "step": 0}
        messages = run_turns(graph(script, saver), turns, script)
        checkpoints = conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
        conn.close()
        return f"{checkpoints} checkpoints, {messages} messages in the thread"

    # Checkpoints grow with the square of the thread: room for T = 100 and more.
    peer.measure(f"LangGraph {version('langgraph')}, SqliteSaver", args, "checkpoints.db", body,
                 image="64G")


if __name__ == "__main__":
    main()
