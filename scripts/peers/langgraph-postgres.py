#!/usr/bin/env python3
"""LangGraph's Postgres checkpointer at the device, on forge-store's workloads.

Usage (as root, for the loop device and `runuser postgres`), in a virtualenv with
LangGraph and psycopg, with PostgreSQL's server binaries installed:
  python3 -m venv /tmp/peers && /tmp/peers/bin/pip install langgraph==1.2.24 \\
      langgraph-checkpoint-postgres==3.2.0 langchain-core==1.8.3 "psycopg[binary]==3.3.9"
  /tmp/peers/bin/python scripts/peers/langgraph-postgres.py --workload w1 --turns 100 [--fs ext4]

The same graph and turns as `langgraph-sqlite.py` (`langgraph_graph.py`), compiled with
`PostgresSaver` on a throwaway cluster whose data directory is on a filesystem made for
the run on a loop device, as `forge-store bench --device` measures Postgres: `initdb`
with the server's defaults, warmed up with 128 MiB of WAL so the run uses recycled WAL
segments, and a `CHECKPOINT` after the last turn, inside the count. LangGraph writes a
checkpoint after every node: the thread's whole state (its blobs: the message list)
with each channel's version, so a turn's checkpoints grow with the thread. Prints the
sectors the loop device wrote between a `sync` before the first turn and one after the
checkpoint, per logical byte as `forge-store bench` counts them, and the checkpointer's
row counts.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer  # noqa: E402
from importlib.metadata import version  # noqa: E402
import psycopg  # noqa: E402
from langgraph.checkpoint.postgres import PostgresSaver  # noqa: E402
from langgraph_graph import graph, run_turns  # noqa: E402


def main():
    args = peer.parse_args(__doc__)

    def body(turns, mnt, pg):
        with psycopg.connect(pg.url, autocommit=True, prepare_threshold=0) as conn:
            saver = PostgresSaver(conn)
            saver.setup()
            script = {"turn": None, "n": 0, "step": 0}
            messages = run_turns(graph(script, saver), turns, script)
            counts = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                      for t in ("checkpoints", "checkpoint_blobs", "checkpoint_writes")}
        return f"rows {counts}, {messages} messages in the thread"

    peer.measure(f"LangGraph {version('langgraph')}, PostgresSaver", args, "postgres", body,
                 image="64G", server=peer.PgCluster)


if __name__ == "__main__":
    main()
