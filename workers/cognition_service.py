"""Background cognition in workers: the pure pipelines of issue 4, run as resumable sweeps.

* **compress** (``compress`` queue): per (tenant, task), live L0 rows whose level policy or
  forgetting curve says so become L1 summaries, checked L1 rows older than a week become L2.
  Each summary is a new row with parent pointers, inserted with its parents' ``superseded_by``
  and its embedding job in one transaction. ``complete_task`` makes the L3 summary of a
  finished task from whatever is still live in it.
* **quality** (``quality`` queue): every summary without a report is checked once; a failed
  one is retired, its parents freed and their failures counted, in one transaction.
* **decay** (``maintenance`` queue): tenants idle for ``tenant_idle_s`` get their retentions
  stored and their forgotten, unimportant rows evicted (logged, unindexed, row kept).
* **consolidate** (``consolidate`` queue): per tenant, episodes of the window → semantic
  knowledge (merges extend, contradictions add conditional or flagged rows).
* **embed / link** (``embed`` queue, the store's owner): summaries are embedded and their
  ``embedding_version`` recorded; retired and evicted rows are unindexed; new memories are
  linked by entities, vector neighbours of their task and causal proposals.

A sweep is a run (``cognition_runs``) moved on by short steps: each step works until its
deadline, then advances the run's cursor *from where it started* (a replayed step advances
nothing and does not requeue) and the task requeues itself. Every sweep takes its clock as an
argument, so a run at the same clock over the same rows changes nothing the second time.
"""

from __future__ import annotations

import bisect
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from psycopg_pool import ConnectionPool
from pydantic import BaseModel, ConfigDict

from pipelines.compress import (
    DEFAULT_LEVELS,
    ask_with_fallback,
    compress_group,
    plan_groups,
    target_level,
)
from pipelines.consolidate import consolidate
from pipelines.decay import DecayAction, decide_decay, eviction_record
from pipelines.link import (
    MemoryLink,
    Neighbour,
    causal_links,
    entity_links,
    extract_entities,
    propose_causal_offline,
    similar_links,
)
from pipelines.link import affected_by as affected_by_pipeline
from pipelines.ports import VectorPoint
from pipelines.quality import (
    CompressionHealth,
    QualityOutcome,
    QualityReport,
    QualityVerdict,
    apply_quality,
    check_compression,
    split_resistant,
    summarise_run,
)
from pipelines.records import ID_NAMESPACE, EpisodicMemory, Level
from workers.context import WorkerContext
from workers.db.cognition import (
    EMBED_JOB,
    UNINDEX_JOB,
    ConcurrentChange,
    Run,
    advance_run,
    apply_decay,
    apply_knowledge,
    close_jobs,
    consolidation_inputs,
    fetch_rows,
    insert_links,
    insert_summary,
    links_touching,
    live_episodic_count,
    live_rows,
    load_health,
    recent_memories,
    record_quality,
    row_to_draft,
    row_to_memory,
    row_to_source,
    scopes_after,
    set_embedding_versions,
    start_run,
    stored_rows_after,
    tenants_after,
    unchecked_summaries,
    unlinked_ids,
)
from workers.db.writes import WRITE_JOB, claim_jobs, count_due_jobs
from workers.index_service import EPISODIC, dense_search_target, episodic_payload, write_target
from workers.queues import CeleryQueue

log = logging.getLogger(__name__)

COMPRESS_SWEEP_TASK = "memory.compress.sweep"
COMPLETE_TASK_TASK = "memory.compress.complete_task"
QUALITY_SWEEP_TASK = "memory.quality.sweep"
DECAY_SWEEP_TASK = "memory.maintenance.decay_sweep"
CONSOLIDATE_TENANT_TASK = "memory.consolidate.tenant"
EMBED_DRAIN_TASK = "memory.embed.drain"
LINK_TASK = "memory.embed.link_memories"

# Last write per tenant (epoch seconds): a sorted set, so "who is idle" is one range query.
ACTIVITY_KEY = "memharness:tenant-activity"
COMPRESS_GATE_KEY = "memharness:compress:next-sweep"
# Past the capacity watermark the compression sweep runs this many times as often.
WATERMARK_SPEEDUP = 4
# Entity links look at the tenant's most recent rows: 300 keeps a link step inside ~50 ms of
# Python per memory with the offline extractor, and recent memories are the likely partners.
LINK_CANDIDATES = 300
LINK_NEIGHBOURS = 10
# One compression step reads at most this many oldest rows per level of a task (~1 s of
# offline compression); the rest waits for the next step or sweep.
SCOPE_MAX_ROWS = 2000
# Consolidation reads at most this many episodes per tenant and run (~2 s offline).
CONSOLIDATE_MAX_ROWS = 2000
# Traversal starts from the tenant's most recent episodes.
TRAVERSAL_CANDIDATES = 2000


