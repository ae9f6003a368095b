"""One suite, two clients: every test runs against ``MemoryClient`` (PostgreSQL and Redis
in the agent's process) and ``RemoteMemoryClient`` (a real ``memharness serve`` on a spare
port, reached with an API key), with real workers behind both. Same calls, same answers,
same exceptions naming the same fields."""

from __future__ import annotations

import asyncio
import io
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from memharness.server.keys import create_key
from pipelines.errors import Conflict, InvalidInput, NotFound
from pipelines.state.models import TaskState
from tests.integration.test_http_api import Server, spawn_server, stop_server, wait_ready

pytestmark = pytest.mark.integration

TENANT = "acme"
SCOPE = {"tenant_id": TENANT, "task_id": "billing", "session_id": "s-1"}
STATE = {"phase": "execution", "tree": [{"id": "n1", "title": "Write the parser"}],
         "current_node_id": "n1"}  # fmt: skip


@pytest.fixture(scope="module")
def api_server(migrated, tmp_path_factory) -> Iterator[Server]:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("remote-client")
    server = spawn_server(
        tmp, "remote", {"MEMHARNESS_API_RATE_LIMIT_PER_S": "0", "MEMHARNESS_API_KEY_CACHE_S": "0.5"}
    )
    try:
        yield wait_ready(server)
    finally:
        stop_server(server)


def remote_key(db: Any, scopes: str = "read,write,admin", tenant: str = TENANT) -> str:
    text, _ = create_key(db, tenant_id=tenant, scopes=scopes)
    return text


@pytest.fixture(params=["local", "remote"])
def memory(request, db, redis_client) -> Iterator[Any]:  # type: ignore[no-untyped-def]
    """The client under test; the server starts only for the remote parametrisation."""
    if request.param == "local":
        from config import Settings
        from memharness import MemoryClient

        with MemoryClient(Settings()) as local:
            yield local
    else:
        from memharness import RemoteMemoryClient

        server: Server = request.getfixturevalue("api_server")
        with RemoteMemoryClient(server.url, remote_key(db)) as remote:
            yield remote


def test_record_recall_context_and_listing(memory, workers) -> None:  # type: ignore[no-untyped-def]
    workers("write")
    # given: one memory with an idempotency key, replayed, and a batch
    first = memory.record(
        "We decided to bill in cents because floats lose money.", idempotency_key="k-1", **SCOPE
    )
    replay = memory.record(
        "We decided to bill in cents because floats lose money.", idempotency_key="k-1", **SCOPE
    )
    assert first.status == "accepted"
    assert (replay.status, replay.memory_id) == ("duplicate", first.memory_id)
    batch = memory.record_many(
        [
            {**SCOPE, "content": "Status: the parser is blocked on the schema review."},
            {**SCOPE, "content": "The schema review delays the parser, which delays billing."},
            {**SCOPE, "content": "ok"},
        ]
    )
    assert [r.status for r in batch] == ["accepted", "accepted", "dropped"]
    ids = [first.memory_id, batch[0].memory_id, batch[1].memory_id]
    assert memory.wait_until_settled(ids, timeout_s=60) == {"stored": 3}

    # then: each read answers with the local client's types
    got = memory.get(first.memory_id, tenant_id=TENANT)
    assert got is not None and got.content.startswith("We decided to bill")
    assert memory.get(uuid.uuid4(), tenant_id=TENANT) is None
    hits = memory.recall("bill in cents", tenant_id=TENANT, limit=3)
    assert str(first.memory_id) in {hit["id"] for hit in hits}
    context = memory.context("billing", "How do we bill?", 4000, tenant_id=TENANT)
    assert "cents" in context.text and context.total_tokens <= 4000
    traced = memory.explain(context, tenant_id=TENANT)
    assert str(first.memory_id) in {item.id for item in traced}
    assert memory.affected_by("the schema review", tenant_id=TENANT).query == "the schema review"
    assert memory.knowledge(tenant_id=TENANT, query="billing") == []
    page = memory.list_memories(TENANT, task_id="billing", limit=2)
    assert len(page.items) == 2 and page.next_cursor is not None
    rest = memory.list_memories(TENANT, task_id="billing", cursor=page.next_cursor)
    assert {i.id for i in page.items + rest.items} == set(ids)
    assert memory.list_semantic(TENANT).items == []
    assert memory.stats(TENANT)["memories_stored"] == 3
    out = io.StringIO()
    counts = memory.export(TENANT, out)
    assert counts.memory == 3
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert (lines[0]["kind"], lines[-1]["kind"]) == ("header", "end")
    golden = [{"query": "How do we store money?", "expected_id": str(first.memory_id)}]
    assert memory.set_golden_queries(TENANT, golden) == 1
    memory.complete_task(TENANT, "billing")


