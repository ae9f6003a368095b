"""Re-embedding after a model change, and where writes go meanwhile."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from psycopg import Connection
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from workers.clients import Clients
from workers.db.runs import Run, get_run
from workers.index.points import (
    VERIFY_ROUNDS,
    chunks,
    embed_into,
    ids_with_status,
    index_ids,
    live_ids,
    maintenance_lock,
    upsert_rows,
)
from workers.index.targets import (
    KINDS,
    IndexBusy,
    IndexNotReady,
    IndexSpec,
    generation_version,
    index_spec,
    next_generation,
)
from workers.publish import publish_quietly
from workers.queues import IndexJob

log = logging.getLogger(__name__)


REEMBED_KIND = "reembed"
# Cursor of a re-embed run: ``embed:<last id>`` while rows are re-embedded in id order, then
# ``index`` (HNSW build of the new generation), ``verify`` (catch up, count, switch, drop),
# ``done``.
EMBED_PHASE = "embed"
INDEX_PHASE = "index"
VERIFY_PHASE = "verify"
DONE_PHASE = "done"


def _active_run(conn: Connection[Any], alias: str) -> Run | None:
    row = conn.execute(
        "SELECT run_id FROM cognition_runs WHERE kind = %s AND finished_at IS NULL "
        "AND stats->>'alias' = %s ORDER BY started_at DESC LIMIT 1",
        (REEMBED_KIND, alias),
    ).fetchone()
    return get_run(conn, row[0]) if row else None


def _latest_run(conn: Connection[Any], alias: str) -> tuple[Run, datetime, datetime | None] | None:
    row = conn.execute(
        "SELECT run_id, started_at, finished_at FROM cognition_runs WHERE kind = %s "
        "AND stats->>'alias' = %s ORDER BY started_at DESC LIMIT 1",
        (REEMBED_KIND, alias),
    ).fetchone()
    if row is None:
        return None
    run = get_run(conn, row[0])
    assert run is not None
    return run, row[1], row[2]


def _save_run(
    conn: Connection[Any], run: Run, *, cursor: str, stats: dict[str, Any], finished: bool
) -> bool:
    """Move the run on only from where this step started (a replay learns False)."""
    result = conn.execute(
        "UPDATE cognition_runs SET cursor = %s, stats = %s, "
        "finished_at = CASE WHEN %s THEN now() ELSE NULL END "
        "WHERE run_id = %s AND cursor IS NOT DISTINCT FROM %s AND finished_at IS NULL",
        (cursor, Jsonb(stats), finished, run.run_id, run.cursor),
    )
    return result.rowcount == 1


def _live_count(conn: Connection[Any], spec: IndexSpec) -> int:
    row = conn.execute(
        f"SELECT count(*) FROM {spec.table} WHERE status = ANY(%s)", (list(spec.live_statuses),)
    ).fetchone()
    return int(row[0]) if row else 0


def _drop_if_unaliased(ctx: Clients, spec: IndexSpec, name: str | None) -> bool:
    if not name or name == spec.alias or name == ctx.vectors.resolve(spec.alias):
        return False
    if name not in ctx.vectors.collections():
        return False
    ctx.vectors.drop_collection(name)
    return True


def _ensure_target(ctx: Clients, spec: IndexSpec, stats: dict[str, Any]) -> None:
    """The run's new generation exists (a crash between recording the run and creating it
    leaves a run without one)."""
    target = str(stats["target"])
    if target not in ctx.vectors.collections():
        ctx.vectors.create_collection(
            target, ctx.embedder.dim, spec.params, str(stats["to_version"])
        )


def start_reembed(ctx: Clients, kind: str) -> Run | None:
    """The re-embed run of ``kind`` towards the embedder's version, started if need be; None
    when the live generation already holds that version (or nothing is indexed).

    A run towards another version (the model changed again mid-run) is abandoned: its
    generation is dropped. Raises ``IndexBusy`` when another job holds the collection."""
    spec = index_spec(ctx.settings, kind)
    version = ctx.embedder.version
    with maintenance_lock(ctx, spec.alias):
        physical, live_version = generation_version(ctx, spec)
        if physical is None or live_version == version:
            return None
        with ctx.pool.connection() as conn:
            run = _active_run(conn, spec.alias)
        # Named before an abandoned run's generation goes: each run has a name of its own.
        target = next_generation(spec.alias, physical, ctx.vectors.collections())
        if run is not None:
            if run.stats.get("to_version") == version and run.stats.get("source") == physical:
                _ensure_target(ctx, spec, run.stats)
                return run
            _drop_if_unaliased(ctx, spec, run.stats.get("target"))
            stats = {**run.stats, "abandoned": f"the embedder is now {version}"}
            with ctx.pool.connection() as conn:
                _save_run(conn, run, cursor=DONE_PHASE, stats=stats, finished=True)
            log.warning("re-embed run %s of %s abandoned: %s", run.run_id, spec.alias, stats)
        run_id = uuid.uuid4()
        stats = {
            "alias": spec.alias,
            "kind": spec.kind,
            "source": physical,
            "target": target,
            "from_version": live_version,
            "to_version": version,
            "dim": ctx.embedder.dim,
            "done": 0,
            "batches": 0,
            "total": 0,
        }
        with ctx.pool.connection() as conn:
            stats["total"] = _live_count(conn, spec)
            conn.execute(
                "INSERT INTO cognition_runs (run_id, kind, tenant_id, clock, cursor, stats) "
                "VALUES (%s, %s, NULL, now(), %s, %s)",
                (run_id, REEMBED_KIND, f"{EMBED_PHASE}:", Jsonb(stats)),
            )
            run = get_run(conn, run_id)
        assert run is not None
        _ensure_target(ctx, spec, stats)
    log.info(
        "re-embed of %s started: %s (%s) -> %s (%s), %s live rows",
        spec.alias,
        physical,
        live_version,
        target,
        version,
        stats["total"],
    )
    return run


def publish_reembed_step(ctx: Clients, kind: str, run_id: uuid.UUID, cursor: str) -> None:
    """Best effort: a lost step is published again by the next index check."""
    publish_quietly(
        IndexJob.REEMBED_STEP.task(ctx.settings), kind=kind, run_id=str(run_id), cursor=cursor
    )


def write_target(ctx: Clients, kind: str) -> str:
    """Where vectors made by the current embedder go: the alias when its generation holds
    that version (created as generation 1 if missing); during a re-embed run towards it, the
    generation being built (never the old one). Starts the run when this write is the first
    to notice the change. Raises ``IndexNotReady`` when no such generation exists yet."""
    spec = index_spec(ctx.settings, kind)
    version = ctx.embedder.version
    physical, live_version = generation_version(ctx, spec)
    if physical is None or live_version == version:
        ctx.vectors.ensure_collection(spec.alias, ctx.embedder.dim, spec.params, version)
        return spec.alias
    with ctx.pool.connection() as conn:
        run = _active_run(conn, spec.alias)
    if run is None or run.stats.get("to_version") != version:
        try:
            run = start_reembed(ctx, kind)
        except IndexBusy as exc:
            raise IndexNotReady(f"{spec.alias}: {exc}") from exc
        if run is None:  # switched meanwhile: the alias holds this version now
            return write_target(ctx, kind)
        publish_reembed_step(ctx, kind, run.run_id, run.cursor or "")
    target = str(run.stats["target"])
    if target not in ctx.vectors.collections():
        raise IndexNotReady(f"{target}, the new generation of {spec.alias}, is not created yet")
    return target


def check_reembed(ctx: Clients, kind: str) -> dict[str, Any] | None:
    """The index check's part: start or nudge the re-embed run when one is due."""
    spec = index_spec(ctx.settings, kind)
    physical, version = generation_version(ctx, spec)
    if physical is None or version == ctx.embedder.version:
        return None
    info: dict[str, Any] = {"collection": spec.alias, "physical": physical, "version": version}
    try:
        run = start_reembed(ctx, kind)
    except IndexBusy as exc:  # a step of the run (or another job) holds it: it goes on
        info["reembed"] = {"skipped": str(exc)}
        return info
    if run is not None:
        # Publishing the run's current step again is harmless (a step whose cursor is not
        # the run's does nothing) and restarts a run whose message was lost.
        publish_reembed_step(ctx, kind, run.run_id, run.cursor or "")
        info["reembed"] = _progress(run)
    return info