def utcnow() -> datetime:
    return datetime.now(UTC)


def parse_clock(now: str | None) -> datetime:
    """A task's ``now`` argument (ISO 8601, timezone-aware), or the wall clock."""
    if now is None:
        return utcnow()
    clock = datetime.fromisoformat(now)
    if clock.utcoffset() is None:
        raise ValueError(f"now must be timezone-aware, got {now!r}")
    return clock


def run_id_for(kind: str, tenant_id: str | None, clock: datetime) -> uuid.UUID:
    """One run per (kind, tenant, clock): the same tick published twice is one run."""
    return uuid.uuid5(ID_NAMESPACE, f"run\x1f{kind}\x1f{tenant_id or '*'}\x1f{clock.isoformat()}")


# -- activity --------------------------------------------------------------------------------


def mark_activity(r: redis.Redis, tenant_ids: Sequence[str], at: datetime | None = None) -> None:
    """Record a write for each tenant; the score only moves forward."""
    if tenant_ids:
        stamp = (at or utcnow()).timestamp()
        r.zadd(ACTIVITY_KEY, dict.fromkeys(tenant_ids, stamp), gt=True)


def tenant_is_idle(r: redis.Redis, tenant_id: str, now: datetime, idle_s: float) -> bool:
    last = r.zscore(ACTIVITY_KEY, tenant_id)
    return last is None or now.timestamp() - float(last) >= idle_s


# -- the step driver -------------------------------------------------------------------------


@dataclass
class StepOutcome:
    run_id: uuid.UUID
    cursor: str | None
    requeue: bool
    finished: bool
    stats: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": str(self.run_id),
            "cursor": self.cursor,
            "requeue": self.requeue,
            "finished": self.finished,
            "stats": self.stats,
        }


Body = Callable[[Run, float], tuple[str | None, bool, dict[str, Any]]]


def run_step(
    ctx: WorkerContext,
    kind: str,
    run_id: uuid.UUID,
    clock: datetime,
    tenant_id: str | None,
    body: Body,
) -> StepOutcome:
    """One step of a run: ``body(run, deadline)`` returns (cursor, done, stats)."""
    with ctx.pool.connection() as conn:
        run = start_run(conn, run_id, kind, tenant_id, clock)
    if run.finished:
        return StepOutcome(run_id, run.cursor, requeue=False, finished=True)
    deadline = time.monotonic() + ctx.settings.sweep_deadline_s
    cursor, done, stats = body(run, deadline)
    with ctx.pool.connection() as conn:
        advanced = advance_run(conn, run, cursor=cursor, stats=stats, finished=done)
    if not advanced:
        log.info("%s run %s: step replayed; the run moved on without it", kind, run_id)
    return StepOutcome(run_id, cursor, requeue=advanced and not done, finished=done, stats=stats)


def _add(stats: dict[str, Any], key: str, n: int = 1) -> None:
    stats[key] = stats.get(key, 0) + n


def _publish(task: str, queue: CeleryQueue, **kwargs: Any) -> None:
    """After COMMIT, best effort: a lost message is covered by the next sweep or relay."""
    from workers.app import app

    try:
        app.send_task(task, kwargs=kwargs, queue=queue.value)
    except Exception:
        log.warning("could not publish %s; the next sweep or relay covers it", task, exc_info=True)


# -- compression -----------------------------------------------------------------------------


def _eligible(row: dict[str, Any], level: Level, now: datetime) -> bool:
    """The level policy (age slowed by reads) or the forgetting curve asks for ``level``."""
    memory = row_to_memory(row)
    age_s = (now - memory.timestamp).total_seconds()
    ceiling = target_level(age_s, memory.access_count, DEFAULT_LEVELS)
    if ceiling >= level:
        return True
    decision = decide_decay(memory, now, level_ceiling=ceiling)
    return (
        decision.action in (DecayAction.PROMOTE, DecayAction.COMPRESS)
        and decision.target_level == level
    )


