"""Background cognition's service against the real PostgreSQL and Redis, called directly
(no worker process): compression, quality rollback, decay, consolidation, links, idempotency,
the crash of a compression half-way through its transaction, and the retries of a task
summary by the compression sweep."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from pipelines.cognition.compress import compressor_id
from pipelines.cognition.offline_compress import OFFLINE_RULES_VERSION
from pipelines.cognition.protocol import VERBATIM_KINDS, CompressRequest, SummaryOutput
from pipelines.requests.write import prepare_write
from pipelines.write.facts import carries_fact
from tests.support.project_history import TASK, TENANT, history
from tests.support.project_history_zh import TASK as TASK_ZH
from tests.support.project_history_zh import TENANT as TENANT_ZH
from tests.support.project_history_zh import history_zh
from workers.activity import mark_activity
from workers.adapters.llm_offline import OfflineLLM
from workers.clients import Clients
from workers.cognition.compress import complete_task, compress_step, schedule_compression
from workers.cognition.consolidate import consolidate_tenant
from workers.cognition.decay import decay_step
from workers.cognition.embed import drain_embeddings
from workers.cognition.link import link_memories
from workers.cognition.quality import quality_step
from workers.cognition.runs import run_id_for
from workers.own.correct import correct_memory, settle_corrections
from workers.read.affected import affected_by

START = datetime(2026, 11, 1, tzinfo=UTC)
END = START + timedelta(days=15)


@pytest.fixture
def ctx(db, redis_client, qdrant_path) -> Iterator[Clients]:  # type: ignore[no-untyped-def]
    from config import Settings

    context = Clients(Settings())
    yield context
    context.close()


def store(
    db: psycopg.Connection[Any], items: list[dict[str, Any]], **extra: Any
) -> list[uuid.UUID]:
    """Rows as the write worker leaves them: stored, importance set."""
    ids = []
    for item in items:
        new = prepare_write(**item)
        db.execute(
            "INSERT INTO memories (id, tenant_id, user_id, agent_id, task_id, session_id, ts, "
            "content, content_hash, importance, status, embedding_version) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 'stored', 'hashing-v2/64')",
            (
                new.id,
                new.tenant_id,
                new.user_id,
                new.agent_id,
                new.task_id,
                new.session_id,
                new.timestamp,
                new.content,
                new.content_hash,
                extra.get("importance", 0.5),
            ),
        )
        ids.append(new.id)
    return ids


def snapshot(db: psycopg.Connection[Any]) -> dict[str, Any]:
    """Everything the sweeps write, except the runs' own bookkeeping."""
    return {
        "memories": db.execute(
            "SELECT id, status, level, version, superseded_by, decay_factor, embedding_version "
            "FROM memories ORDER BY id"
        ).fetchall(),
        "jobs": db.execute("SELECT kind, memory_id, status FROM jobs ORDER BY 1, 2").fetchall(),
        "quality": db.execute(
            "SELECT summary_id, verdict FROM quality_reports ORDER BY 1"
        ).fetchall(),
        "health": db.execute("SELECT * FROM compression_health ORDER BY 1").fetchall(),
        "semantic": db.execute(
            "SELECT id, confidence, source_ids, status FROM semantic_memories ORDER BY 1"
        ).fetchall(),
        "evictions": db.execute("SELECT memory_id FROM evictions ORDER BY 1").fetchall(),
        "links": db.execute(
            "SELECT src_id, dst_id, kind FROM memory_links ORDER BY 1, 2, 3"
        ).fetchall(),
    }


def run_to_end(step: Any, ctx: Clients, kind: str, clock: datetime, key: str = "") -> Any:
    """Drive a run step by step, as the requeueing task does."""
    run_id = (
        uuid.uuid5(run_id_for(kind, None, clock), key) if key else run_id_for(kind, None, clock)
    )
    for _ in range(100):
        outcome = step(ctx, run_id, clock)
        if not outcome.requeue:
            return outcome
    raise AssertionError("the run did not finish in 100 steps")


def levels(db: psycopg.Connection[Any]) -> dict[tuple[int, str], int]:
    rows = db.execute("SELECT level, status, count(*) FROM memories GROUP BY 1, 2").fetchall()
    return {(level, status): n for level, status, n in rows}


def test_compression_makes_versioned_summaries_with_parent_pointers(ctx, db) -> None:  # type: ignore[no-untyped-def]
    # given two weeks of a project, stored
    ids = store(db, history(START))

    # when the compression sweep runs on day 15
    outcome = run_to_end(compress_step, ctx, "compress", END)

    # then every session became an L1 summary pointing at its originals, which are kept
    assert outcome.finished
    counts = levels(db)
    assert counts[(1, "stored")] == 28
    assert counts[(0, "stored")] == len(ids)
    row = db.execute(
        "SELECT id, parent_ids, version, metadata FROM memories WHERE level = 1 LIMIT 1"
    ).fetchone()
    summary_id, parents, version, metadata = row
    assert version == 1 and metadata["version"] == 1
    assert parents and set(parents) <= set(ids)
    covered = db.execute(
        "SELECT count(*) FROM memories WHERE superseded_by = %s", (summary_id,)
    ).fetchone()[0]
    assert covered == len(parents)
    # and each summary has its embedding job in the outbox
    assert db.execute("SELECT count(*) FROM jobs WHERE kind = 'embed'").fetchone()[0] == 28


