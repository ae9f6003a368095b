"""Background cognition through real worker processes and real beats.

A simulated two weeks of a project is recorded through ``MemoryClient``, stored by the
write worker, then driven through compression, quality sampling, consolidation and decay by
sweeps published with an explicit clock, as beat publishes them without one.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from memharness.processes import Managed, start_beat
from tests.support.project_history import TENANT, history
from workers.app import app

pytestmark = pytest.mark.integration

START = datetime(2026, 11, 1, tzinfo=UTC)
END = START + timedelta(days=15)
BACKGROUND_QUEUES = ("maintenance", "compress", "quality", "consolidate")


def wait_for(check: Callable[[], Any], what: str, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def one(db: psycopg.Connection[Any], sql: str, *params: Any) -> Any:
    row = db.execute(sql, params).fetchone()
    return row[0] if row else None


def run_sweep(
    db: psycopg.Connection[Any], task: str, queue: str, clock: datetime, **kwargs: Any
) -> dict[str, Any]:
    """Publish one run of a sweep at ``clock`` and wait until its last step is done."""
    run_id = uuid.uuid4()
    app.send_task(
        task, kwargs={"run_id": str(run_id), "now": clock.isoformat(), **kwargs}, queue=queue
    )
    wait_for(
        lambda: one(
            db, "SELECT finished_at IS NOT NULL FROM cognition_runs WHERE run_id = %s", run_id
        ),
        f"{task} run {run_id}",
    )
    stats: dict[str, Any] = one(db, "SELECT stats FROM cognition_runs WHERE run_id = %s", run_id)
    return stats


def settle_quality(db: psycopg.Connection[Any]) -> None:
    """The compress step publishes the quality sweep of what it made; wait for it."""
    wait_for(
        lambda: one(
            db,
            "SELECT count(*) = 0 FROM memories m WHERE level >= 1 AND status = 'stored' AND "
            "NOT EXISTS (SELECT 1 FROM quality_reports q WHERE q.summary_id = m.id)",
        ),
        "every summary checked",
    )


def snapshot(db: psycopg.Connection[Any]) -> dict[str, Any]:
    return {
        "memories": db.execute(
            "SELECT id, status, level, version, superseded_by, decay_factor FROM memories "
            "ORDER BY id"
        ).fetchall(),
        "quality": db.execute(
            "SELECT summary_id, verdict FROM quality_reports ORDER BY 1"
        ).fetchall(),
        "semantic": db.execute(
            "SELECT id, confidence, source_ids, status FROM semantic_memories ORDER BY 1"
        ).fetchall(),
        "links": db.execute(
            "SELECT src_id, dst_id, kind FROM memory_links ORDER BY 1, 2, 3"
        ).fetchall(),
        "evictions": db.execute("SELECT memory_id FROM evictions ORDER BY 1").fetchall(),
    }


def test_two_weeks_of_a_project_through_real_workers(client, workers, db, settings) -> None:  # type: ignore[no-untyped-def]
    # given the store's owner (write, embed, recall) and a background worker
    workers("write")
    workers("background", BACKGROUND_QUEUES)

    # when an agent records two weeks of a project
    receipts = client.record_many(history(START))
    accepted = [r.memory_id for r in receipts if r.status == "accepted"]
    client.wait_until_settled(accepted, timeout_s=60)
    stored = one(db, "SELECT count(*) FROM memories WHERE status = 'stored'")
    assert stored > 40

    # then the write hook linked every stored memory: entities, neighbours, causes
    wait_for(
        lambda: one(
            db, "SELECT count(*) = 0 FROM memories WHERE status = 'stored' AND linked_at IS NULL"
        ),
        "every stored memory linked",
    )
    kinds = dict(db.execute("SELECT kind, count(*) FROM memory_links GROUP BY 1").fetchall())
    assert kinds.get("entity") and kinds.get("causal")

    # when compression and its quality sampling run until nothing is left to promote
    rounds = []
    for _ in range(10):
        stats = run_sweep(db, "memory.compress.sweep", "compress", END)
        settle_quality(db)
        rounds.append(stats)
        if not any(k.endswith("_created") for k in stats):
            break

    # then sessions became L1 summaries, the first week's L1 rows an L2 summary, each kept
    # at its first check: no rollback, no retry, nothing resistant (the rollback and retry
    # path is driven by a lossy compressor in tests/workers/cognition/test_sweeps.py)
    levels = dict(
        db.execute("SELECT level || ':' || status, count(*) FROM memories GROUP BY 1").fetchall()
    )
    assert levels.get("1:stored", 0) > 0 and levels.get("2:stored", 0) > 0
    assert levels.get("1:retired", 0) == 0
    assert one(db, "SELECT max(version) FROM memories WHERE level = 1") == 1
    assert one(db, "SELECT count(*) FROM compression_health WHERE resistant") == 0
    assert one(db, "SELECT count(*) FROM quality_reports WHERE verdict = 'rollback'") == 0
    assert one(db, "SELECT count(*) FROM quality_reports WHERE verdict = 'keep'") > 0
    assert one(db, "SELECT count(*) FROM memories WHERE level = 0 AND status = 'stored'") == stored
    figures = one(
        db,
        "SELECT stats FROM cognition_runs WHERE kind = 'quality' AND stats ? 'fact_recall_mean' "
        "ORDER BY started_at LIMIT 1",
    )
    assert figures["checked"] > 0 and figures["fact_recall_mean"] is not None

    # and every live summary is embedded, with its version, by the store's owner
    wait_for(
        lambda: one(
            db,
            "SELECT count(*) = 0 FROM memories WHERE level >= 1 AND status = 'stored' "
            "AND embedding_version IS NULL",
        ),
        "summaries embedded",
    )

    # when the nightly consolidation runs
    app.send_task(
        "memory.consolidate.nightly", kwargs={"now": END.isoformat()}, queue="consolidate"
    )
    wait_for(
        lambda: one(
            db,
            "SELECT count(*) FROM cognition_runs WHERE kind = 'consolidate' "
            "AND finished_at IS NOT NULL",
        ),
        "consolidation",
    )

    # then the tenant has semantic knowledge: the recurring preference, the convention
    facts = dict(db.execute("SELECT kind, content FROM semantic_memories").fetchall())
    assert "brief answers" in facts.get("preference", "")
    assert "snake_case" in facts.get("convention", "")

    # and the traversal answers what the auth module's delay affects
    from workers.db import open_pool
    from workers.read.affected import affected_by

    pool = open_pool(settings, name="test-traversal")
    try:
        answer = affected_by(pool, TENANT, "What does the delay of the auth module affect?")
    finally:
        pool.close()
    assert any("mobile release" in a.content for a in answer.affected)

    # when the decay sweep runs two months later (the tenant is idle by then)
    later = datetime.now(UTC) + timedelta(days=60)
    decay = run_sweep(db, "memory.maintenance.decay_sweep", "maintenance", later)

    # then what it evicted is logged, and only unimportant rows went
    assert decay["tenants_swept"] == 1
    evicted = one(db, "SELECT count(*) FROM memories WHERE status = 'evicted'")
    assert evicted == one(db, "SELECT count(*) FROM evictions")
    assert (
        one(db, "SELECT count(*) FROM memories WHERE status = 'evicted' AND importance >= 0.5") == 0
    )

    # when every sweep runs again at the same clocks
    before = snapshot(db)
    run_sweep(db, "memory.compress.sweep", "compress", END)
    run_sweep(db, "memory.quality.sweep", "quality", END)
    run_sweep(db, "memory.consolidate.tenant", "consolidate", END, tenant_id=TENANT)
    run_sweep(db, "memory.maintenance.decay_sweep", "maintenance", later)

    # then nothing changed
    assert snapshot(db) == before


def beat_sent(beat: Managed) -> int:
    return beat.log_text().count("Sending due task")


def test_two_beats_at_once_do_the_work_once(db, redis_client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # given two beats started together against one Redis (each with its own schedule file)
    env = {"MEMHARNESS_BEAT_LEADER_TTL_S": "2", "MEMHARNESS_RELAY_INTERVAL_S": "1"}
    beats = [start_beat(env=env, log_dir=tmp_path / name) for name in ("a", "b")]
    try:
        # when they have run for a few lease periods
        wait_for(lambda: sum(beat_sent(b) for b in beats) >= 4, "a beat sending", 30)
        time.sleep(3)

        # then exactly one of them sent tasks; the other stayed idle
        sent = [beat_sent(b) for b in beats]
        assert sorted(sent)[0] == 0, sent
        leader, standby = (beats[0], beats[1]) if sent[0] else (beats[1], beats[0])

        # when the leader dies without a word, the standby takes over within a lease
        leader.kill()
        leader.proc.wait(timeout=10)
        wait_for(lambda: beat_sent(standby) > 0, "the standby taking over", 15)
    finally:
        for beat in beats:
            beat.stop(timeout_s=10)