def compress_scope(
    ctx: WorkerContext, tenant_id: str, task_id: str, now: datetime
) -> dict[str, Any]:
    """Promote what is due in one task: L0 → L1, then checked L1 → L2."""
    stats: dict[str, Any] = {}
    for level, source_level in ((Level.L1, Level.L0), (Level.L2, Level.L1)):
        with ctx.pool.connection() as conn:
            rows = live_rows(
                conn,
                tenant_id,
                task_id,
                source_level,
                checked_only=level > Level.L1,
                limit=SCOPE_MAX_ROWS,
            )
            rows = [r for r in rows if r["ts"] <= now and _eligible(r, level, now)]
            if not rows:
                continue
            health = load_health(conn, [r["id"] for r in rows])
        by_id = {r["id"]: r for r in rows}
        for group in plan_groups([row_to_source(r) for r in rows], level, DEFAULT_LEVELS):
            normal, resistant = split_resistant(group, health)
            for part, annotate_only in ((normal, False), (resistant, True)):
                if not part:
                    continue
                failures = max(
                    (health.get(s.id, CompressionHealth(memory_id=s.id)).failures for s in part),
                    default=0,
                )
                result = compress_group(
                    part,
                    level,
                    ctx.llm,
                    version=failures + 1,
                    annotate_only=annotate_only,
                    policy=DEFAULT_LEVELS,
                )
                try:
                    with ctx.pool.connection() as conn:
                        created = insert_summary(conn, result.draft, [by_id[s.id] for s in part])
                except ConcurrentChange as exc:
                    log.info("compression skipped: %s", exc)
                    _add(stats, "conflicts")
                    continue
                if created:
                    _add(stats, f"l{int(level)}_created")
                    _add(stats, "source_words", result.draft.source_words)
                    _add(stats, "summary_words", result.draft.summary_words)
                    if annotate_only:
                        _add(stats, "annotate_only")
                else:
                    _add(stats, "already_done")
    return stats


def _scope_cursor(cursor: str | None) -> tuple[str, str] | None:
    if not cursor:
        return None
    tenant, _, task = cursor.partition("\x1f")
    return tenant, task


def compress_step(ctx: WorkerContext, run_id: uuid.UUID, clock: datetime) -> StepOutcome:
    def body(run: Run, deadline: float) -> tuple[str | None, bool, dict[str, Any]]:
        stats: dict[str, Any] = {}
        after = _scope_cursor(run.cursor)
        limit = ctx.settings.sweep_batch_size
        with ctx.pool.connection() as conn:
            scopes = scopes_after(conn, after, limit, max_level=int(Level.L2))
        cursor = run.cursor
        for tenant_id, task_id in scopes:
            if time.monotonic() > deadline:
                return cursor, False, stats
            for key, n in compress_scope(ctx, tenant_id, task_id, run.clock).items():
                _add(stats, key, n)
            _add(stats, "scopes")
            cursor = f"{tenant_id}\x1f{task_id}"
        return cursor, len(scopes) < limit, stats

    outcome = run_step(ctx, "compress", run_id, clock, None, body)
    created = sum(v for k, v in outcome.stats.items() if k.endswith("_created"))
    if created:
        # Check the new summaries now rather than at the next quality tick; embed them.
        quality_run = uuid.uuid5(run_id, f"quality\x1f{outcome.cursor}")
        _publish(
            QUALITY_SWEEP_TASK,
            CeleryQueue.QUALITY,
            run_id=str(quality_run),
            now=clock.isoformat(),
        )
        _publish(EMBED_DRAIN_TASK, CeleryQueue.EMBED)
    return outcome


def complete_task(
    ctx: WorkerContext, tenant_id: str, task_id: str, now: datetime
) -> dict[str, Any]:
    """L3 at task completion: one summary of everything still live in the task (raw rows,
    and summaries that passed their check), inserted like any summary and checked after."""
    with ctx.pool.connection() as conn:
        rows = [
            row
            for level in (Level.L0, Level.L1, Level.L2)
            for row in live_rows(conn, tenant_id, task_id, level, checked_only=level > Level.L0)
            if row["ts"] <= now
        ]
        health = load_health(conn, [r["id"] for r in rows])
    if not rows:
        return {"created": False, "sources": 0}
    sources = [row_to_source(r) for r in rows]
    records = [health.get(s.id, CompressionHealth(memory_id=s.id)) for s in sources]
    result = compress_group(
        sources,
        Level.L3,
        ctx.llm,
        version=max(r.failures for r in records) + 1,
        annotate_only=any(r.resistant for r in records),
        policy=DEFAULT_LEVELS,
    )
    by_id = {r["id"]: r for r in rows}
    with ctx.pool.connection() as conn:
        created = insert_summary(conn, result.draft, [by_id[s.id] for s in sources])
    if created:
        _publish(
            QUALITY_SWEEP_TASK,
            CeleryQueue.QUALITY,
            run_id=str(uuid.uuid5(result.draft.id, "quality")),
            now=now.isoformat(),
        )
        _publish(EMBED_DRAIN_TASK, CeleryQueue.EMBED)
    return {
        "created": created,
        "summary_id": str(result.draft.id),
        "version": result.draft.version,
        "sources": len(sources),
    }


