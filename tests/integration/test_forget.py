"""Forgetting through real workers: one memory that was linked, summarised into L1 and L2 and
cited by knowledge is gone from every read path, every table and every vector generation; a
worker killed mid-erasure finishes it after a restart; a tenant of 5,000 memories is erased
while another tenant writes and reads."""

from __future__ import annotations

import json
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from config import Settings
from pipelines.errors import InvalidInput, NotFound
from tests.integration.test_cognition import one, run_sweep, settle_quality, wait_for
from tests.support.project_history import TENANT, history

pytestmark = pytest.mark.integration

START = datetime(2026, 11, 1, tzinfo=UTC)
END = START + timedelta(days=15)
BACKGROUND = ("maintenance", "compress", "quality", "consolidate")

# Every table that holds text, and the column whose text is searched.
TEXT_TABLES = (
    "memories",
    "semantic_memories",
    "memory_links",
    "consolidation_waiting",
    "quality_reports",
    "evictions",
    "dead_letters",
    "write_decisions",
    "jobs",
    "memory_events",
    "forget_requests",
)


def rows_saying(db: psycopg.Connection[Any], needle: str) -> dict[str, int]:
    """Rows of any table whose text holds ``needle`` (case-insensitive)."""
    found = {}
    for table in TEXT_TABLES:
        n = one(db, f"SELECT count(*) FROM {table} t WHERE t::text ILIKE %s", f"%{needle}%")
        if n:
            found[table] = n
    return found


def redis_saying(redis_client: Any, needle: str) -> list[str]:
    """Redis keys (broker queues excepted: they carry ids, never content) holding ``needle``."""
    hits = []
    for key in redis_client.scan_iter(count=1000):
        kind = redis_client.type(key).decode()
        if kind == "string":
            values = [redis_client.get(key) or b""]
        elif kind == "list":
            values = redis_client.lrange(key, 0, -1)
        elif kind == "hash":
            values = list(redis_client.hgetall(key).values())
        else:
            continue
        if any(needle.lower() in v.decode("utf-8", "replace").lower() for v in values):
            hits.append(key.decode())
    return hits


TOKEN = "zebracorn7731"


def project_with_token() -> list[dict[str, Any]]:
    """The two-week project, with the recurring preference stated once more, carrying a word no
    other memory has, in a session of decisions (the kind that is summarised at L1 and L2)."""
    items = history(START)
    last = max(i for i, item in enumerate(items) if item["session_id"] == "day01-s1")
    said = {
        **items[last],
        "content": f"Dana: I prefer brief answers with the commands first ({TOKEN}).",
        "timestamp": items[last]["timestamp"] + timedelta(minutes=1),
    }
    return [*items[: last + 1], said, *items[last + 1 :]]


