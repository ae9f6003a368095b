"""``MemharnessSaver`` against the real PostgreSQL: LangGraph's own conformance suite
(``langgraph-checkpoint-conformance``), then what is ours: the sealed frame and its checksum,
retention, rollback, tenant isolation, bad input, and the sync twins."""

from __future__ import annotations

import asyncio
import operator
from collections.abc import AsyncGenerator, Iterator
from typing import Annotated, Any, TypedDict

import pytest

pytestmark = pytest.mark.integration

langgraph_conformance = pytest.importorskip("langgraph.checkpoint.conformance")


@pytest.fixture
def saver(db, settings) -> Iterator[Any]:  # type: ignore[no-untyped-def]
    from memharness.integrations.langgraph_saver import MemharnessSaver

    with MemharnessSaver(settings, tenant_id="acme") as memharness_saver:
        yield memharness_saver


def _put(saver: Any, thread: str, parent: dict[str, Any] | None = None, **values: Any) -> Any:
    from langgraph.checkpoint.conformance.test_utils import (
        generate_checkpoint,
        generate_config,
        generate_metadata,
    )

    config = generate_config(thread)
    if parent is not None:
        config["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
    checkpoint = generate_checkpoint(
        channel_values=values, channel_versions={key: 1 for key in values}
    )
    return saver.put(
        config, checkpoint, generate_metadata(step=len(values)), dict.fromkeys(values, 1)
    )


def test_langgraph_conformance_suite_passes(db, settings) -> None:  # type: ignore[no-untyped-def]
    # given: the suite's factory hands out one saver per capability on the test database
    from langgraph.checkpoint.conformance import checkpointer_test, validate
    from langgraph.checkpoint.conformance.capabilities import BASE_CAPABILITIES

    from memharness.integrations.langgraph_saver import MemharnessSaver

    @checkpointer_test(name="MemharnessSaver")
    async def factory() -> AsyncGenerator[Any, None]:
        with MemharnessSaver(settings, tenant_id="conformance") as memharness_saver:
            yield memharness_saver

    # when
    report = asyncio.run(validate(factory))

    # then: every base capability and prune ran and passed; copy_thread and
    # delete_for_runs are not implemented (ids are global keys of our checkpoints table)
    results = report.results
    failures = {name: r.failures for name, r in results.items() if r.passed is False}
    assert failures == {}
    for capability in BASE_CAPABILITIES:
        assert results[capability.value].passed is True, capability
        assert results[capability.value].tests_passed > 0
    assert results["prune"].passed is True
    assert results["copy_thread"].detected is False
    ran = sum(r.tests_passed for r in results.values())
    assert ran >= 60


def test_checkpoints_are_our_sealed_frames(saver, db) -> None:  # type: ignore[no-untyped-def]
    from workers.state.service import CheckpointService

    first = _put(saver, "thread-a", None, messages=["hello"])
    second = _put(saver, "thread-a", first, messages=["hello", "world"])

    # the rows are ours: our service verifies them and sees the parent link
    from workers.adapters.llm_offline import OfflineLLM

    service = CheckpointService(saver._pool, OfflineLLM())
    reports = service.verify("acme", "thread-a")
    assert [r.ok for r in reports] == [True, True]
    listed = service.list("acme", "thread-a")
    assert str(listed[0].id) == second["configurable"]["checkpoint_id"]
    assert str(listed[0].parent_id) == first["configurable"]["checkpoint_id"]


def test_a_corrupted_newest_checkpoint_falls_back_to_the_older_one(saver, db) -> None:  # type: ignore[no-untyped-def]
    from pipelines.errors import CheckpointFormatError

    first = _put(saver, "thread-b", None, step=["one"])
    second = _put(saver, "thread-b", first, step=["one", "two"])
    # when: one byte of the newest body flips on disk
    db.execute(
        "UPDATE checkpoints SET body = overlay(body placing '\\x00'::bytea from 100 for 1) "
        "WHERE id = %s",
        (second["configurable"]["checkpoint_id"],),
    )

    # then: the latest is the older, intact one; asking for the broken one says why
    latest = saver.get_tuple({"configurable": {"thread_id": "thread-b", "checkpoint_ns": ""}})
    assert latest is not None
    assert latest.checkpoint["id"] == first["configurable"]["checkpoint_id"]
    with pytest.raises(CheckpointFormatError, match="checksum"):
        saver.get_tuple(second)


def test_a_corrupted_pending_write_is_refused(saver, db) -> None:  # type: ignore[no-untyped-def]
    from pipelines.errors import CheckpointFormatError

    stored = _put(saver, "thread-w", None, a="x")
    saver.put_writes(stored, [("a", "value")], "task-1")
    db.execute("UPDATE langgraph_writes SET blob = blob || '\\x00'::bytea")
    with pytest.raises(CheckpointFormatError, match="SHA-256"):
        saver.get_tuple(stored)


def test_retention_keeps_the_last_n_and_the_parent(db, settings) -> None:  # type: ignore[no-untyped-def]
    from memharness.integrations.langgraph_saver import MemharnessSaver

    with MemharnessSaver(settings, tenant_id="acme", keep_last=3) as saver:
        parent = None
        ids = []
        for index in range(6):
            parent = _put(saver, "thread-r", parent, count=[index])
            ids.append(parent["configurable"]["checkpoint_id"])
            saver.put_writes(parent, [("count", index)], f"task-{index}")
        listed = [
            t.checkpoint["id"] for t in saver.list({"configurable": {"thread_id": "thread-r"}})
        ]
        assert listed == list(reversed(ids[-3:]))
        # the companions of pruned checkpoints went with them
        (count,) = db.execute(
            "SELECT count(*) FROM langgraph_checkpoints WHERE thread_id = 'thread-r'"
        ).fetchone()
        assert count == 3
        # and so did their pending writes
        kept = db.execute(
            "SELECT task_id FROM langgraph_writes WHERE thread_id = 'thread-r' ORDER BY 1"
        ).fetchall()
        assert kept == [("task-3",), ("task-4",), ("task-5",)]


def test_rollback_makes_an_earlier_state_the_head(saver) -> None:  # type: ignore[no-untyped-def]
    first = _put(saver, "thread-rb", None, plan=["draft"])
    second = _put(saver, "thread-rb", first, plan=["draft", "wrong turn"])

    head = saver.rollback(first)

    latest = saver.get_tuple({"configurable": {"thread_id": "thread-rb", "checkpoint_ns": ""}})
    assert latest is not None
    assert latest.config["configurable"]["checkpoint_id"] == head["configurable"]["checkpoint_id"]
    assert latest.checkpoint["channel_values"] == {"plan": ["draft"]}
    assert latest.parent_config is not None
    assert (
        latest.parent_config["configurable"]["checkpoint_id"]
        == first["configurable"]["checkpoint_id"]
    )
    assert latest.metadata["rolled_back_to"] == first["configurable"]["checkpoint_id"]
    # the abandoned branch is still listed
    ids = [t.checkpoint["id"] for t in saver.list({"configurable": {"thread_id": "thread-rb"}})]
    assert second["configurable"]["checkpoint_id"] in ids


def test_tenants_do_not_see_each_other(saver, settings) -> None:  # type: ignore[no-untyped-def]
    from memharness.integrations.langgraph_saver import MemharnessSaver

    stored = _put(saver, "shared-thread", None, secret="acme only")
    saver.put_writes(stored, [("secret", "acme's write")], "task-x")
    with MemharnessSaver(settings, tenant_id="globex", pool=saver._pool) as other:
        assert other.get_tuple(stored) is None
        assert list(other.list(None)) == []
        # a write naming acme's checkpoint lands in globex's own scope, never in acme's
        other.put_writes(stored, [("secret", "overwrite")], "task-x")
        other.delete_thread("shared-thread")
    got = saver.get_tuple(stored)
    assert got is not None
    assert got.pending_writes == [("task-x", "secret", "acme's write")]


def test_bad_input_names_the_field(saver, settings) -> None:  # type: ignore[no-untyped-def]
    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

    from memharness.integrations.langgraph_saver import MemharnessSaver
    from pipelines.errors import InvalidInput

    with pytest.raises(InvalidInput, match=r"config\.configurable\.thread_id"):
        saver.get_tuple({"configurable": {}})
    bad = generate_checkpoint()
    bad["id"] = "not-a-uuid"
    with pytest.raises(InvalidInput, match=r"checkpoint\.id"):
        saver.put({"configurable": {"thread_id": "t"}}, bad, generate_metadata(), {})
    with pytest.raises(InvalidInput, match="tenant_id"):
        MemharnessSaver(settings, tenant_id="bad tenant!", pool=saver._pool)
    with pytest.raises(InvalidInput, match="keep_last"):
        MemharnessSaver(settings, tenant_id="acme", keep_last=-1, pool=saver._pool)
    with pytest.raises(InvalidInput, match="thread_id"):
        saver.get_tuple({"configurable": {"thread_id": "x" * 2000}})


def test_thread_ids_that_are_not_task_ids_still_work(saver) -> None:  # type: ignore[no-untyped-def]
    from memharness.integrations.langgraph_saver import task_for_thread

    stored = _put(saver, "user 42 / chat #7", None, text="hi")
    assert task_for_thread("user 42 / chat #7").startswith("langgraph:")
    assert task_for_thread("plain-thread") == "plain-thread"
    assert task_for_thread("plain-thread", "child:1") != "plain-thread"
    got = saver.get_tuple(stored)
    assert got is not None
    assert got.checkpoint["channel_values"] == {"text": "hi"}


class State(TypedDict):
    log: Annotated[list[str], operator.add]


def _run_graph_with_interrupt(saver: Any) -> tuple[Any, ...]:
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Command, interrupt

    def approve(state: State) -> dict[str, list[str]]:
        return {"log": [f"approved:{interrupt('approve?')}"]}

    inner = StateGraph(State)
    inner.add_node("draft", lambda state: {"log": ["draft"]})
    inner.add_node("approve", approve)
    inner.add_edge(START, "draft")
    inner.add_edge("draft", "approve")
    inner.add_edge("approve", END)
    outer = StateGraph(State)
    outer.add_node("plan", lambda state: {"log": ["plan"]})
    outer.add_node("review", inner.compile())
    outer.add_node("ship", lambda state: {"log": ["ship"]})
    outer.add_edge(START, "plan")
    outer.add_edge("plan", "review")
    outer.add_edge("review", "ship")
    outer.add_edge("ship", END)
    app = outer.compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "review-1"}}
    paused = app.invoke({"log": []}, config)
    waiting = app.get_state(config)
    done = app.invoke(Command(resume="yes"), config)
    history = [(s.values.get("log"), s.next) for s in app.get_state_history(config)]
    return ([i.value for i in paused["__interrupt__"]], waiting.next, done["log"], history)


def test_a_subgraph_interrupt_and_resume_match_langgraphs_own_saver(saver) -> None:  # type: ignore[no-untyped-def]
    from langgraph.checkpoint.memory import InMemorySaver

    ours = _run_graph_with_interrupt(saver)
    reference = _run_graph_with_interrupt(InMemorySaver())
    assert ours == reference
    assert ours[0] == ["approve?"] and ours[1] == ("review",)