def schedule_compression(ctx: WorkerContext, now: datetime) -> dict[str, Any]:
    """The capacity check: start a compression sweep when its period has passed, a shorter
    period past the watermark. A Redis gate with that period's TTL makes it once per period."""
    settings = ctx.settings
    with ctx.pool.connection() as conn:
        live = live_episodic_count(conn)
    fill = live / settings.episodic_capacity
    period_s = settings.compress_interval_s
    if fill >= settings.capacity_watermark:
        period_s /= WATERMARK_SPEEDUP
    started = bool(
        ctx.redis.set(COMPRESS_GATE_KEY, now.isoformat(), nx=True, px=int(period_s * 1000))
    )
    if started:
        _publish(
            COMPRESS_SWEEP_TASK,
            CeleryQueue.COMPRESS,
            run_id=str(run_id_for("compress", None, now)),
            now=now.isoformat(),
        )
    return {"live": live, "fill": round(fill, 4), "period_s": period_s, "started": started}


# -- quality ---------------------------------------------------------------------------------


def check_summaries(
    ctx: WorkerContext, summary_ids: Sequence[uuid.UUID], now: datetime, run_id: uuid.UUID | None
) -> tuple[list[QualityReport], list[QualityOutcome]]:
    """Check each summary once; apply keep or rollback. Replays find the report and stop."""
    reports: list[QualityReport] = []
    outcomes: list[QualityOutcome] = []
    with ctx.pool.connection() as conn:
        rows = fetch_rows(conn, summary_ids)
    for summary_id in summary_ids:
        row = rows.get(summary_id)
        if row is None or row["status"] != "stored" or not 1 <= row["level"] <= 3:
            continue
        with ctx.pool.connection() as conn:
            parents = fetch_rows(conn, row["parent_ids"])
            health = load_health(conn, list(row["parent_ids"]))
        sources = [row_to_source(parents[p]) for p in row["parent_ids"] if p in parents]
        if not sources:
            continue
        draft = row_to_draft(row)
        report = check_compression(sources, draft)
        if draft.annotate_only and report.verdict is QualityVerdict.ROLLBACK:
            # Nothing gentler than annotate-only is left: keep it, record why.
            report = report.model_copy(
                update={
                    "verdict": QualityVerdict.KEEP,
                    "reason": f"annotate-only summary kept despite: {report.reason}",
                }
            )
        outcome = apply_quality(report, draft, health, now)
        with ctx.pool.connection() as conn:
            if not record_quality(conn, draft, report, outcome, run_id=run_id, now=now):
                continue
        reports.append(report)
        outcomes.append(outcome)
        if outcome.rollback is not None:
            log.info(
                "summary %s (L%s v%s) rolled back: %s",
                draft.id,
                draft.level,
                draft.version,
                report.reason,
            )
    return reports, outcomes


def quality_step(ctx: WorkerContext, run_id: uuid.UUID, clock: datetime) -> StepOutcome:
    def body(run: Run, deadline: float) -> tuple[str | None, bool, dict[str, Any]]:
        stats: dict[str, Any] = {}
        after = uuid.UUID(run.cursor) if run.cursor else None
        limit = ctx.settings.sweep_batch_size
        cursor = run.cursor
        with ctx.pool.connection() as conn:
            ids = unchecked_summaries(conn, after, limit)
        reports: list[QualityReport] = []
        outcomes: list[QualityOutcome] = []
        for summary_id in ids:
            if time.monotonic() > deadline:
                return cursor, False, _quality_stats(run, reports, outcomes)
            done_reports, done_outcomes = check_summaries(ctx, [summary_id], run.clock, run.run_id)
            reports += done_reports
            outcomes += done_outcomes
            cursor = str(summary_id)
        stats = _quality_stats(run, reports, outcomes)
        return cursor, len(ids) < limit, stats

    outcome = run_step(ctx, "quality", run_id, clock, None, body)
    if outcome.stats.get("rolled_back"):
        _publish(EMBED_DRAIN_TASK, CeleryQueue.EMBED)
    return outcome