def test_quality_keeps_summaries_that_keep_their_facts(ctx, db) -> None:  # type: ignore[no-untyped-def]
    # given two weeks of a project
    store(db, history(START))

    # when compression and quality sampling run
    run_to_end(compress_step, ctx, "compress", END, key="c0")
    figures = run_to_end(quality_step, ctx, "quality", END, key="q0").stats

    # then every session's summary passed its check at once: nothing rolled back, no retry
    assert figures["checked"] == 28
    assert figures["kept"] == 28 and figures["rolled_back"] == 0
    assert figures["fact_recall_mean"] >= 0.85
    assert levels(db)[(1, "stored")] == 28 and (1, "retired") not in levels(db)
    # and each summary names the compressor that made it
    compressors = {
        row[0] for row in db.execute("SELECT metadata->>'compressor' FROM memories WHERE level = 1")
    }
    assert compressors == {compressor_id(ctx.llm)}


class LossyLLM(OfflineLLM):
    """The offline adapter, except that its summaries keep only the verbatim segments:
    valid answers that lose every outcome, so their checks fail."""

    @property
    def name(self) -> str:
        return "lossy"

    def compress_segments(self, request: CompressRequest) -> SummaryOutput:
        verbatim = {a.index for a in request.annotations if a.kind in VERBATIM_KINDS}
        text = "\n".join(s.text for s in request.segments if s.index in verbatim)
        return SummaryOutput(text=text or "nothing", kept_verbatim=sorted(verbatim))


def test_quality_rolls_back_retries_gentler_and_makes_memories_resistant(ctx, db) -> None:  # type: ignore[no-untyped-def]
    # given two weeks of a project and a compressor whose summaries lose facts
    store(db, history(START))
    ctx.llm = LossyLLM()

    # when compression and quality sampling alternate four times
    figures = []
    for round_ in range(4):
        run_to_end(compress_step, ctx, "compress", END, key=f"c{round_}")
        figures.append(run_to_end(quality_step, ctx, "quality", END, key=f"q{round_}").stats)

    # then the sessions with outcomes were rolled back three times, each retry a new
    # version, then compressed annotate-only and kept
    assert figures[0]["checked"] == 28
    failing = figures[0]["rolled_back"]
    assert failing > 0 and figures[0]["kept"] == 28 - failing
    assert figures[0]["fact_recall_mean"] is not None
    assert [f["rolled_back"] for f in figures[1:]] == [failing, failing, 0]
    assert figures[2]["newly_resistant"] > 0
    versions = dict(
        db.execute("SELECT version, count(*) FROM memories WHERE level = 1 GROUP BY 1").fetchall()
    )
    assert versions == {1: 28, 2: failing, 3: failing, 4: failing}
    assert levels(db)[(1, "retired")] == 3 * failing
    assert levels(db)[(1, "stored")] == 28
    resistant = db.execute(
        "SELECT count(*) FROM compression_health WHERE resistant AND failures = 3 "
        "AND resistant_to = %s",
        (compressor_id(ctx.llm),),
    ).fetchone()[0]
    assert resistant > 0
    annotate_only = db.execute(
        "SELECT count(*) FROM memories WHERE level = 1 AND status = 'stored' "
        "AND (metadata->>'annotate_only')::boolean"
    ).fetchone()[0]
    assert annotate_only == failing
    # and a rolled-back summary's originals are free again, never lost
    orphans = db.execute(
        "SELECT count(*) FROM memories p JOIN memories s ON p.superseded_by = s.id "
        "WHERE s.status <> 'stored'"
    ).fetchone()[0]
    assert orphans == 0
    # and each rollback asked for its point to be removed from the index
    assert db.execute("SELECT count(*) FROM jobs WHERE kind = 'unindex'").fetchone()[0] == (
        3 * failing
    )


def test_resistant_rows_are_tried_again_when_the_compressor_changes(ctx, db) -> None:  # type: ignore[no-untyped-def]
    # given rows whose summaries by the lossy compressor failed three times: marked
    # resistant to it, live and waiting for the next sweep
    store(db, history(START))
    ctx.llm = LossyLLM()
    for round_ in range(3):
        run_to_end(compress_step, ctx, "compress", END, key=f"c{round_}")
        run_to_end(quality_step, ctx, "quality", END, key=f"q{round_}")
    marked = db.execute(
        "SELECT count(*) FROM compression_health WHERE resistant AND resistant_to = 'lossy+rules-'"
        " || %s",
        (str(OFFLINE_RULES_VERSION),),
    ).fetchone()[0]
    assert marked > 0

    # when the compressor changes (the offline rules) and the sweep runs
    ctx.llm = OfflineLLM()
    run_to_end(compress_step, ctx, "compress", END, key="c-new")
    figures = run_to_end(quality_step, ctx, "quality", END, key="q-new").stats

    # then the rows are compressed normally again, not annotate-only, and the summaries kept
    rows = db.execute(
        "SELECT (metadata->>'annotate_only')::boolean, metadata->>'compressor', version "
        "FROM memories WHERE level = 1 AND status = 'stored' AND version = 4"
    ).fetchall()
    assert rows and all(not ao and c == compressor_id(ctx.llm) for ao, c, _ in rows)
    assert figures["rolled_back"] == 0 and figures["kept"] == len(rows)


