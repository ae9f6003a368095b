"""The store owner's read slot: ``context()`` is answered while the owner's Celery slot is
held by a long drain or an index rebuild, through real worker processes.

Each test proves the overlap by state, not by a clock: the answer comes back while the
blocking work is visibly unfinished (the memory its drain writes is still pending, the
rebuild's task has not finished), which could not happen if the read queued behind it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pipelines.read.budget import Partition
from tests.support.openai_stub import OpenAIStub, serve_stub
from workers.app import create_app

pytestmark = pytest.mark.integration

BUDGET = 16_000
SUBJECTS = ("ledger", "invoice export", "auth module", "search index", "nightly ETL",
            "payment gateway", "rate limiter", "audit log")  # fmt: skip


def _notes(n: int, session: str) -> list[dict[str, Any]]:
    return [
        {
            "content": f"We decided to move the {SUBJECTS[i % len(SUBJECTS)]} to PostgreSQL "
            f"because it needs transactions (ticket ACME-{session}-{i}).",
            "tenant_id": "acme",
            "task_id": "billing",
            "session_id": session,
        }
        for i in range(n)
    ]


def wait_for(check: Callable[[], Any], what: str, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def _retrieved(context: Any) -> int:
    return len(context.partition(Partition.RETRIEVED_MEMORY).items)


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with serve_stub() as running:
        yield running


def test_context_is_answered_while_a_drain_holds_the_owner(
    client, workers, db, stub: OpenAIStub
) -> None:  # type: ignore[no-untyped-def]
    # given an owner whose model answers, and memories it stored
    workers("write", ("write", "embed", "recall"), env=stub.worker_env(llm_timeout_s=60))
    seeded = client.record_many(_notes(20, "s1"))
    assert client.wait_until_settled([r.memory_id for r in seeded], timeout_s=60) == {"stored": 20}
    unlinked = "SELECT count(*) FROM memories WHERE status = 'stored' AND linked_at IS NULL"
    wait_for(lambda: db.execute(unlinked).fetchone()[0] == 0, "the link passes to finish")

    # when the model turns slow for its next answer and a new decision is recorded, so the
    # owner's drain sits in that call
    stub.control("slow", delay_s=8.0, times=1)
    held = client.record(
        "We decided to freeze the ledger schema until the audit ends.",
        tenant_id="acme",
        task_id="billing",
        session_id="s2",
    )
    wait_for(lambda: stub.count("mode:slow") == 1, "the drain's call to the slow model")
    context = client.context(
        "billing", "What did we decide about the ledger?", BUDGET, tenant_id="acme"
    )

    # then the context came back, full, while that drain is still unfinished
    assert _retrieved(context) > 0
    status = db.execute("SELECT status FROM memories WHERE id = %s", (held.memory_id,))
    assert status.fetchone()[0] == "pending"

    # and the drain then finishes as usual
    assert client.wait_until_settled([held.memory_id], timeout_s=60) == {"stored": 1}


def test_context_is_answered_all_through_a_rebuild_of_the_index(
    client, workers, db, settings
) -> None:  # type: ignore[no-untyped-def]
    # given an owner and a store of a few hundred memories
    workers("write", ("write", "embed", "recall"))
    seeded = client.record_many(_notes(300, "s1"))
    assert client.wait_until_settled([r.memory_id for r in seeded], timeout_s=120) == {
        "stored": 300
    }

    # when a rebuild of the episodic index runs on the owner's slot
    app = create_app(settings)
    rebuild = app.send_task(
        "memory.embed.rebuild_index", kwargs={"kind": "episodic"}, queue="embed"
    )
    wait_for(lambda: rebuild.state == "STARTED", "the rebuild to start", 60)
    answered_during: list[int] = []
    while not rebuild.ready():
        context = client.context("billing", "Why did we move the ledger?", BUDGET,
                                 tenant_id="acme")  # fmt: skip
        if not rebuild.ready():
            answered_during.append(_retrieved(context))
    report = rebuild.get(timeout=120)

    # then contexts were answered while it ran, every one of them with retrieved memories
    assert report["new"] != report["old"] and report["verified_points"] == 300
    assert answered_during, "no context() came back while the rebuild ran"
    assert all(count > 0 for count in answered_during), answered_during

    # and after the switch the new generation answers
    after = client.context("billing", "Why did we move the ledger?", BUDGET, tenant_id="acme")
    assert _retrieved(after) > 0


def test_a_pickled_message_on_the_read_slot_is_refused(workers, settings) -> None:  # type: ignore[no-untyped-def]
    # given an owner serving recall on its read slot
    owner = workers("write", ("write", "embed", "recall"))
    app = create_app(settings)
    query = {"tenant_id": "acme", "query": "ledger", "task_id": None, "limit": 3}

    # when a pickled recall is sent, then a JSON one
    pickled = app.send_task("memory.recall.search", kwargs=query, queue="recall",
                            serializer="pickle", task_id=f"p-{uuid.uuid4().hex}")  # fmt: skip
    plain = app.send_task("memory.recall.search", kwargs=query, queue="recall")

    # then only the JSON one is answered, and the owner says why it refused the other
    assert plain.get(timeout=30) == {"hits": [], "degraded": False}
    assert pickled.state == "PENDING"
    log = owner.log_text()
    assert "refused a message on recall" in log and "untrusted content" in log