def test_forget_one_memory_reaches_every_copy(client, workers, db, redis_client, settings) -> None:  # type: ignore[no-untyped-def]
    # given two weeks of a project: linked, compressed into L1 and L2, consolidated
    owner = workers("owner")
    workers("background", BACKGROUND)
    items = project_with_token()
    receipts = client.record_many(items)
    client.wait_until_settled([r.memory_id for r in receipts if r.status == "accepted"])
    target = next(
        r.memory_id for r, i in zip(receipts, items, strict=True) if TOKEN in i["content"]
    )
    wait_for(
        lambda: one(
            db,
            "SELECT count(*) = 0 FROM memories WHERE status = 'stored' AND level = 0 "
            "AND linked_at IS NULL",
        ),
        "linked",
    )
    for _ in range(6):
        stats = run_sweep(db, "memory.compress.sweep", "compress", END)
        settle_quality(db)
        if not any(k.endswith("_created") for k in stats):
            break
    run_sweep(db, "memory.consolidate.tenant", "consolidate", END, tenant_id=TENANT)
    wait_for(
        lambda: one(
            db,
            "SELECT count(*) = 0 FROM memories WHERE level >= 1 AND status = 'stored' "
            "AND embedding_version IS NULL",
        ),
        "summaries embedded",
    )

    # and the memory is linked, inside a live L1 inside a live L2, and a source of knowledge
    assert one(db, "SELECT count(*) FROM memory_links WHERE %s IN (src_id, dst_id)", target)
    assert one(
        db,
        "SELECT count(*) FROM memories l1 JOIN memories l2 ON l1.id = ANY(l2.parent_ids) "
        "WHERE %s = ANY(l1.parent_ids) AND l1.level = 1 AND l2.level = 2 "
        "AND l1.status = 'stored' AND l2.status = 'stored'",
        target,
    )
    assert one(db, "SELECT count(*) FROM semantic_memories WHERE %s = ANY(source_ids)", target)
    assert rows_saying(db, TOKEN)["memories"] >= 3  # the episode, its L1, its L2
    sources_left = one(
        db,
        "SELECT cardinality(source_ids) - 1 FROM semantic_memories WHERE %s = ANY(source_ids)",
        target,
    )
    assert client.recall(f"brief answers {TOKEN}", tenant_id=TENANT, limit=10)

    # when it is forgotten
    receipt = client.forget(
        tenant_id=TENANT, memory_id=target, reason="the user asked to erase it", actor="dana"
    )
    assert receipt.memories == 1 and not receipt.already
    # then at once no PostgreSQL read returns its text
    assert one(db, "SELECT content FROM memories WHERE id = %s", target) == ""
    done = client.wait_until_forgotten(receipt, tenant_id=TENANT)
    assert done.status == "done"
    # then no table and no Redis key holds it (windows, the answers Celery kept; checked
    # before the reads below, whose own answers echo the query)
    assert rows_saying(db, TOKEN) == {}
    assert redis_saying(redis_client, TOKEN) == []

    # then no read path returns it: recall, context, keyword search, affected_by, knowledge
    hits = client.recall(f"brief answers {TOKEN}", tenant_id=TENANT, limit=10)
    assert not [h for h in hits if TOKEN in h["content"] or h["id"] == str(target)]
    context = client.context(
        "auth-rewrite",
        f"what did {TOKEN} say about answers",
        8000,
        tenant_id=TENANT,
        session_id="day00-s0",
    )
    assert TOKEN not in context.text
    traversal = client.affected_by(f"{TOKEN} answers", tenant_id=TENANT)
    assert TOKEN not in str((traversal.starts, traversal.affected))
    assert not client.knowledge(tenant_id=TENANT, query=TOKEN)
    # and the knowledge it supported lost it as a source, and was stated again or erased
    assert not one(db, "SELECT count(*) FROM semantic_memories WHERE %s = ANY(source_ids)", target)
    if sources_left:
        assert one(
            db,
            "SELECT count(*) FROM memory_events WHERE subject = 'semantic' "
            "AND event IN ('rederived', 'forgotten')",
        )
    # and the summaries that held it are tombstones; what they covered is live again
    erased_summaries = [
        r[0]
        for r in db.execute(
            "SELECT id FROM memories WHERE level >= 1 AND status = 'forgotten'"
        ).fetchall()
    ]
    assert len(erased_summaries) >= 2
    # and the audit log says who, what, when and why, without the content
    audit = db.execute(
        "SELECT actor, reason, memory_ids, status, stats FROM forget_requests"
    ).fetchone()
    assert audit[0] == "dana" and audit[2] == [target] and audit[3] == "done"
    assert audit[4]["points_left"] == 0 and audit[4]["summaries"] >= 2

    # and no vector point is left in any generation (the owner stopped, the store opened here)
    owner.stop(timeout_s=10)
    from workers.clients import Clients
    from workers.own.reach import points_left

    ctx = Clients(Settings(), name="test-verify")
    try:
        assert len(ctx.vectors.collections()) >= 1
        assert points_left(ctx, [target, *erased_summaries]) == 0
    finally:
        ctx.close()
    workers("owner")

    # when the compress sweep runs again, it summarises what remains, without it
    run_sweep(db, "memory.compress.sweep", "compress", END + timedelta(days=1))
    settle_quality(db)
    assert rows_saying(db, TOKEN) == {}

    # when it is forgotten again, the first receipt comes back; nothing else changes
    again = client.forget(tenant_id=TENANT, memory_id=target, reason="again")
    assert again.already and again.request_id == receipt.request_id
    # and unknown or foreign ids get the same not-found, naming the field
    with pytest.raises(NotFound, match="memory_id"):
        client.forget(tenant_id=TENANT, memory_id=uuid.uuid4(), reason="x")
    with pytest.raises(NotFound, match="memory_id"):
        client.forget(tenant_id="someone-else", memory_id=target, reason="x")
    with pytest.raises(NotFound, match="task_id"):
        client.forget(tenant_id=TENANT, task_id="no-such-task", reason="x")
    with pytest.raises(InvalidInput, match="target"):
        client.forget(tenant_id=TENANT, memory_id=target, task_id="auth-rewrite", reason="x")
    history = client.history(target, tenant_id=TENANT)
    assert history.current_id is None and history.versions[0].content == ""
    assert [e for e in history.events if e.event == "forgotten" and e.actor == "dana"]