def _progress(
    run: Run, started: datetime | None = None, finished: datetime | None = None
) -> dict[str, Any]:
    stats = run.stats
    total = int(stats.get("total", 0))
    done = int(stats.get("done", 0))
    phase = (run.cursor or "").partition(":")[0] or EMBED_PHASE
    return {
        "run_id": str(run.run_id),
        "phase": DONE_PHASE if run.finished else phase,
        "done": done,
        "total": total,
        "percent": (
            round(100.0 * min(done, total) / total, 1) if total and not run.finished else 100.0
        ),
        "source": stats.get("source"),
        "target": stats.get("target"),
        "from_version": stats.get("from_version"),
        "to_version": stats.get("to_version"),
        "finished": run.finished,
        "abandoned": stats.get("abandoned"),
        "started_at": started.isoformat() if started else None,
        "finished_at": finished.isoformat() if finished else None,
        "stats": dict(stats),
    }


def reembed_status(ctx: Clients, kinds: Sequence[str] = KINDS) -> dict[str, Any]:
    """Per collection: the live generation and its embedding version, the embedder's, and
    the latest re-embed run's progress (``memharness reembed --status``). Reads only."""
    out: dict[str, Any] = {}
    for kind in kinds:
        spec = index_spec(ctx.settings, kind)
        physical, version = generation_version(ctx, spec, record=False)
        with ctx.pool.connection() as conn:
            latest = _latest_run(conn, spec.alias)
        current = physical is None or version == ctx.embedder.version
        running = latest is not None and not latest[0].finished
        out[kind] = {
            "collection": spec.alias,
            "physical": physical,
            "version": version,
            "embedder_version": ctx.embedder.version,
            "state": "running" if running else ("current" if current else "due"),
            "run": _progress(*latest) if latest else None,
        }
    return out


