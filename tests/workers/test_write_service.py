"""The write drain's body, called directly against the real PostgreSQL and an embedded store:
replays change nothing, a lost worker's jobs come back, a job that keeps failing ends dead."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from config import Settings
from memharness.client import MemoryClient
from workers.context import WorkerContext
from workers.db.writes import WRITE_JOB, claim_jobs
from workers.write_service import DRAIN_FLAG, drain_writes

SCOPE = {"tenant_id": "acme", "task_id": "t-1", "session_id": "s-1"}
NOTES = [
    "We decided to use PostgreSQL 15 for the ledger because we need transactions.",
    "Status: ATL-104 (auth module) is now blocked on the security review.",
    "I prefer short status updates; detailed only for architecture decisions.",
]


@pytest.fixture
def ctx(db, redis_client, qdrant_path, settings: Settings) -> Iterator[WorkerContext]:  # type: ignore[no-untyped-def]
    context = WorkerContext(settings)
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
