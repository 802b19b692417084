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
from typing import Annotated, TypedDict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer  # noqa: E402
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage  # noqa: E402
from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def graph(script, checkpointer):
    """The agent graph; `script` holds the current turn and its next step."""

    def agent(state):
        turn, n = script["turn"], script["n"]
        step = script["step"]
        script["step"] += 1
        texts = turn["texts"] + ["", ""]
        if step == 0:
            calls = [{"name": c["name"], "args": c["input"], "id": f"{c['id']}_{n}", "type": "tool_call"}
                     for c in turn["calls"]]
            content = [{"type": "reasoning", "reasoning": turn["reasoning"]},
                       {"type": "text", "text": texts[0]}]
            return {"messages": [AIMessage(content=content, tool_calls=calls, id=f"ai_{n}_0")]}
        return {"messages": [AIMessage(content=texts[1], id=f"ai_{n}_1")]}

    def tools(state):
        last = state["messages"][-1]
        outs = [c["output"] or "" for c in script["turn"]["calls"]]
        return {"messages": [ToolMessage(content=out, tool_call_id=call["id"], name=call["name"])
                             for call, out in zip(last.tool_calls, outs)]}

    def route(state):
        return "tools" if state["messages"][-1].tool_calls else END

    g = StateGraph(State)
    g.add_node("agent", agent)
    g.add_node("tools", tools)
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", route, ["tools", END])
    g.add_edge("tools", "agent")
    return g.compile(checkpointer=checkpointer)


def main():
    args = peer.parse_args(__doc__)

    def body(turns, mnt):
        conn = sqlite3.connect(os.path.join(mnt, "checkpoints.db"), check_same_thread=False)
        saver = SqliteSaver(conn)
        saver.setup()
        script = {"turn": None, "n": 0, "step": 0}
        app = graph(script, saver)
        config = {"configurable": {"thread_id": "peer-thread"}}
        for n, turn in enumerate(turns):
            script.update(turn=turn, n=n, step=0)
            app.invoke({"messages": [HumanMessage(content=turn["user"], id=f"user_{n}")]}, config)
        checkpoints = conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
        messages = len(app.get_state(config).values["messages"])
        conn.close()
        return f"{checkpoints} checkpoints, {messages} messages in the thread"

    # Checkpoints grow with the square of the thread: room for T = 100 and more.
    peer.measure("langgraph SqliteSaver", args, "checkpoints.db", body, image="64G")


if __name__ == "__main__":
    main()