def _embed_batches(
    ctx: Clients,
    spec: IndexSpec,
    target: str,
    after: uuid.UUID | None,
    deadline: float,
    stats: dict[str, Any],
) -> str:
    """Re-embed live rows in id order after ``after`` until the deadline; the next cursor."""
    batch = ctx.settings.index_batch_size
    while True:
        with ctx.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            cur.execute(
                f"SELECT * FROM {spec.table} WHERE status = ANY(%s) "
                "AND (%s::uuid IS NULL OR id > %s::uuid) ORDER BY id LIMIT %s",
                (list(spec.live_statuses), after, after, batch),
            )
            rows = list(cur.fetchall())
        if not rows:
            return INDEX_PHASE
        upsert_rows(ctx, spec, target, rows)
        after = rows[-1]["id"]
        stats["done"] = int(stats.get("done", 0)) + len(rows)
        stats["batches"] = int(stats.get("batches", 0)) + 1
        total = int(stats.get("total", 0))
        log.info(
            "re-embed %s -> %s: %s/%s live rows (%.0f%%)",
            spec.alias,
            target,
            stats["done"],
            total,
            100.0 * min(stats["done"], total) / total if total else 100.0,
        )
        if len(rows) < batch:
            return INDEX_PHASE
        if time.monotonic() >= deadline:
            return f"{EMBED_PHASE}:{after}"


def _verify_and_switch(ctx: Clients, spec: IndexSpec, stats: dict[str, Any]) -> bool:
    """Bring the new generation level with PostgreSQL, verify its count, switch the alias,
    drop the old generation. False when it did not verify (the next step tries again)."""
    vectors = ctx.vectors
    page = ctx.settings.index_batch_size
    target = str(stats["target"])
    for round_ in range(1, VERIFY_ROUNDS + 1):
        target_ids = index_ids(vectors, target, page)
        with ctx.pool.connection() as conn:
            live = ids_with_status(conn, spec, spec.live_statuses)
            inflight = ids_with_status(conn, spec, spec.inflight_statuses)
        stats["caught_up"] = int(stats.get("caught_up", 0)) + embed_into(
            ctx, spec, target, live - target_ids
        )
        extra = target_ids - live - inflight
        for batch in chunks(extra, page):
            vectors.delete(target, batch)
        stats["orphans"] = int(stats.get("orphans", 0)) + len(extra)
        in_target_inflight = len(inflight & index_ids(vectors, target, page))
        stats["verified_points"] = vectors.count(target) - in_target_inflight
        stats["total"] = len(live)
        stats["verify_rounds"] = int(stats.get("verify_rounds", 0)) + 1
        if stats["verified_points"] == len(live):
            break
        log.warning(
            "re-embed of %s: %s has %s live points, PostgreSQL %s (round %s)",
            spec.alias,
            target,
            stats["verified_points"],
            len(live),
            round_,
        )
    else:
        return False
    previous = vectors.switch_alias(spec.alias, target)
    # A worker still on the old model may have stored a row into the old generation between
    # the last round and the switch: embed what is still missing, now with the new model.
    late = live_ids(ctx, spec) - index_ids(vectors, target, page)
    stats["caught_up"] = int(stats.get("caught_up", 0)) + embed_into(ctx, spec, target, late)
    for name in {previous, stats.get("source")}:
        if _drop_if_unaliased(ctx, spec, name):
            stats.setdefault("dropped", []).append(name)
    stats["switched_at"] = datetime.now(UTC).isoformat()
    return True


