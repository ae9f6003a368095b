"""The write drain's body, called directly against the real PostgreSQL and an embedded store:
replays change nothing, a lost worker's jobs come back, a job that keeps failing ends dead."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from config import Settings
from memharness.client import MemoryClient
from workers.clients import Clients
from workers.db.jobs import WRITE_JOB, claim_jobs
from workers.write.drain import drain_writes
from workers.write.wake import DRAIN_FLAG

SCOPE = {"tenant_id": "acme", "task_id": "t-1", "session_id": "s-1"}
NOTES = [
    "We decided to use PostgreSQL 15 for the ledger because we need transactions.",
    "Status: ATL-104 (auth module) is now blocked on the security review.",
    "I prefer short status updates; detailed only for architecture decisions.",
]


@pytest.fixture
def ctx(db, redis_client, qdrant_path, settings: Settings) -> Iterator[Clients]:  # type: ignore[no-untyped-def]
    context = Clients(settings)
    yield context
    context.close()


@pytest.fixture
def recorded(db, redis_client, settings: Settings) -> list[str]:  # type: ignore[no-untyped-def]
    with MemoryClient(settings) as client:
        return [str(client.record(note, **SCOPE).memory_id) for note in NOTES]


def test_a_drain_stores_the_batch_and_a_replay_changes_nothing(ctx, recorded, db) -> None:  # type: ignore[no-untyped-def]
    # given three recorded writes and the drain flag their publish set
    assert ctx.redis.exists(DRAIN_FLAG)

    # when two drains run (a duplicated message)
    first = drain_writes(ctx)
    second = drain_writes(ctx)

    # then the first did the work, cleared the flag, and the second found nothing
    assert (first.claimed, first.stored) == (3, 3)
    assert (second.claimed, second.stored) == (0, 0)
    assert not ctx.redis.exists(DRAIN_FLAG)
    assert db.execute("SELECT count(*) FROM write_decisions WHERE tier = 2").fetchone()[0] == 3
    assert ctx.vectors.count(ctx.episodic_collection) == 3


def test_jobs_of_a_lost_worker_come_back_after_their_lease(ctx, recorded, db) -> None:  # type: ignore[no-untyped-def]
    # given a worker that claimed the jobs and died before finishing
    with ctx.pool.connection() as conn:
        claimed = claim_jobs(conn, kind=WRITE_JOB, limit=10, lease_s=60)
    assert len(claimed) == 3

    # when another drain runs while the lease holds, it leaves them alone
    assert drain_writes(ctx).claimed == 0

    # and once the lease has expired it takes them, on their second attempt
    db.execute("UPDATE jobs SET lease_until = now() - interval '1 second'")
    report = drain_writes(ctx)
    assert (report.claimed, report.stored) == (3, 3)
    rows = db.execute("SELECT status, attempts FROM jobs").fetchall()
    assert rows == [("done", 2)] * 3
    assert ctx.vectors.count(ctx.episodic_collection) == 3


def test_a_job_whose_worker_keeps_dying_is_dead_lettered_with_its_reason(
    ctx, recorded, db, settings: Settings
) -> None:  # type: ignore[no-untyped-def]
    # given jobs claimed and abandoned as many times as attempts allow
    for _ in range(settings.job_max_attempts):
        with ctx.pool.connection() as conn:
            claim_jobs(conn, kind=WRITE_JOB, limit=10, lease_s=60)
        db.execute("UPDATE jobs SET lease_until = now() - interval '1 second'")

    # when the next drain claims them once more
    report = drain_writes(ctx)

    # then they are dead, with the reason, and nothing was stored or indexed
    assert report.dead == 3
    reasons = db.execute("SELECT DISTINCT dead_reason FROM jobs WHERE status = 'dead'").fetchall()
    assert len(reasons) == 1
    assert f"gave up after {settings.job_max_attempts} attempts" in reasons[0][0]
    assert "lease expired" in reasons[0][0]
    statuses = db.execute("SELECT status, count(*) FROM memories GROUP BY 1").fetchall()
    assert statuses == [("dead", 3)]
    assert ctx.vectors.count(ctx.episodic_collection) == 0


def test_the_context_vector_and_the_search_vector_come_from_the_stored_row(
    ctx, db, redis_client, settings: Settings
) -> None:  # type: ignore[no-untyped-def]
    # given a write that says in its metadata the situation it was written in
    import uuid

    from pipelines.index.context_vector import context_text

    metadata = {"phase": "debugging", "focus": ["errors"], "trigger": "test failure"}
    with MemoryClient(settings) as client:
        receipt = client.record(
            "Error: the ledger test timed out on the row lock.", metadata=metadata, **SCOPE
        )
    pending = db.execute(
        "SELECT search_tsv FROM memories WHERE id = %s", (receipt.memory_id,)
    ).fetchone()
    assert pending == (None,)  # record() leaves the tsvector to the drain

    # when the drain stores it
    assert drain_writes(ctx).stored == 1

    # then its context vector embeds the phase, focus and trigger of its metadata
    [point] = ctx.vectors.retrieve(ctx.episodic_collection, [uuid.UUID(str(receipt.memory_id))])
    expected = ctx.embedder.embed([context_text(metadata, None, None)])[0]
    assert point.context == pytest.approx(expected, abs=1e-6)
    # and the stored row carries the tsvector the sparse recall searches
    matched = db.execute(
        "SELECT search_tsv @@ to_tsquery('english', 'ledger & lock') FROM memories WHERE id = %s",
        (receipt.memory_id,),
    ).fetchone()
    assert matched == (True,)


def test_linking_waits_while_writes_are_due_then_links_everything(ctx, recorded, db) -> None:  # type: ignore[no-untyped-def]
    from workers.cognition.link import link_unlinked

    # given four stored memories (three recorded by the fixture) and one write still due
    with MemoryClient(ctx.settings) as client:
        client.record("We decided to use Redis 7 as the broker because of streams.", **SCOPE)
    drain_writes(ctx)
    with MemoryClient(ctx.settings) as client:
        client.record("Status: ATL-9 is now blocked on the Redis upgrade.", **SCOPE)

    # when linking runs while a write is due, it yields and links nothing
    assert link_unlinked(ctx)["deferred"] is True
    assert (
        db.execute("SELECT count(*) FROM memories WHERE linked_at IS NOT NULL").fetchone()[0] == 0
    )

    # and once the backlog is drained it links every stored memory
    drain_writes(ctx)
    stats = link_unlinked(ctx)
    assert stats["linked"] == 5
    assert stats["more"] is False
    assert db.execute("SELECT count(*) FROM memories WHERE linked_at IS NULL").fetchone()[0] == 0


def test_a_row_stored_with_a_year_10000_timestamp_does_not_hold_back_its_batch(
    ctx, recorded, db
) -> None:  # type: ignore[no-untyped-def]
    # given a batch of three where one row holds an instant a datetime cannot load (written
    # before the request checks refused such values, or by hand)
    poisoned = recorded[1]
    db.execute("UPDATE memories SET ts = '10000-01-01 11:59:59+00' WHERE id = %s", (poisoned,))

    # when the drain claims the batch
    report = drain_writes(ctx)

    # then every row moved on and no job is left running under the claim
    assert report.claimed == 3
    assert db.execute("SELECT count(*) FROM memories WHERE status = 'pending'").fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM jobs WHERE status <> 'done'").fetchone() == (0,)
    assert report.stored == 3
    # and the poisoned row kept its stored instant (the read was clamped, not the row)
    assert db.execute("SELECT ts::text FROM memories WHERE id = %s", (poisoned,)).fetchone() == (
        "10000-01-01 11:59:59+00",
    )


class _NulSummaries:
    """The offline model, except that it summarises one memory with a NUL byte in its text,
    which a real model may send and PostgreSQL text refuses."""

    def __init__(self, inner: object) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    def billed_to(self, tenant_id: str) -> _NulSummaries:
        # the drain asks for the tenant's adapter (its calls go to the token ledger)
        return _NulSummaries(self._inner.billed_to(tenant_id))  # type: ignore[attr-defined]

    def summarize(self, content: str, max_words: int) -> str:
        summary: str = self._inner.summarize(content, max_words)  # type: ignore[attr-defined]
        return summary.replace(" ", "\x00", 1) if "auditors" in content else summary


LONG_NOTE = (
    "We decided to move the ledger to PostgreSQL 15 because the old store lost writes under "
    "load, the team wants transactions for every transfer, the auditors asked for one system "
    "of record, and the migration plan keeps both stores in step for two weeks before the "
    "switch, with a rollback script ready at every step."
)


def test_a_result_postgresql_refuses_is_dead_lettered_alone(ctx, recorded, db, settings) -> None:  # type: ignore[no-untyped-def]
    # given a long note whose summary (the model's) holds a NUL byte, beside three others
    with MemoryClient(settings) as client:
        poisoned = str(client.record(LONG_NOTE, **SCOPE).memory_id)
    ctx.__dict__["llm"] = _NulSummaries(ctx.llm)

    # when the drain finishes the batch
    report = drain_writes(ctx)

    # then that memory alone is dead, with PostgreSQL's reason, and its siblings are stored
    statuses = dict(db.execute("SELECT id::text, status FROM memories").fetchall())
    assert statuses == {poisoned: "dead", **dict.fromkeys(recorded, "stored")}
    assert (report.stored, report.dead) == (3, 1)
    [(reason,)] = db.execute("SELECT dead_reason FROM jobs WHERE status = 'dead'").fetchall()
    assert "PostgreSQL refused" in reason
    assert db.execute("SELECT count(*) FROM jobs WHERE status = 'running'").fetchone() == (0,)
    # and no vector point stands for the dead one
    assert ctx.vectors.count(ctx.episodic_collection) == 3


def test_linking_past_its_deadline_stops_and_goes_on_in_the_next_message(
    db, redis_client, qdrant_path, settings: Settings, recorded
) -> None:  # type: ignore[no-untyped-def]
    from workers.cognition.link import link_unlinked

    # given three stored memories and a link deadline every memory overruns (a model answers
    # in seconds on a CPU: a batch of 32 would outlive the task's time limit)
    ctx = Clients(settings.model_copy(update={"sweep_deadline_s": 1e-6}))
    try:
        drain_writes(ctx)

        # when linking runs, each message links one memory and asks for the next message
        passes = [link_unlinked(ctx) for _ in range(3)]
        assert [(p["linked"], p.get("stopped_early", False), p["more"]) for p in passes] == [
            (1, True, True),
            (1, True, True),
            (1, False, False),
        ]
    finally:
        ctx.close()

    # then every memory is linked, none twice
    assert db.execute("SELECT count(*) FROM memories WHERE linked_at IS NULL").fetchone()[0] == 0