def _quality_stats(
    run: Run, reports: Sequence[QualityReport], outcomes: Sequence[QualityOutcome]
) -> dict[str, Any]:
    """The figures of the run so far: counters add up, means are over the whole run."""
    step = summarise_run(reports, outcomes)
    recalls = [r.fact_recall for r in reports if r.fact_recall is not None]
    fidelities = [r.decision_fidelity for r in reports if r.decision_fidelity is not None]
    recall_sum = float(run.stats.get("fact_recall_sum", 0.0)) + sum(recalls)
    recall_n = int(run.stats.get("fact_recall_n", 0)) + len(recalls)
    fidelity_sum = float(run.stats.get("decision_fidelity_sum", 0.0)) + sum(fidelities)
    fidelity_n = int(run.stats.get("decision_fidelity_n", 0)) + len(fidelities)
    return {
        "checked": step.checked,
        "kept": step.kept,
        "rolled_back": step.rolled_back,
        "newly_resistant": step.newly_resistant,
        "statements_checked": step.statements_checked,
        "decisions_checked": step.decisions_checked,
        "fact_recall_sum": sum(recalls),
        "fact_recall_n": len(recalls),
        "decision_fidelity_sum": sum(fidelities),
        "decision_fidelity_n": len(fidelities),
        "fact_recall_mean": round(recall_sum / recall_n, 4) if recall_n else None,
        "decision_fidelity_mean": round(fidelity_sum / fidelity_n, 4) if fidelity_n else None,
    }


# -- decay -----------------------------------------------------------------------------------


def decay_tenant_batch(
    ctx: WorkerContext, tenant_id: str, after: uuid.UUID | None, now: datetime, run_id: uuid.UUID
) -> tuple[uuid.UUID | None, bool, dict[str, Any]]:
    """One batch of a tenant's stored rows: (last id, tenant finished, stats)."""
    limit = ctx.settings.sweep_batch_size
    with ctx.pool.connection() as conn:
        rows = stored_rows_after(conn, tenant_id, after, limit)
    evictions = []
    retentions: list[tuple[uuid.UUID, float]] = []
    stats: dict[str, Any] = {}
    for row in rows:
        memory = row_to_memory(row)
        if memory.timestamp > now:
            continue
        age_s = (now - memory.timestamp).total_seconds()
        ceiling = target_level(age_s, memory.access_count, DEFAULT_LEVELS)
        decision = decide_decay(memory, now, level_ceiling=ceiling)
        _add(stats, f"decided_{decision.action.value}")
        if decision.action is DecayAction.EVICT:
            evictions.append(eviction_record(memory, decision, now))
        else:
            retentions.append((memory.id, round(decision.retention, 4)))
    with ctx.pool.connection() as conn:
        evicted = apply_decay(conn, evictions=evictions, retentions=retentions, run_id=run_id)
    _add(stats, "evicted", evicted)
    _add(stats, "rows", len(rows))
    last = rows[-1]["id"] if rows else after
    return last, len(rows) < limit, stats


def decay_step(ctx: WorkerContext, run_id: uuid.UUID, clock: datetime) -> StepOutcome:
    """Tenants in key order; the cursor is ``tenant<US>last id`` (empty id: tenant done)."""

    def body(run: Run, deadline: float) -> tuple[str | None, bool, dict[str, Any]]:
        stats: dict[str, Any] = {}
        cursor = run.cursor
        while time.monotonic() < deadline:
            tenant, _, last = (cursor or "").partition("\x1f")
            if not last:
                with ctx.pool.connection() as conn:
                    following = tenants_after(conn, tenant or None, 1)
                if not following:
                    return cursor, True, stats
                tenant = following[0]
                if not tenant_is_idle(ctx.redis, tenant, run.clock, ctx.settings.tenant_idle_s):
                    _add(stats, "tenants_active_skipped")
                    cursor = f"{tenant}\x1f"
                    continue
                _add(stats, "tenants_swept")
                after_id = None
            else:
                after_id = uuid.UUID(last)
            last_id, finished, batch = decay_tenant_batch(
                ctx, tenant, after_id, run.clock, run.run_id
            )
            for key, n in batch.items():
                _add(stats, key, n)
            cursor = f"{tenant}\x1f" if finished or last_id is None else f"{tenant}\x1f{last_id}"
        return cursor, False, stats

    return run_step(ctx, "decay", run_id, clock, None, body)


# -- consolidation ---------------------------------------------------------------------------


