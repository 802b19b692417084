"""A recorded stream (`forge-store gen`) turn by turn, for the peer scripts."""
import json


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
