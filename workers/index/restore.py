"""Restoring a collection that is short of PostgreSQL, in steps, while the owner serves.

A collection lost behind the system's back (its directory deleted, a volume restored from an
old snapshot) is found short by the owner's measurement (``workers.index.completeness``) at
start or at an index check, and restored here: PostgreSQL's live ids are walked in id order,
the ones the collection has no point for are re-embedded from their rows and upserted into
the live collection itself. Reads keep going through the alias the whole time (the owner's
read slot runs beside this), and each restored point is searchable at once, so answers come
back as the restore goes; until the collection measures whole they say ``degraded`` and
carry PostgreSQL's keyword hits besides.

Each step re-embeds pages of 256 rows until ``index_restore_step_s`` has passed (the page in
hand is finished: ~3 s with the e5 embedder, milliseconds with hashing) and requeues itself:
on the owner's single Celery slot the write path's drains run between steps, so writes are
indexed as ever while a large collection is restored. One chain per collection at a time (a
Redis claim, renewed by each step); a chain that died with its owner is started again by the
next start or index check once the claim expired. A step is idempotent: it embeds only what
the collection lacks, so a replayed message writes nothing twice.

The last step measures the collection again; if the counts still differ (a point for a row
that is gone hides a missing one) the reconciler settles it exactly.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from typing import Any

from workers.clients import Clients
from workers.index.completeness import IndexState, measure_index
from workers.index.maintenance import reconcile_index
from workers.index.points import fetch_live_rows, maintenance_lock, upsert_rows
from workers.index.targets import (
    EMBED_CHUNK,
    KINDS,
    EmbeddingVersionMismatch,
    IndexBusy,
    IndexSpec,
    index_spec,
    require_current,
)
from workers.publish import publish
from workers.queues import IndexJob

log = logging.getLogger(__name__)

CLAIM_KEY = "memharness:index:restore:{alias}"
# A step renews the claim for this long: far more than one step lasts (index_restore_step_s
# plus a drain between steps), so only a chain whose owner died lets it lapse.
CLAIM_TTL_S = 300
# A step that found the collection under another maintenance job (a rebuild, the nightly
# reconciler) tries again after this; those finish in seconds to minutes.
BUSY_RETRY_S = 5.0

PAGE_SQL = "SELECT id FROM {table} WHERE status = ANY(%s) AND id > %s::uuid ORDER BY id LIMIT %s"
# The smallest uuid: a walk starts below every id.
FIRST_CURSOR = str(uuid.UUID(int=0))


def claim_restore(ctx: Clients, alias: str, *, force: bool = False) -> bool:
    """Whether this caller may start a restore chain of ``alias`` (none is running, or
    ``force``: the caller knows any earlier chain died)."""
    key = CLAIM_KEY.format(alias=alias)
    return bool(ctx.redis.set(key, "1", nx=not force, ex=CLAIM_TTL_S))


def release_restore(ctx: Clients, alias: str) -> None:
    ctx.redis.delete(CLAIM_KEY.format(alias=alias))


def start_restore(ctx: Clients, state: IndexState, *, force: bool = False) -> bool:
    """Publish the first step of ``state``'s collection restore, unless a chain already runs
    (``force``: start one anyway). Returns whether a chain was started."""
    if not state.degraded or not claim_restore(ctx, state.collection, force=force):
        return False
    log.warning(
        "index %s misses %s of %s live rows; restoring from PostgreSQL",
        state.collection,
        state.missing,
        state.live,
    )
    try:
        publish(IndexJob.RESTORE.task(ctx.settings), kind=state.kind, cursor=FIRST_CURSOR)
    except Exception:
        release_restore(ctx, state.collection)  # the next check starts it again
        raise
    return True


def restore_missing(
    ctx: Clients, kinds: Sequence[str] = KINDS, *, force: bool = False
) -> dict[str, Any]:
    """Measure each collection and start the restore of those found short: the owner's
    start (``force``: an embedded store's owner just started, so a claim left behind is a
    chain that died with the previous one; a step of it still queued only finds its pages
    done) and every index check. Returns each kind's figures."""
    out: dict[str, Any] = {}
    for kind in kinds:
        state = measure_index(ctx, kind)
        started = start_restore(ctx, state, force=force)
        out[kind] = {**state.as_dict(), "restore_started": started}
    return out