def test_every_sweep_run_twice_changes_nothing(ctx, db, redis_client) -> None:  # type: ignore[no-untyped-def]
    # given two weeks of a project, stored; the chatter judged unimportant
    ids = store(db, history(START))
    db.execute("UPDATE memories SET importance = 0.2 WHERE content ~ '(Thanks|Great|Cool)'")
    later = END + timedelta(days=60)
    # a compressor whose summaries fail, so the quality sweep's rollback is replayed too
    ctx.llm = LossyLLM()
    sweeps = [
        ("compress", lambda key: run_to_end(compress_step, ctx, "compress", END, key=key)),
        ("quality", lambda key: run_to_end(quality_step, ctx, "quality", END, key=key)),
        ("embed", lambda key: drain_embeddings(ctx)),
        ("link", lambda key: link_memories(ctx, ids)),
        (
            "consolidate",
            lambda key: consolidate_tenant(ctx, TENANT, uuid.uuid5(uuid.NAMESPACE_URL, key), END),
        ),
        ("decay", lambda key: run_to_end(decay_step, ctx, "decay", later, key=key)),
    ]
    for name, sweep in sweeps:
        # when a sweep runs, and then runs again (a new run) at the same clock
        sweep(f"{name}-1")
        first = snapshot(db)
        sweep(f"{name}-2")

        # then the second run changed nothing
        assert snapshot(db) == first, name
    # and each sweep did do something the first time
    final = snapshot(db)
    assert final["quality"] and final["semantic"] and final["links"] and final["evictions"]
    assert {status for _, status, *_ in final["memories"]} >= {"stored", "retired", "evicted"}


def test_a_crash_inside_a_compression_leaves_the_old_state(ctx, db) -> None:  # type: ignore[no-untyped-def]
    # given a project, and a database that fails the moment a parent is pointed at its
    # summary: after the summary's INSERT, inside the same transaction
    ids = store(db, history(START)[:6])
    db.execute(
        """
        CREATE FUNCTION fail_cover() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'simulated crash mid-compression'; END $$;
        CREATE TRIGGER fail_cover BEFORE UPDATE OF superseded_by ON memories
            FOR EACH ROW WHEN (NEW.superseded_by IS NOT NULL) EXECUTE FUNCTION fail_cover();
        """
    )
    try:
        # when the sweep runs into it
        with pytest.raises(psycopg.errors.RaiseException):
            run_to_end(compress_step, ctx, "compress", END, key="crash")

        # then nothing of the summary exists: no row, no pointer, no embedding job
        assert levels(db) == {(0, "stored"): len(ids)}
        assert (
            db.execute("SELECT count(*) FROM memories WHERE superseded_by IS NOT NULL").fetchone()[
                0
            ]
            == 0
        )
        assert db.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0
    finally:
        db.execute("DROP TRIGGER fail_cover ON memories; DROP FUNCTION fail_cover();")

    # and the same sweep, run again, writes the whole summary
    run_to_end(compress_step, ctx, "compress", END, key="after-crash")
    assert levels(db)[(1, "stored")] == 2
    assert db.execute("SELECT count(*) FROM memories WHERE superseded_by IS NOT NULL").fetchone()[
        0
    ] == len(ids)


CHATTER = ["Thanks!", "Great.", "Cool, thanks", "ok", "haha", "Sounds good!", "Got it.", "Cool."]


def test_decay_acts_only_on_idle_tenants_and_logs_evictions(ctx, db, redis_client) -> None:  # type: ignore[no-untyped-def]
    # given two tenants with old, unimportant chatter; one of them wrote a minute ago
    items = [
        {**item, "content": f"Dana: {text}"}
        for item, text in zip(history(START)[:8], CHATTER, strict=True)
    ]
    store(db, items, importance=0.1)
    store(db, [{**item, "tenant_id": "busy"} for item in items], importance=0.1)
    later = END + timedelta(days=30)
    mark_activity(redis_client, ["busy"], at=later - timedelta(seconds=60))

    # when the decay sweep runs
    outcome = run_to_end(decay_step, ctx, "decay", later)

    # then only the idle tenant's memories were evicted, each with its log line
    assert outcome.stats["tenants_swept"] == 1
    assert outcome.stats["tenants_active_skipped"] == 1
    statuses = dict(
        db.execute(
            "SELECT tenant_id || ':' || status, count(*) FROM memories GROUP BY 1"
        ).fetchall()
    )
    assert statuses == {f"{TENANT}:evicted": 8, "busy:stored": 8}
    record = db.execute("SELECT record FROM evictions LIMIT 1").fetchone()[0]
    assert record["retention"] < 0.05 and record["importance"] == pytest.approx(0.1)
    assert "retention" in record["reason"]
    assert db.execute("SELECT count(*) FROM jobs WHERE kind = 'unindex'").fetchone()[0] == 8