def reembed_step(ctx: Clients, kind: str, run_id: uuid.UUID, cursor: str) -> dict[str, Any]:
    """One step of a re-embed run, from ``cursor``: a step whose cursor is no longer the
    run's (a replay, or a duplicate from the index check) does nothing and does not requeue.
    Returns the progress, with ``requeue`` and the next ``cursor``."""
    spec = index_spec(ctx.settings, kind)
    started = time.monotonic()
    try:
        with maintenance_lock(ctx, spec.alias):
            with ctx.pool.connection() as conn:
                run = get_run(conn, run_id)
            if run is None or run.finished or run.cursor != cursor:
                return {
                    "run_id": str(run_id),
                    "cursor": cursor,
                    "replayed": True,
                    "finished": run is not None and run.finished,
                    "requeue": False,
                }
            if run.stats.get("to_version") != ctx.embedder.version:
                # A worker still on another model: leave the run to one on the new one.
                log.warning(
                    "re-embed run %s is towards %s, this worker embeds %s; step left",
                    run_id,
                    run.stats.get("to_version"),
                    ctx.embedder.version,
                )
                return {
                    "run_id": str(run_id),
                    "cursor": cursor,
                    "skipped": "version",
                    "finished": False,
                    "requeue": False,
                }
            stats = dict(run.stats)
            _ensure_target(ctx, spec, stats)
            target = str(stats["target"])
            deadline = started + ctx.settings.sweep_deadline_s
            phase, _, last = cursor.partition(":")
            finished = False
            if phase == EMBED_PHASE:
                with ctx.pool.connection() as conn:
                    stats["total"] = _live_count(conn, spec)
                after = uuid.UUID(last) if last else None
                new_cursor = _embed_batches(ctx, spec, target, after, deadline, stats)
            elif phase == INDEX_PHASE:
                mark = time.monotonic()
                ctx.vectors.build_index(target)
                stats["index_s"] = round(time.monotonic() - mark, 3)
                new_cursor = VERIFY_PHASE
            elif phase == VERIFY_PHASE:
                finished = _verify_and_switch(ctx, spec, stats)
                new_cursor = DONE_PHASE
                if not finished:
                    # Try again next step; a cursor of its own, so replays stay no-ops.
                    stats["verify_failures"] = int(stats.get("verify_failures", 0)) + 1
                    new_cursor = f"{VERIFY_PHASE}:{stats['verify_failures']}"
            else:
                raise ValueError(f"re-embed run {run_id}: unknown cursor {cursor!r}")
            with ctx.pool.connection() as conn:
                advanced = _save_run(conn, run, cursor=new_cursor, stats=stats, finished=finished)
                run = get_run(conn, run_id)
    except IndexBusy as exc:  # another job holds the collection; the next check nudges us
        return {
            "run_id": str(run_id),
            "cursor": cursor,
            "skipped": str(exc),
            "finished": False,
            "requeue": False,
        }
    assert run is not None
    if finished:
        log.info(
            "re-embedded %s: %s -> %s (%s), %s points verified",
            spec.alias,
            stats.get("source"),
            target,
            stats.get("to_version"),
            stats.get("verified_points"),
        )
    progress = _progress(run)
    progress.update(cursor=new_cursor, requeue=advanced and not finished)
    return progress