def bulk(tenant: str, n: int, *, task: str = "bulk", sessions: int = 40) -> list[dict[str, Any]]:
    return [
        {
            "content": f"Agent: Ticket {tenant.upper()}-{i} moved to review after the "
            f"{['parser', 'cache', 'login', 'billing'][i % 4]} change number {i}.",
            "tenant_id": tenant,
            "task_id": task,
            "session_id": f"s{i % sessions}",
            "type": "status_change",
            "timestamp": START + timedelta(minutes=i),
        }
        for i in range(n)
    ]


def record_all(client: Any, items: list[dict[str, Any]]) -> list[uuid.UUID]:
    ids: list[uuid.UUID] = []
    for start in range(0, len(items), 500):
        ids += [r.memory_id for r in client.record_many(items[start : start + 500])]
    client.wait_until_settled(ids, timeout_s=120)
    return ids


def test_a_worker_killed_mid_forget_finishes_after_a_restart(
    client, workers, db, log_dir, redis_client
) -> None:  # type: ignore[no-untyped-def]
    # given a task of 2,000 stored memories, and the relay running (a beat and its worker),
    # with short leases so a killed claim is taken again in seconds
    from memharness.processes import start_beat

    env = {"MEMHARNESS_JOB_LEASE_S": "3"}
    owner = workers("owner", env=env)
    ids = record_all(client, bulk("crash", 2000))
    # the owner's link pass over the 2,000 runs on the same single slot as the erasure: let
    # it finish, so that the wait below times the erasure, not the backlog before it
    wait_for(
        lambda: one(
            db,
            "SELECT count(*) = 0 FROM memories WHERE status = 'stored' AND level = 0 "
            "AND linked_at IS NULL",
        ),
        "the link pass",
        timeout_s=120,
    )
    # and a busy result backend: 20,000 answers of other calls, each read by the erasure
    # (they might name a forgotten memory), so the run lasts seconds, not a fraction of one
    with redis_client.pipeline(transaction=False) as pipe:
        for _ in range(20_000):
            answer = {"status": "SUCCESS", "result": {"hits": [{"id": str(uuid.uuid4())}]}}
            pipe.set(f"celery-task-meta-{uuid.uuid4()}", json.dumps(answer), ex=3600)
        pipe.execute()
    workers("maintenance", ("maintenance",), env=env)
    beat = start_beat(env=env, log_dir=log_dir)
    try:
        # when the task is forgotten and the owner is SIGKILLed while it erases
        receipt = client.forget(tenant_id="crash", task_id="bulk", reason="test", actor="ops")
        assert receipt.memories == 2000
        deadline = time.monotonic() + 60
        while not one(
            db, "SELECT status = 'running' FROM forget_requests WHERE id = %s", receipt.request_id
        ):
            assert time.monotonic() < deadline, "the erasure did not start"
            time.sleep(0.01)
        owner.kill()
        owner.proc.wait(timeout=10)
        assert (
            one(db, "SELECT status FROM forget_requests WHERE id = %s", receipt.request_id)
            == "running"
        )

        # then a new owner finishes it once the lease expired, and verifies it
        workers("owner", env=env)
        done = client.wait_until_forgotten(receipt, tenant_id="crash", timeout_s=90)
        assert done.status == "done"
        stats = one(db, "SELECT stats FROM forget_requests WHERE id = %s", receipt.request_id)
        assert stats["points_left"] == 0 and stats["memories"] == 2000
        assert (
            one(db, "SELECT attempts FROM forget_requests WHERE id = %s", receipt.request_id) >= 2
        )
        assert (
            one(db, "SELECT count(*) FROM memories WHERE id = ANY(%s) AND content <> ''", ids) == 0
        )
        assert rows_saying(db, "moved to review") == {}
    finally:
        beat.stop(timeout_s=10)