def evicted_rows(db: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    """Each evicted row with the status and level of the row it points at (its summary)."""
    return db.execute(
        "SELECT m.id, m.content, m.superseded_by, s.status, s.level FROM memories m "
        "LEFT JOIN memories s ON s.id = m.superseded_by WHERE m.status = 'evicted' ORDER BY 1"
    ).fetchall()


def test_decay_evicts_only_what_a_kept_summary_covers_or_what_says_nothing(  # type: ignore[no-untyped-def]
    ctx, db, redis_client
) -> None:
    # given two weeks of a project judged unimportant, compressed at the end of the two weeks,
    # and facts stated after that compression, which no summary covers yet
    store(db, history(START), importance=0.1)
    run_to_end(compress_step, ctx, "compress", END)
    late = [
        {**item, "task_id": "late", "timestamp": END + timedelta(days=1, minutes=i)}
        for i, item in enumerate(history(START)[:6])
    ]
    late_ids = store(db, late, importance=0.1)
    late_facts = {
        i for i, item in zip(late_ids, late, strict=True) if "Thanks" not in item["content"]
    }

    # when decay runs two months later, when every one of them has faded
    outcome = run_to_end(decay_step, ctx, "decay", END + timedelta(days=60))

    # then every evicted row was covered by a summary still kept, or carried no fact
    evicted = evicted_rows(db)
    assert evicted and outcome.stats["evicted"] == len(evicted)
    for _, content, cover, cover_status, cover_level in evicted:
        assert (cover is not None and cover_status == "stored" and cover_level >= 1) or (
            not carries_fact(content)
        ), content
    # and the late facts, faded as much, are all still stored: candidates for compression
    statuses = dict(
        db.execute("SELECT id, status FROM memories WHERE id = ANY(%s)", (list(late_facts),))
    )
    assert set(statuses.values()) == {"stored"}
    assert outcome.stats["decided_compress"] >= len(late_facts)
    reasons = [r[0]["reason"] for r in db.execute("SELECT record FROM evictions").fetchall()]
    assert all("summary covers it" in r or "carries no fact" in r for r in reasons)


def test_rows_a_stale_summary_covered_come_back_from_eviction(ctx, db, redis_client) -> None:  # type: ignore[no-untyped-def]
    # given a compressed project whose covered rows decay evicted, but for one important row
    store(db, history(START), importance=0.1)
    run_to_end(compress_step, ctx, "compress", END)
    drain_embeddings(ctx)
    summary, target = db.execute(
        "SELECT superseded_by, min(id::text)::uuid FROM memories WHERE level = 0 "
        "AND superseded_by IS NOT NULL GROUP BY 1 HAVING count(*) > 2 ORDER BY 1 LIMIT 1"
    ).fetchone()
    db.execute("UPDATE memories SET importance = 0.9 WHERE id = %s", (target,))
    run_to_end(decay_step, ctx, "decay", END + timedelta(days=60))
    siblings = {row[0] for row in evicted_rows(db) if row[2] == summary}
    assert siblings and target not in siblings

    # when one of the summary's sources is corrected, and the owner settles the correction
    with ctx.pool.connection() as conn:
        correct_memory(
            conn,
            target,
            "Dana: Correction: the release moved to the next sprint.",
            tenant_id=TENANT,
            reason="wrong sprint",
            actor="test",
            content_max_bytes=ctx.settings.content_max_bytes,
            metadata_max_bytes=ctx.settings.metadata_max_bytes,
        )
    stats = settle_corrections(ctx, 10)
    assert stats["corrections"] == 1

    # then the summary is retired, and the rows evicted because it covered them are stored
    # again, uncovered, queued for the index, their eviction lines gone, a 'restored' event each
    assert db.execute("SELECT status FROM memories WHERE id = %s", (summary,)).fetchone()[0] == (
        "retired"
    )
    back = siblings
    rows = db.execute(
        "SELECT status, superseded_by FROM memories WHERE id = ANY(%s)", (list(back),)
    ).fetchall()
    assert rows and all(r == ("stored", None) for r in rows)
    assert not db.execute(
        "SELECT 1 FROM evictions WHERE memory_id = ANY(%s)", (list(back),)
    ).fetchall()
    jobs = dict(
        db.execute(
            "SELECT memory_id, status FROM jobs WHERE kind = 'embed' AND memory_id = ANY(%s)",
            (list(back),),
        ).fetchall()
    )
    assert set(jobs) == back and set(jobs.values()) == {"pending"}
    events = db.execute(
        "SELECT count(*) FROM memory_events WHERE event = 'restored' AND memory_id = ANY(%s)",
        (list(back),),
    ).fetchone()[0]
    assert events == len(back)
    # and the embedding drain puts them back into the index
    assert drain_embeddings(ctx)["embedded"] >= len(back)


def test_decay_skips_rows_whose_summary_is_being_retired_and_never_waits(  # type: ignore[no-untyped-def]
    ctx, db, redis_client
) -> None:
    # given covered, faded rows, and another transaction that holds their summary's row (as
    # settle_ownership does while it retires a stale summary)
    store(db, history(START), importance=0.1)
    run_to_end(compress_step, ctx, "compress", END)
    summaries = [
        r[0]
        for r in db.execute(
            "SELECT id FROM memories WHERE level = 1 AND status = 'stored' ORDER BY id"
        ).fetchall()
    ]
    held = summaries[0]
    with psycopg.connect(ctx.settings.database_url) as other, other.transaction():
        other.execute("SELECT 1 FROM memories WHERE id = %s FOR UPDATE", (held,))

        # when decay runs meanwhile (in a thread: a sweep that waited would never finish)
        sweep = threading.Thread(
            target=run_to_end, args=(decay_step, ctx, "decay", END + timedelta(days=60))
        )
        started = time.monotonic()
        sweep.start()
        sweep.join(timeout=30)

        # then it did not wait, and evicted nothing that the held summary covers
        assert not sweep.is_alive(), "the decay sweep waited for a lock"
        assert time.monotonic() - started < 10
        under_held = [row for row in evicted_rows(db) if row[2] == held]
        assert under_held == []
        assert any(row[2] is not None for row in evicted_rows(db))

    # and the next sweep, with the summary free again, evicts them too
    run_to_end(decay_step, ctx, "decay", END + timedelta(days=61))
    assert [row for row in evicted_rows(db) if row[2] == held]


def test_decay_and_settling_corrections_at_once_never_deadlock(ctx, db, redis_client) -> None:  # type: ignore[no-untyped-def]
    # given eight tenants' compressed projects, and a correction of a covered row in each
    tenants = [f"{TENANT}-{n}" for n in range(8)]
    for tenant in tenants:
        store(db, [{**item, "tenant_id": tenant} for item in history(START)], importance=0.1)
    run_to_end(compress_step, ctx, "compress", END)
    with ctx.pool.connection() as conn:
        for tenant in tenants:
            target = conn.execute(
                "SELECT id FROM memories WHERE tenant_id = %s AND level = 0 "
                "AND superseded_by IS NOT NULL ORDER BY id LIMIT 1",
                (tenant,),
            ).fetchone()[0]
            correct_memory(
                conn,
                target,
                "Dana: Correction: the release moved to the next sprint.",
                tenant_id=tenant,
                reason="wrong sprint",
                actor="test",
                content_max_bytes=ctx.settings.content_max_bytes,
                metadata_max_bytes=ctx.settings.metadata_max_bytes,
            )
    errors: list[BaseException] = []
    other = Clients(ctx.settings)

    def unsettled(clients: Clients) -> bool:
        with clients.pool.connection() as conn:
            return bool(
                conn.execute(
                    "SELECT 1 FROM jobs WHERE kind = 'settle' AND status <> 'done'"
                ).fetchone()
            )

    def settle() -> None:
        try:
            for _ in range(40):
                if settle_corrections(other, 1)["corrections"] == 0 and not unsettled(other):
                    return
        except BaseException as exc:
            errors.append(exc)

    # when the owner settles them one at a time while decay sweeps the same rows
    thread = threading.Thread(target=settle)
    thread.start()
    try:
        for day in range(60, 66):
            run_to_end(decay_step, ctx, "decay", END + timedelta(days=day))
    finally:
        thread.join(timeout=120)
        other.close()

    # then neither failed, every correction settled, and no row stays evicted under a summary
    # that is no longer kept
    assert errors == []
    pending = db.execute("SELECT count(*) FROM jobs WHERE kind = 'settle' AND status <> 'done'")
    assert pending.fetchone()[0] == 0
    for _, content, _cover, cover_status, _ in evicted_rows(db):
        assert cover_status == "stored" or not carries_fact(content), content


def test_decay_stores_retention_and_keeps_important_memories(ctx, db, redis_client) -> None:  # type: ignore[no-untyped-def]
    # given old but important memories
    store(db, history(START)[:4], importance=0.9)

    # when the decay sweep runs a month later
    run_to_end(decay_step, ctx, "decay", END + timedelta(days=30))

    # then nothing is evicted and each row carries its retention
    factors = [r[0] for r in db.execute("SELECT decay_factor FROM memories").fetchall()]
    assert all(0.0 < f < 1.0 for f in factors)
    assert levels(db) == {(0, "stored"): 4}


def test_consolidation_promotes_recurring_knowledge_and_never_overwrites(ctx, db) -> None:  # type: ignore[no-untyped-def]
    # given two weeks in which a preference recurs, plus a convention and a mistake
    store(db, history(START))

    # when the tenant is consolidated
    outcome = consolidate_tenant(ctx, TENANT, uuid.uuid4(), END)

    # then the recurring preference, the convention and the mistake are semantic knowledge
    rows = db.execute(
        "SELECT kind, content, status, scope, cardinality(source_ids) FROM semantic_memories"
    ).fetchall()
    by_kind = {kind: (content, status, scope, n) for kind, content, status, scope, n in rows}
    assert "brief answers" in by_kind["preference"][0]
    assert by_kind["preference"][2] == "user:dana" and by_kind["preference"][3] >= 4
    assert "snake_case" in by_kind["convention"][0]
    assert "Friday" in by_kind["mistake"][0]
    assert outcome.stats["semantic_create"] >= 3

    # when a contradicting preference arrives later, with no condition
    store(
        db,
        [
            {
                "content": "Dana: I prefer detailed answers with the commands first.",
                "tenant_id": TENANT,
                "task_id": "other-task",
                "session_id": "s-9",
                "user_id": "dana",
                "timestamp": END,
            },
            {
                "content": "Dana: I prefer detailed answers with the commands first!",
                "tenant_id": TENANT,
                "task_id": "third-task",
                "session_id": "s-10",
                "user_id": "dana",
                "timestamp": END + timedelta(hours=1),
            },
        ],
    )
    consolidate_tenant(ctx, TENANT, uuid.uuid4(), END + timedelta(days=1))

    # then it is stored beside the old one, flagged for confirmation; the old one is intact
    flagged = db.execute(
        "SELECT content, conflicts_with FROM semantic_memories WHERE status = 'needs_confirmation'"
    ).fetchall()
    assert flagged and "detailed" in flagged[0][0]
    old = db.execute(
        "SELECT content, status FROM semantic_memories WHERE id = %s", (flagged[0][1],)
    ).fetchone()
    assert old == (by_kind["preference"][0], "active")


def test_consolidation_stores_owners_and_stacks_and_nothing_of_reports_or_chatter(ctx, db) -> None:  # type: ignore[no-untyped-def]
    # given an owner, a stack, a reassignment ten days later, a report, an acknowledgement
    # and a question without its question mark, in both languages
    lines = [
        ("Maya: Priya owns the payments module.", 0),
        ("Maya: The backend is written in Go.", 0),
        ("Maya: Weekly report: we use feature flags now, Sam owns checkout.", 1),
        ("Leo: Gotcha, Maya!", 1),
        ("张三：搜索服务由小王负责。", 2),
        ("李四：谁负责支付模块", 2),
        ("张三：周报：统一使用新的日志库。", 3),
        ("Maya: The payments module is now owned by Omar.", 10),
    ]
    store(
        db,
        [
            {
                "content": content,
                "tenant_id": TENANT,
                "task_id": TASK,
                "session_id": f"s-{day}",
                "user_id": "maya",
                "timestamp": START + timedelta(days=day),
            }
            for content, day in lines
        ],
    )

    # when the tenant is consolidated
    consolidate_tenant(ctx, TENANT, uuid.uuid4(), START + timedelta(days=11))

    # then the owners (both, the reassignment beside the first) and the stack are stored
    # with their kinds, and the report, the acknowledgement and the question are not
    rows = sorted(db.execute("SELECT kind, content FROM semantic_memories").fetchall())
    assert rows == [
        ("owner", "Priya owns the payments module."),
        ("owner", "The payments module is now owned by Omar."),
        ("owner", "搜索服务由小王负责。"),
        ("stack", "The backend is written in Go."),
    ]


def test_links_on_write_and_the_multi_hop_traversal(ctx, db, redis_client) -> None:  # type: ignore[no-untyped-def]
    # given a project whose memories the write path stored and indexed
    items = history(START)
    ids = store(db, items)
    from pipelines.index.vectors import VectorPoint

    ctx.vectors.ensure_collection(ctx.episodic_collection, ctx.embedder.dim)
    vectors = ctx.embedder.embed([item["content"] for item in items])
    ctx.vectors.upsert(
        ctx.episodic_collection,
        [
            VectorPoint(
                id=memory_id,
                vector=vector,
                payload={"tenant_id": TENANT, "task_id": TASK, "level": 0},
            )
            for memory_id, vector in zip(ids, vectors, strict=True)
        ],
    )

    # when each memory is linked as it arrives
    for memory_id in ids:
        link_memories(ctx, [memory_id])

    # then it has entity, similarity and causal links
    kinds = dict(db.execute("SELECT kind, count(*) FROM memory_links GROUP BY 1").fetchall())
    assert kinds.get("entity", 0) > 0 and kinds.get("causal", 0) > 0
    assert kinds.get("similar", 0) > 0
    assert db.execute("SELECT count(*) FROM memories WHERE linked_at IS NULL").fetchone()[0] == 0

    # and "what does the delay of the auth module affect?" follows the causal chain
    answer = affected_by(ctx.pool, TENANT, "What does the delay of the auth module affect?")
    assert any("auth module is delayed" in s.content for s in answer.starts)
    reached = {a.content: a.hops for a in answer.affected}
    assert reached.get("Agent: The mobile release is blocked by the auth module delay.") == 1
    assert reached.get("Agent: The billing migration is waiting on the mobile release.") == 2


def test_summaries_are_embedded_with_their_version_and_rollbacks_unindexed(ctx, db) -> None:  # type: ignore[no-untyped-def]
    # given compressed, checked summaries
    store(db, history(START))
    run_to_end(compress_step, ctx, "compress", END)
    run_to_end(quality_step, ctx, "quality", END)

    # when the embed queue drains
    while drain_embeddings(ctx)["more"]:
        pass

    # then kept summaries are points carrying level and version; rolled-back ones are not
    kept = db.execute(
        "SELECT id, embedding_version FROM memories WHERE level = 1 AND status = 'stored'"
    ).fetchall()
    assert kept and {v for _, v in kept} == {ctx.embedder.version}
    retired = db.execute(
        "SELECT id FROM memories WHERE level = 1 AND status = 'retired'"
    ).fetchall()
    collection = ctx.episodic_collection
    assert ctx.vectors.count(collection, TENANT) == len(kept)
    hits = ctx.vectors.search(
        collection, ctx.embedder.embed(["PKCE mobile client secret"])[0], tenant_id=TENANT
    )
    assert hits and hits[0].payload["level"] == 1 and hits[0].payload["version"] >= 1
    assert not {h.id for h in hits} & {r[0] for r in retired}
    assert db.execute("SELECT count(*) FROM jobs WHERE status <> 'done'").fetchone()[0] == 0


def test_compression_runs_more_often_past_the_capacity_watermark(
    db, redis_client, qdrant_path
) -> None:  # type: ignore[no-untyped-def]
    from config import Settings

    store(db, history(START)[:10])
    # given a store sized for 100 rows (10 % full), then for 12 rows (83 % full)
    for capacity, expected_period_s in ((100, 900.0), (12, 900.0 / 4)):
        context = Clients(Settings(episodic_capacity=capacity, compress_interval_s=900))
        try:
            redis_client.delete("memharness:compress:next-sweep")
            # when the capacity check runs twice within the period
            first = schedule_compression(context, END)
            second = schedule_compression(context, END)
        finally:
            context.close()
        # then it starts one sweep, and below the watermark waits the full period
        assert first["period_s"] == expected_period_s
        assert (first["started"], second["started"]) == (True, False)
        ttl_ms = redis_client.pttl("memharness:compress:next-sweep")
        assert 0 < ttl_ms <= expected_period_s * 1000


def test_a_finished_task_gets_one_l3_summary_of_what_is_live(ctx, db) -> None:  # type: ignore[no-untyped-def]
    # given a project compressed once and checked (some L1 kept, the rest L0 again)
    store(db, history(START))
    run_to_end(compress_step, ctx, "compress", END)
    run_to_end(quality_step, ctx, "quality", END)
    live = db.execute(
        "SELECT count(*) FROM memories WHERE status = 'stored' AND superseded_by IS NULL"
    ).fetchone()[0]

    # when the task is declared finished, twice (a replayed message)
    first = complete_task(ctx, TENANT, TASK, END)
    second = complete_task(ctx, TENANT, TASK, END)

    # then one L3 summary covers every row that was live, and the replay wrote nothing
    assert first["created"] is True and second["created"] is False
    assert first["sources"] == live
    l3 = db.execute("SELECT id, parent_ids FROM memories WHERE level = 3").fetchall()
    assert len(l3) == 1 and len(l3[0][1]) == live
    assert (
        db.execute(
            "SELECT count(*) FROM memories WHERE status = 'stored' AND superseded_by IS NULL"
        ).fetchone()[0]
        == 1
    )


def task_summaries(db: psycopg.Connection[Any]) -> list[tuple[int, str, list[uuid.UUID], str]]:
    """(version, status, parents, verdict) of every L3 row, oldest version first."""
    rows = db.execute(
        "SELECT m.version, m.status, m.parent_ids, coalesce(q.verdict, '') FROM memories m "
        "LEFT JOIN quality_reports q ON q.summary_id = m.id WHERE m.level = 3 "
        "ORDER BY m.version"
    ).fetchall()
    return [(v, s, sorted(p), verdict) for v, s, p, verdict in rows]


@pytest.mark.parametrize(
    ("make_history", "tenant", "task"),
    [(history, TENANT, TASK), (history_zh, TENANT_ZH, TASK_ZH)],
    ids=["en", "zh"],
)
def test_the_task_summary_survives_its_check(  # type: ignore[no-untyped-def]
    ctx,
    db,
    make_history: Callable[[datetime], list[dict[str, Any]]],
    tenant: str,
    task: str,
) -> None:
    # given two weeks of a project, compressed and checked, then declared finished
    store(db, make_history(START))
    run_to_end(compress_step, ctx, "compress", END, key="c0")
    run_to_end(quality_step, ctx, "quality", END, key="q0")
    assert complete_task(ctx, tenant, task, END)["created"] is True

    # when its task summary is checked
    run_to_end(quality_step, ctx, "quality", END, key="q1")

    # then the first version passed on its own merit, smaller than what it covers
    ((version, status, _, verdict),) = task_summaries(db)
    assert (version, status, verdict) == (1, "stored", "keep")
    reason, source_words, summary_words = db.execute(
        "SELECT q.reason, (m.metadata->>'source_words')::int, "
        "(m.metadata->>'summary_words')::int FROM quality_reports q "
        "JOIN memories m ON m.id = q.summary_id WHERE m.level = 3"
    ).fetchone()
    assert reason == "passed"
    assert summary_words < source_words


@pytest.mark.parametrize(
    ("make_history", "tenant", "task"),
    [(history, TENANT, TASK), (history_zh, TENANT_ZH, TASK_ZH)],
    ids=["en", "zh"],
)
def test_a_rolled_back_task_summary_is_made_again_by_the_compression_sweep(  # type: ignore[no-untyped-def]
    ctx,
    db,
    make_history: Callable[[datetime], list[dict[str, Any]]],
    tenant: str,
    task: str,
) -> None:
    # given two weeks of a project, compressed once and checked, then declared finished;
    # its task summary, by a compressor that loses facts, is rolled back
    store(db, make_history(START))
    ctx.llm = LossyLLM()
    run_to_end(compress_step, ctx, "compress", END, key="c0")
    run_to_end(quality_step, ctx, "quality", END, key="q0")
    assert complete_task(ctx, tenant, task, END)["created"] is True
    run_to_end(quality_step, ctx, "quality", END, key="q1")
    ((first, status, parents, verdict),) = task_summaries(db)
    assert (status, verdict) == ("retired", "rollback")

    # when the compression sweep and the quality sweep alternate (complete_task is not
    # called again: it is one shot)
    for round_ in range(2, 6):
        outcome = run_to_end(compress_step, ctx, "compress", END, key=f"c{round_}")
        run_to_end(quality_step, ctx, "quality", END, key=f"q{round_}")
        summaries = task_summaries(db)

        # then each round made the next version over the very same parents
        assert outcome.stats.get("l3_created") == 1
        assert [s[0] for s in summaries] == list(range(first, first + round_))
        assert all(s[2] == parents for s in summaries)
        if summaries[-1][1] == "stored":
            break
    # and one was kept at last (annotate-only once the parents resisted), covering them all
    *retired, (_, status, _, verdict) = task_summaries(db)
    assert (status, verdict) == ("stored", "keep")
    assert {s[1] for s in retired} == {"retired"}
    live = db.execute(
        "SELECT level, count(*) FROM memories WHERE status = 'stored' AND superseded_by IS NULL "
        "GROUP BY 1"
    ).fetchall()
    assert live == [(3, 1)]

    # and with nothing left to retry, another sweep makes no task summary
    again = run_to_end(compress_step, ctx, "compress", END, key="after")
    assert "l3_created" not in again.stats
    assert len(task_summaries(db)) == len(retired) + 1


def test_a_model_down_on_the_last_link_attempt_links_with_the_offline_rules(
    db, redis_client, qdrant_path
) -> None:  # type: ignore[no-untyped-def]
    from config import Settings
    from pipelines.errors import TransientLLMError
    from tests.support.openai_stub import serve_stub

    with serve_stub() as stub:
        settings = Settings(
            llm_provider="openai", llm_base_url=stub.url, llm_api_key=stub.api_key,
            llm_timeout_s=5.0,
        )  # fmt: skip
        ctx = Clients(settings)
        try:
            # given a project's memories and a model that answers every call with a 503
            ids = store(db, history(START))
            stub.control("http503")

            # when a link attempt with retries left runs, the error goes up to be retried
            with pytest.raises(TransientLLMError):
                link_memories(ctx, ids)
            # (the first memory has no older one to ask the model about: it is linked)
            unlinked = "SELECT count(*) FROM memories WHERE linked_at IS NULL"
            assert db.execute(unlinked).fetchone()[0] == len(ids) - 1

            # and on the last attempt the offline rules propose the causes instead
            stats = link_memories(ctx, ids, transient_fallback=True)
        finally:
            ctx.close()

    # then every memory is linked, the fallback counted, the causal chain made
    assert db.execute(unlinked).fetchone()[0] == 0
    assert stats["linked"] == len(ids) - 1 and stats["llm_fallback"] == len(ids) - 1
    kinds = dict(db.execute("SELECT kind, count(*) FROM memory_links GROUP BY 1").fetchall())
    assert kinds.get("causal", 0) > 0, kinds