def consolidate_all(ctx: WorkerContext, now: datetime) -> int:
    """Fan out one consolidation run per tenant (the nightly job)."""
    published = 0
    after: str | None = None
    while True:
        with ctx.pool.connection() as conn:
            tenants = tenants_after(conn, after, 500)
        for tenant_id in tenants:
            _publish(
                CONSOLIDATE_TENANT_TASK,
                CeleryQueue.CONSOLIDATE,
                tenant_id=tenant_id,
                run_id=str(run_id_for("consolidate", tenant_id, now)),
                now=now.isoformat(),
            )
            published += 1
        if len(tenants) < 500:
            return published
        after = tenants[-1]


def consolidate_tenant(
    ctx: WorkerContext, tenant_id: str, run_id: uuid.UUID, clock: datetime
) -> StepOutcome:
    def body(run: Run, deadline: float) -> tuple[str | None, bool, dict[str, Any]]:
        since = run.clock - timedelta(days=ctx.settings.consolidate_window_days)
        with ctx.pool.connection() as conn:
            memories, existing, _ = consolidation_inputs(
                conn, tenant_id, since, CONSOLIDATE_MAX_ROWS
            )
        memories = [m for m in memories if m.timestamp <= run.clock]
        plan = consolidate(memories, existing, ctx.embedder, run.clock, ctx.llm)
        waiting = [(w.kind.value, w.statement, w.source_ids, w.reason) for w in plan.episodic_only]
        with ctx.pool.connection() as conn:
            counts = apply_knowledge(conn, tenant_id, plan.changes, waiting, ctx.embedder.version)
        stats: dict[str, Any] = {
            "memories_seen": plan.memories_seen,
            "candidates": plan.candidates,
            "episodic_only": len(plan.episodic_only),
            "extracted_by": plan.extracted_by,
        }
        for action, n in counts.items():
            stats[f"semantic_{action}"] = n
        return None, True, stats

    return run_step(ctx, "consolidate", run_id, clock, tenant_id, body)


# -- embedding of summaries, unindexing --------------------------------------------------------


def drain_embeddings(ctx: WorkerContext) -> dict[str, Any]:
    """Embed new summary rows and unindex retired or evicted ones; one batch of each."""
    settings = ctx.settings
    limit = settings.sweep_batch_size
    collection = ctx.episodic_collection
    with ctx.pool.connection() as conn:
        jobs = claim_jobs(conn, kind=EMBED_JOB, limit=limit, lease_s=settings.job_lease_s)
        rows = fetch_rows(conn, [j.memory_id for j in jobs])
    todo = [(job, rows[job.memory_id]) for job in jobs if job.memory_id in rows]
    todo = [(job, row) for job, row in todo if row["status"] == "stored"]
    version = ctx.embedder.version
    if todo:
        vectors = ctx.embedder.embed([row["content"] for _, row in todo])
        # During a re-embed run the new generation takes the new model's vectors; raises
        # IndexNotReady (the jobs' leases then expire and they are retried) until it exists.
        collection = write_target(ctx, EPISODIC)
        ctx.vectors.upsert(
            collection,
            [
                VectorPoint(id=row["id"], vector=vector, payload=episodic_payload(row, version))
                for (_, row), vector in zip(todo, vectors, strict=True)
            ],
        )
    with ctx.pool.connection() as conn:
        set_embedding_versions(
            conn, [(row["id"], version) for _, row in todo], [j.job_id for j in jobs]
        )
        gone = claim_jobs(conn, kind=UNINDEX_JOB, limit=limit, lease_s=settings.job_lease_s)
    if gone:
        # Through the alias, whatever its model: a point a re-embed run copies meanwhile is
        # removed by the run's own verification, which treats non-live rows as orphans.
        if ctx.vectors.resolve(collection) is not None:
            ctx.vectors.delete(collection, [j.memory_id for j in gone])
        with ctx.pool.connection() as conn:
            close_jobs(conn, [j.job_id for j in gone])
    return {
        "embedded": len(todo),
        "skipped": len(jobs) - len(todo),
        "unindexed": len(gone),
        "more": len(jobs) == limit or len(gone) == limit,
    }


# -- links -----------------------------------------------------------------------------------


# Entities of a row never change (content is immutable): computed once per process.
_ENTITIES: dict[uuid.UUID, frozenset[str]] = {}
_ENTITIES_MAX = 50_000


def _entities_of(memories: Sequence[EpisodicMemory]) -> dict[uuid.UUID, frozenset[str]]:
    if len(_ENTITIES) > _ENTITIES_MAX:
        _ENTITIES.clear()
    for memory in memories:
        if memory.id not in _ENTITIES:
            _ENTITIES[memory.id] = extract_entities(memory.content)
    return _ENTITIES