def _page(ctx: Clients, spec: IndexSpec, cursor: str, limit: int) -> list[uuid.UUID]:
    with ctx.pool.connection() as conn:
        rows = conn.execute(
            PAGE_SQL.format(table=spec.table),
            (list(spec.live_statuses), cursor, limit),
        ).fetchall()
    return [row[0] for row in rows]


def restore_step(ctx: Clients, kind: str, cursor: str) -> dict[str, Any]:
    """Re-embed the live rows after ``cursor`` that the collection lacks, page by page until
    ``index_restore_step_s`` has passed. Returns counts, timings, the next cursor, ``done``."""
    spec = index_spec(ctx.settings, kind)
    started = time.monotonic()
    deadline = started + ctx.settings.index_restore_step_s
    scanned = embedded = 0
    done = False
    with maintenance_lock(ctx, spec.alias):
        require_current(ctx, spec)
        ctx.vectors.ensure_collection(
            spec.alias, ctx.embedder.dim, spec.params, ctx.embedder.version
        )
        while True:
            ids = _page(ctx, spec, cursor, EMBED_CHUNK)
            if not ids:
                done = True
                break
            present = {point.id for point in ctx.vectors.retrieve(spec.alias, ids)}
            absent = [key for key in ids if key not in present]
            if absent:
                with ctx.pool.connection() as conn:
                    rows = fetch_live_rows(conn, spec, absent)
                # A row that stopped being live since the page was read is simply not
                # fetched; one that became live meanwhile was indexed by its own write.
                upsert_rows(ctx, spec, spec.alias, rows)
                embedded += len(rows)
            scanned += len(ids)
            cursor = str(ids[-1])
            if len(ids) < EMBED_CHUNK:
                done = True
                break
            if time.monotonic() >= deadline:
                break
    state = measure_index(ctx, kind, restoring=not done)
    reconciled = None
    if done and state.degraded:
        reconciled = reconcile_index(ctx, kind).as_dict()
        state = measure_index(ctx, kind)
    seconds = time.monotonic() - started
    log.info(
        "restore of %s: %s rows scanned, %s re-embedded in %.2fs; %s of %s live rows missing%s",
        spec.alias,
        scanned,
        embedded,
        seconds,
        state.missing,
        state.live,
        "" if not done else " (done)",
    )
    out: dict[str, Any] = {
        "collection": spec.alias,
        "scanned": scanned,
        "embedded": embedded,
        "seconds": round(seconds, 3),
        "cursor": cursor,
        "done": done,
        "missing": state.missing,
        "live": state.live,
    }
    if reconciled is not None:
        out["reconciled_missing"] = reconciled["missing"]
        out["reconciled_orphans"] = reconciled["orphans"]
    return out


def run_restore_step(ctx: Clients, kind: str, cursor: str) -> dict[str, Any]:
    """One step of a chain: run it, then requeue the next one (or end the chain)."""
    spec = index_spec(ctx.settings, kind)
    task = IndexJob.RESTORE.task(ctx.settings)
    try:
        outcome = restore_step(ctx, kind, cursor)
    except IndexBusy:
        # A rebuild or the reconciler has the collection: it makes it whole too, so the
        # chain only waits for it (and measures again when it resumes).
        ctx.redis.expire(CLAIM_KEY.format(alias=spec.alias), CLAIM_TTL_S)
        publish(task, countdown=BUSY_RETRY_S, kind=kind, cursor=cursor)
        return {"collection": spec.alias, "busy": True, "cursor": cursor}
    except EmbeddingVersionMismatch:
        # The live generation holds another model's vectors: the re-embed run replaces
        # it from PostgreSQL whole, and dense recall sits out until its switch.
        release_restore(ctx, spec.alias)
        return {"collection": spec.alias, "skipped": "embedding version", "done": True}
    except BaseException:
        release_restore(ctx, spec.alias)  # the next start or check begins again
        raise
    if outcome["done"]:
        release_restore(ctx, spec.alias)
    else:
        ctx.redis.expire(CLAIM_KEY.format(alias=spec.alias), CLAIM_TTL_S)
        publish(task, kind=kind, cursor=str(outcome["cursor"]))
    return outcome
