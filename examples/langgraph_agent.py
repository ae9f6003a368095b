"""A small LangGraph agent whose state lives in memory-harness: kill it, start it again with
the same thread id, and it goes on from its last checkpoint.

Six deterministic nodes run in a chain (no LLM). Each one records what it did in the
LangGraph store (``MemharnessStore``: the note is also a memory of the tenant) and appends
its name to the graph state, which ``MemharnessSaver`` checkpoints after every step
(``durability="sync"``: the checkpoint is committed before the next node starts).

    python examples/langgraph_agent.py --thread-id demo-1 --delay-s 1
    # press Ctrl-C (or kill -9) during step 4, then run the same command again:
    # steps 1-3 are not run again; step 4 (interrupted) and 5-6 run once.

It prints one line per event (``RUN step_N``, ``DONE step_N``, ``FINISHED ...``), flushed, so
a supervisor (or the test that kills it) can follow it. Needs PostgreSQL and Redis
(``memharness migrate`` first); no worker is needed, the memories wait in the outbox.
"""

from __future__ import annotations

import argparse
import operator
import time
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore

from config import get_settings
from memharness.client import MemoryClient
from memharness.integrations.langgraph_saver import MemharnessSaver
from memharness.integrations.langgraph_store import MemharnessStore

STEPS = ("plan", "fetch", "parse", "analyse", "draft", "review")


class AgentState(TypedDict):
    goal: str
    done: Annotated[list[str], operator.add]


def make_step(index: int, name: str, delay_s: float) -> Callable[..., dict[str, Any]]:
    label = f"step_{index}"

    def step(state: AgentState, config: RunnableConfig, *, store: BaseStore) -> dict[str, Any]:
        print(f"RUN {label}", flush=True)
        time.sleep(delay_s)
        thread_id = config["configurable"]["thread_id"]
        store.put(
            ("runs", thread_id),
            label,
            {"text": f"Step {index} ({name}) of the goal '{state['goal']}' is finished."},
        )
        print(f"DONE {label}", flush=True)
        return {"done": [label]}

    return step


def build_graph(delay_s: float) -> StateGraph[AgentState]:
    graph: StateGraph[AgentState] = StateGraph(AgentState)
    previous = START
    for index, name in enumerate(STEPS, start=1):
        graph.add_node(f"step_{index}", make_step(index, name, delay_s))
        graph.add_edge(previous, f"step_{index}")
        previous = f"step_{index}"
    graph.add_edge(previous, END)
    return graph


def run(thread_id: str, tenant_id: str, delay_s: float) -> list[str]:
    settings = get_settings()
    with (
        MemoryClient(settings) as client,
        MemharnessSaver(settings, tenant_id=tenant_id) as saver,
        MemharnessStore(client, tenant_id=tenant_id, index={"fields": ["text"]}) as store,
    ):
        app = build_graph(delay_s).compile(checkpointer=saver, store=store)
        config: Any = {"configurable": {"thread_id": thread_id}}
        snapshot = app.get_state(config)
        # A saved thread with nodes still to run resumes from its checkpoint (input None).
        resuming = bool(snapshot.next)
        if snapshot.values and not resuming:
            print(f"FINISHED done={','.join(snapshot.values['done'])} (already)", flush=True)
            return list(snapshot.values["done"])
        print(f"START thread={thread_id} resume={'yes' if resuming else 'no'}", flush=True)
        given: AgentState | None = None
        if not resuming:
            given = {"goal": "summarise the incident report", "done": []}
        final = app.invoke(given, config, durability="sync")
        print(f"FINISHED done={','.join(final['done'])}", flush=True)
        return list(final["done"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--thread-id", default="demo-thread")
    parser.add_argument("--tenant-id", default="demo")
    parser.add_argument("--delay-s", type=float, default=0.5, help="time each step takes")
    args = parser.parse_args()
    run(args.thread_id, args.tenant_id, args.delay_s)


if __name__ == "__main__":
    main()