def test_correct_forget_and_history(memory, workers) -> None:  # type: ignore[no-untyped-def]
    workers("owner")
    made = memory.record_many(
        [
            {**SCOPE, "content": "Preference: reports go out as PDF.", "type": "preference"},
            {**SCOPE, "content": "The nightly export ZEBRAFISH-7 runs at 02:00."},
        ]
    )
    pdf, secret = made[0].memory_id, made[1].memory_id
    memory.wait_until_settled([pdf, secret], timeout_s=60)

    # when: a memory is corrected, then corrected again through its old version
    fixed = memory.correct(
        pdf, "Preference: reports go out as HTML.", tenant_id=TENANT, reason="changed mind"
    )
    assert (fixed.supersedes, fixed.version) == (pdf, 2)
    with pytest.raises(Conflict) as late:
        memory.correct(pdf, "Preference: DOCX.", tenant_id=TENANT, reason="late")
    assert late.value.field == "memory_id"
    history = memory.history(pdf, tenant_id=TENANT)
    assert history.current_id == fixed.memory_id
    assert [v.version for v in history.versions] == [1, 2]
    with pytest.raises(NotFound) as unknown:
        memory.history(uuid.uuid4(), tenant_id=TENANT)
    assert unknown.value.field == "memory_id"

    # and: another is forgotten, and the erasure settles
    receipt = memory.forget(tenant_id=TENANT, reason="user asked", memory_id=secret)
    done = memory.wait_until_forgotten(receipt, tenant_id=TENANT, timeout_s=60)
    assert done.status == "done"
    again = memory.forget(tenant_id=TENANT, reason="again", memory_id=secret)
    assert again.already and again.request_id == receipt.request_id
    assert memory.forget_status(receipt.request_id, tenant_id=TENANT).status == "done"
    tombstones = memory.list_memories(TENANT, status="forgotten").items
    assert [t.id for t in tombstones] == [secret] and tombstones[0].content == ""
    assert "ZEBRAFISH" not in json.dumps(memory.recall("ZEBRAFISH-7 export", tenant_id=TENANT))


def test_checkpoint_resume_and_rollback(memory) -> None:  # type: ignore[no-untyped-def]
    from workers.state.service import CheckpointNotFound

    # a task id with "/" and "+" stays one id in the URL's path
    task = "team/parser+v2"

    first = memory.checkpoint(TENANT, task, TaskState.model_validate(STATE))
    later = TaskState.model_validate({**STATE, "iteration": 3})
    second = memory.checkpoint(TENANT, task, later, phase_transition=True)
    resumed = memory.resume(TENANT, task)
    assert resumed.checkpoint.checkpoint_id == second
    assert resumed.state.iteration == 3 and resumed.checkpoint.task_id == task
    head = memory.rollback(TENANT, task, first)
    assert head not in (first, second)
    assert memory.resume(TENANT, task).state.iteration == 0
    assert memory.resume(TENANT, "never-saved") is None
    with pytest.raises(CheckpointNotFound):
        memory.rollback(TENANT, task, uuid.uuid4())