OrderedCandidates = tuple[list[EpisodicMemory], list[tuple[datetime, str]]]


def _ordered(
    ordered: dict[str, OrderedCandidates],
    recent: dict[str, list[EpisodicMemory]],
    tenant_id: str,
) -> OrderedCandidates:
    """A tenant's candidates sorted by (timestamp, id) with their keys, once per batch, so
    "the older ones" of each new memory is a bisection instead of a scan."""
    if tenant_id not in ordered:
        by_key = sorted(recent[tenant_id], key=lambda m: (m.timestamp, str(m.id)))
        ordered[tenant_id] = (by_key, [(m.timestamp, str(m.id)) for m in by_key])
    return ordered[tenant_id]


def link_memories(ctx: WorkerContext, memory_ids: Sequence[uuid.UUID]) -> dict[str, Any]:
    """Links of new memories to older ones: shared entities, close neighbours of the same
    task (vector score >= 0.75), and causal edges proposed by the LLM port (offline rules
    when it answers badly). One candidate read per tenant and batch; a memory is marked
    ``linked_at`` in the transaction that writes its links, so a replay skips it."""
    with ctx.pool.connection() as conn:
        rows = fetch_rows(conn, memory_ids)
        linked = {
            r[0]
            for r in conn.execute(
                "SELECT id FROM memories WHERE id = ANY(%s) AND linked_at IS NOT NULL",
                (list(rows),),
            ).fetchall()
        }
    todo = [
        rows[i]
        for i in dict.fromkeys(memory_ids)
        if i in rows and i not in linked and rows[i]["status"] == "stored" and rows[i]["level"] == 0
    ]
    stats: dict[str, Any] = {"linked": 0, "links": 0}
    if not todo:
        return stats
    # Similarity links need vectors of the current model: none while a re-embed run is
    # building them (entity and causal links do not need them).
    collection = dense_search_target(ctx, EPISODIC)
    vectors = ctx.embedder.embed([row["content"] for row in todo])
    recent: dict[str, list[EpisodicMemory]] = {}
    ordered: dict[str, OrderedCandidates] = {}
    for row, vector in zip(todo, vectors, strict=True):
        memory = row_to_memory(row)
        if memory.tenant_id not in recent:
            with ctx.pool.connection() as conn:
                recent[memory.tenant_id] = recent_memories(
                    conn, memory.tenant_id, limit=LINK_CANDIDATES
                )
        # Only older memories: an undirected link is stored once, from the new one.
        by_key, keys = _ordered(ordered, recent, memory.tenant_id)
        older = by_key[: bisect.bisect_left(keys, (memory.timestamp, str(memory.id)))]
        hits = (
            ctx.vectors.search(
                collection,
                vector,
                tenant_id=memory.tenant_id,
                task_id=memory.task_id,
                limit=LINK_NEIGHBOURS,
            )
            if collection is not None
            else []
        )
        with ctx.pool.connection() as conn:
            hit_rows = fetch_rows(conn, [h.id for h in hits if h.id != memory.id])
        neighbours = [
            Neighbour(memory=row_to_memory(hit_rows[h.id]), score=h.score)
            for h in hits
            if h.id in hit_rows and hit_rows[h.id]["status"] == "stored"
        ]
        links = entity_links(memory, older, entities=_entities_of([memory, *older]))
        links += similar_links(memory, neighbours)
        pool = {c.id: c for c in older}
        pool.update({n.memory.id: n.memory for n in neighbours})
        candidates = [c for c in pool.values() if c.id != memory.id]
        if candidates:
            llm = ctx.llm
            batch, _, _ = ask_with_fallback(
                lambda: llm.propose_causal(memory, candidates),  # noqa: B023
                lambda: propose_causal_offline(memory, candidates),  # noqa: B023
                llm.name,
            )
            links += causal_links(memory, candidates, batch)
        unique = {(link.src_id, link.dst_id, link.kind): link for link in reversed(links)}
        with ctx.pool.connection() as conn:
            stats["links"] += insert_links(conn, memory.tenant_id, memory.id, list(unique.values()))
        stats["linked"] += 1
    return stats


