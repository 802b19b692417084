"""The LangGraph agent graph the LangGraph peer scripts share: a tool-calling agent
whose scripted model answers each turn of forge-store's workload."""
from typing import Annotated, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages


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


def run_turns(app, turns, script):
    """Runs each turn through `app` on one thread; the thread's messages at the end."""
    config = {"configurable": {"thread_id": "peer-thread"}}
    for n, turn in enumerate(turns):
        script.update(turn=turn, n=n, step=0)
        app.invoke({"messages": [HumanMessage(content=turn["user"], id=f"user_{n}")]}, config)
    return len(app.get_state(config).values["messages"])