# Each bad call and the field its InvalidInput names, whichever client raised it.
BAD_CALLS: list[tuple[str, Any]] = [
    ("metadata", lambda m: m.record("x", metadata=[1], **SCOPE)),
    ("content", lambda m: m.record("   ", **SCOPE)),
    ("content", lambda m: m.record(b"\xff\xfe", **SCOPE)),
    ("type", lambda m: m.record("We bill in cents.", type="rumour", **SCOPE)),
    ("task_id", lambda m: m.record("We bill in cents.", **{**SCOPE, "task_id": ""})),
    ("items[1].content", lambda m: m.record_many([{**SCOPE, "content": "ok"}, SCOPE])),
    ("limit", lambda m: m.recall("q", tenant_id=TENANT, limit=0)),
    ("budget_tokens", lambda m: m.context("billing", "q", -5, tenant_id=TENANT)),
    ("phase", lambda m: m.context("billing", "q", 4000, "dreaming", tenant_id=TENANT)),
    ("max_hops", lambda m: m.affected_by("q", tenant_id=TENANT, max_hops=11)),
    ("limit", lambda m: m.knowledge(tenant_id=TENANT, limit=0)),
    ("reason", lambda m: m.correct(uuid.uuid4(), "new", tenant_id=TENANT, reason="")),
    ("target", lambda m: m.forget(tenant_id=TENANT, reason="no target")),
    ("limit", lambda m: m.list_memories(TENANT, limit=0)),
    ("task_id", lambda m: m.complete_task(TENANT, "")),
    ("queries[0].query", lambda m: m.set_golden_queries(TENANT, [{"query": ""}])),
]


def test_a_bad_field_raises_the_same_error_from_both_clients(memory, settings) -> None:  # type: ignore[no-untyped-def]
    for field, bad in BAD_CALLS:
        with pytest.raises(InvalidInput) as refused:
            bad(memory)
        assert refused.value.field == field, (field, str(refused.value))
    # the limit travels too: the content limit of the settings, in bytes
    with pytest.raises(InvalidInput) as big:
        memory.record("x" * (settings.content_max_bytes + 1), **SCOPE)
    assert (big.value.field, big.value.limit) == ("content", f"{settings.content_max_bytes} bytes")
    with pytest.raises(NotFound) as missing:
        memory.correct(uuid.uuid4(), "new", tenant_id=TENANT, reason="fix")
    assert missing.value.field == "memory_id"


@pytest.fixture(params=["local", "remote"])
def async_memory(request, db, redis_client, settings) -> Any:  # type: ignore[no-untyped-def]
    """A factory of the async client under test (it opens inside the test's event loop)."""
    if request.param == "local":
        from memharness.aio import AsyncMemoryClient

        return lambda: AsyncMemoryClient(settings)
    from memharness import AsyncRemoteMemoryClient

    server: Server = request.getfixturevalue("api_server")
    key = remote_key(db)
    return lambda: AsyncRemoteMemoryClient(server.url, key)


def test_the_async_clients_record_alike(async_memory, workers) -> None:  # type: ignore[no-untyped-def]
    workers("write")

    async def agent() -> list[Any]:
        async with async_memory() as memory:
            receipts = await asyncio.gather(
                memory.record("We decided to bill in cents because floats lose money.", **SCOPE),
                memory.record("Status: ATL-7 is now blocked on the tax review.", **SCOPE),
                memory.record("好的", **SCOPE),
            )
            keyed = await memory.record("Deploy to eu-west-1", idempotency_key="k-1", **SCOPE)
            with pytest.raises(InvalidInput, match="already used") as reused:
                await memory.record("Deploy to us-east-1", idempotency_key="k-1", **SCOPE)
            with pytest.raises(InvalidInput) as bad:
                await memory.record("x", metadata=[1], **SCOPE)
            return [*receipts, keyed, reused.value.field, bad.value.field]

    first, second, ack, keyed, reused, bad = asyncio.run(agent())
    assert [r.status for r in (first, second, ack, keyed)] == ["accepted"] * 2 + ["dropped"] + [
        "accepted"
    ]
    assert (reused, bad) == ("idempotency_key", "metadata")