def test_forget_a_tenant_while_another_writes_and_reads(client, workers, db, settings) -> None:  # type: ignore[no-untyped-def]
    # given a tenant of 5,000 memories, and another tenant of 200
    workers("owner")
    record_all(client, bulk("gone", 5000, sessions=100))
    kept = record_all(client, bulk("stays", 200, task="daily"))
    before = one(
        db, "SELECT count(*) FROM memories WHERE tenant_id = 'stays' AND status = 'stored'"
    )

    # when the first tenant is forgotten while the other one writes and reads
    errors: list[BaseException] = []
    reads: list[int] = []
    stop = threading.Event()

    def other_tenant() -> None:
        from memharness import MemoryClient

        with MemoryClient(Settings()) as other:
            n = 0
            while not stop.is_set():
                try:
                    other.record(
                        f"Agent: Ticket STAYS-X{n} moved to review after the cache change.",
                        tenant_id="stays",
                        task_id="daily",
                        session_id="live",
                        type="status_change",
                    )
                    context = other.context(
                        "daily", "which tickets moved to review", 4000, tenant_id="stays"
                    )
                    assert context.text and "GONE-" not in context.text
                    reads.append(len(context.text))
                except BaseException as exc:
                    errors.append(exc)
                n += 1

    thread = threading.Thread(target=other_tenant)
    thread.start()
    try:
        time.sleep(0.5)
        started = time.monotonic()
        receipt = client.forget(tenant_id="gone", whole_tenant=True, reason="account closed")
        done = client.wait_until_forgotten(receipt, tenant_id="gone", timeout_s=120)
        elapsed = time.monotonic() - started
        time.sleep(0.5)
    finally:
        stop.set()
        thread.join(timeout=60)

    # then the tenant is erased, verified, and the other one never failed a read
    assert done.status == "done" and receipt.memories == 5000
    print(f"forget tenant of 5,000: {elapsed:.1f} s; the other tenant read {len(reads)} times")
    assert not errors, errors[:3]
    assert len(reads) >= 3
    assert one(db, "SELECT count(*) FROM memories WHERE tenant_id = 'gone' AND content <> ''") == 0
    assert rows_saying(db, "GONE-") == {}
    # and the other tenant is untouched: every memory it had, and the new ones
    assert (
        one(db, "SELECT count(*) FROM memories WHERE id = ANY(%s) AND status = 'stored'", kept)
        == before
    )
    assert (
        one(db, "SELECT count(*) FROM memories WHERE tenant_id = 'stays' AND status = 'forgotten'")
        == 0
    )