def relay_cognition(ctx: WorkerContext) -> dict[str, Any]:
    """The safety net of the embed queue: overdue embed/unindex jobs, unlinked memories."""
    grace_s = ctx.settings.relay_interval_s / 2
    with ctx.pool.connection() as conn:
        due = count_due_jobs(conn, kind=EMBED_JOB, grace_s=grace_s)
        due += count_due_jobs(conn, kind=UNINDEX_JOB, grace_s=grace_s)
        # A stored memory waits a few relay periods for the write hook's link task first.
        unlinked = unlinked_ids(
            conn,
            older_than_s=ctx.settings.relay_interval_s * 4,
            limit=ctx.settings.sweep_batch_size,
        )
    if due:
        _publish(EMBED_DRAIN_TASK, CeleryQueue.EMBED)
    if unlinked:
        _publish(LINK_TASK, CeleryQueue.EMBED, memory_ids=[str(i) for i in unlinked])
    return {"due_jobs": due, "unlinked": len(unlinked)}


# -- traversal -------------------------------------------------------------------------------


class PgLinks:
    """``LinkStore`` over ``memory_links``: one indexed query per hop, inside one tenant."""

    def __init__(self, pool: ConnectionPool, tenant_id: str) -> None:
        self._pool = pool
        self._tenant_id = tenant_id

    def links_touching(self, ids: Sequence[uuid.UUID]) -> list[MemoryLink]:
        with self._pool.connection() as conn:
            return links_touching(conn, self._tenant_id, ids)


class AffectedMemory(BaseModel):
    model_config = ConfigDict(frozen=True)

    memory_id: uuid.UUID
    content: str
    hops: int
    score: float
    path: tuple[uuid.UUID, ...]


class Traversal(BaseModel):
    model_config = ConfigDict(frozen=True)

    query: str
    starts: tuple[AffectedMemory, ...]
    affected: tuple[AffectedMemory, ...]


def affected_by(
    pool: ConnectionPool, tenant_id: str, query: str, *, max_hops: int = 3
) -> Traversal:
    """ "What does the delay of the auth module affect?": the memories the question is about,
    then what their causal links lead to, hop by hop (one query per hop)."""
    with pool.connection() as conn:
        memories: list[EpisodicMemory] = recent_memories(
            conn, tenant_id, limit=TRAVERSAL_CANDIDATES
        )
    roots, reached = affected_by_pipeline(
        query, memories, PgLinks(pool, tenant_id), max_hops=max_hops
    )
    with pool.connection() as conn:
        rows = fetch_rows(conn, [r.memory_id for r in reached])
    return Traversal(
        query=query,
        starts=tuple(
            AffectedMemory(memory_id=m.id, content=m.content, hops=0, score=1.0, path=(m.id,))
            for m in roots
        ),
        affected=tuple(
            AffectedMemory(
                memory_id=r.memory_id,
                content=rows[r.memory_id]["content"],
                hops=r.hops,
                score=round(r.score, 4),
                path=r.path,
            )
            for r in reached
            if r.memory_id in rows and rows[r.memory_id]["status"] == "stored"
        ),
    )


def after_write_batch(ctx: WorkerContext, *, tenants: Sequence[str], caught_up: bool) -> None:
    """The write drain's hook, after COMMIT: tenants written to are active now (the decay
    sweep waits for them to go idle), and once the write backlog is drained the unlinked
    memories get their links. Linking costs milliseconds a memory on the owner's single
    slot; deferring it while writes wait keeps ingest at the drain's speed. Best effort: the
    relay links what a lost message left unlinked."""
    try:
        mark_activity(ctx.redis, sorted(set(tenants)))
    except redis.RedisError:
        log.warning("tenant activity not marked: Redis unavailable")
    if caught_up and tenants:
        _publish(LINK_TASK, CeleryQueue.EMBED, memory_ids=None)


# Memories linked per message: ~4 ms each in process, so a batch holds the store owner's
# single slot for about 0.1 s and a waiting write or context() is served soon after.
LINK_BATCH = 32


def link_unlinked(ctx: WorkerContext) -> dict[str, Any]:
    """Link the oldest stored memories not linked yet, one small batch; ``more`` says go on.

    Linking yields to writes: while write jobs are due it does nothing, and the drain that
    empties the backlog publishes it again (the relay is the safety net)."""
    with ctx.pool.connection() as conn:
        if count_due_jobs(conn, kind=WRITE_JOB, grace_s=0.0):
            return {"linked": 0, "links": 0, "deferred": True, "more": False}
        ids = unlinked_ids(conn, older_than_s=0.0, limit=LINK_BATCH)
    stats = link_memories(ctx, ids)
    stats["more"] = len(ids) == LINK_BATCH
    return stats
