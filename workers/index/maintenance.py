"""Index maintenance: the vector index made and kept equal to PostgreSQL.

PostgreSQL is the truth; the vector index is derived from it and can always be rebuilt.
Three jobs keep it healthy:

- **rebuild** (``check_indexes`` applies the rule: more than ``index_rebuild_deleted_ratio``
  of a collection deleted since it was built): build the next generation beside the live
  one (vectors copied from it, anything missing re-embedded from PostgreSQL), build its HNSW
  graph, catch up with the writes that landed meanwhile, verify its count against
  PostgreSQL, switch the alias in one call, drop the old generation. Readers go through the
  alias the whole time, so they read the complete old generation until the switch and the
  complete new one after it: a query during a rebuild never fails and never comes back
  empty. A build that does not verify is dropped and the alias is left alone.
- **compaction** (weekly): the engine's optimizer vacuums deleted points and merges segments.
- **reconciliation** (nightly): points missing from the index are re-embedded from their
  rows, points whose rows are gone (or no longer live) are deleted.

Points whose row is still ``pending`` are in flight: the write path upserts the vector just
before it commits the row as stored, so those are never treated as orphans.

In embedded mode these run in the store's owner (tasks on the ``embed`` queue, see
``workers.index.tasks``); with a Qdrant server, on any maintenance worker, one at a time per
collection (a Redis lock).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from workers.clients import Clients
from workers.index.points import (
    VERIFY_ROUNDS,
    chunks,
    copy_into,
    embed_into,
    ids_with_status,
    index_ids,
    live_ids,
    maintenance_lock,
)
from workers.index.reembed import check_reembed
from workers.index.targets import (
    KINDS,
    EmbeddingVersionMismatch,
    IndexBusy,
    IndexSpec,
    RebuildFailed,
    index_spec,
    next_generation,
    require_current,
)

log = logging.getLogger(__name__)


# -- the jobs ----------------------------------------------------------------------------------


@dataclass
class ReconcileReport:
    collection: str
    live: int = 0
    indexed: int = 0
    missing: int = 0
    embedded: int = 0
    orphans: int = 0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def reconcile_index(ctx: Clients, kind: str) -> ReconcileReport:
    """Make the index equal to PostgreSQL: embed what is missing, delete what is orphaned."""
    spec = index_spec(ctx.settings, kind)
    with maintenance_lock(ctx, spec.alias):
        require_current(ctx, spec)
        ctx.vectors.ensure_collection(
            spec.alias, ctx.embedder.dim, spec.params, ctx.embedder.version
        )
        indexed = index_ids(ctx.vectors, spec.alias, ctx.settings.index_batch_size)
        with ctx.pool.connection() as conn:
            live = ids_with_status(conn, spec, spec.live_statuses)
            inflight = ids_with_status(conn, spec, spec.inflight_statuses)
        report = ReconcileReport(collection=spec.alias, live=len(live), indexed=len(indexed))
        missing = live - indexed
        orphans = indexed - live - inflight
        report.missing = len(missing)
        report.embedded = embed_into(ctx, spec, spec.alias, missing)
        for batch in chunks(orphans, ctx.settings.index_batch_size):
            ctx.vectors.delete(spec.alias, batch)
        report.orphans = len(orphans)
    if report.missing or report.orphans:
        log.info(
            "reconciled %s: %s missing re-embedded, %s orphans deleted",
            spec.alias,
            report.embedded,
            report.orphans,
        )
    return report


@dataclass
class RebuildReport:
    alias: str
    old: str | None = None
    new: str | None = None
    copied: int = 0
    embedded: int = 0
    caught_up: int = 0
    verified_points: int = 0
    rounds: int = 0
    seconds: float = 0.0
    phases_s: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _catch_up(ctx: Clients, spec: IndexSpec, old: str, new: str) -> tuple[int, int, set[uuid.UUID]]:
    """Bring ``new`` level with PostgreSQL (vectors from ``old`` where it has them).

    Returns (points written, PostgreSQL's live count, the in-flight ids)."""
    page = ctx.settings.index_batch_size
    old_ids = index_ids(ctx.vectors, old, page)
    new_ids = index_ids(ctx.vectors, new, page)
    with ctx.pool.connection() as conn:
        live = ids_with_status(conn, spec, spec.live_statuses)
        inflight = ids_with_status(conn, spec, spec.inflight_statuses)
    wanted = live | (inflight & old_ids)
    written = copy_into(ctx, old, new, (wanted & old_ids) - new_ids)
    written += embed_into(ctx, spec, new, live - old_ids - new_ids)
    extra = new_ids - wanted
    for batch in chunks(extra, page):
        ctx.vectors.delete(new, batch)
    return written + len(extra), len(live), inflight


def rebuild_index(ctx: Clients, kind: str) -> RebuildReport:
    """Build the next generation, verify it against PostgreSQL, switch the alias, drop the
    old one. Readers keep reading the old generation through the alias until the switch."""
    spec = index_spec(ctx.settings, kind)
    started = time.monotonic()
    report = RebuildReport(alias=spec.alias)
    vectors = ctx.vectors
    with maintenance_lock(ctx, spec.alias):
        require_current(ctx, spec)
        old = vectors.resolve(spec.alias)
        if old is None:
            vectors.ensure_collection(
                spec.alias, ctx.embedder.dim, spec.params, ctx.embedder.version
            )
            report.new = vectors.resolve(spec.alias)
            report.embedded = embed_into(ctx, spec, spec.alias, live_ids(ctx, spec))
            report.seconds = time.monotonic() - started
            return report
        report.old = old
        new = next_generation(spec.alias, old, vectors.collections())
        report.new = new
        vectors.create_collection(new, ctx.embedder.dim, spec.params, ctx.embedder.version)
        try:
            mark = time.monotonic()
            written, _, _ = _catch_up(ctx, spec, old, new)
            report.copied = written
            report.phases_s["copy"] = time.monotonic() - mark
            mark = time.monotonic()
            # Off the serving path: readers use the old generation until the switch, and
            # the graph is built where it stalls none of this process's other threads.
            vectors.build_index(new)
            report.phases_s["index"] = time.monotonic() - mark
            mark = time.monotonic()
            for round_ in range(1, VERIFY_ROUNDS + 1):
                report.rounds = round_
                written, live_count, inflight = _catch_up(ctx, spec, old, new)
                report.caught_up += written
                in_new_inflight = len(
                    inflight & index_ids(vectors, new, ctx.settings.index_batch_size)
                )
                report.verified_points = vectors.count(new) - in_new_inflight
                if report.verified_points == live_count:
                    break
                log.warning(
                    "rebuild of %s: %s has %s live points, PostgreSQL %s; catching up again",
                    spec.alias,
                    new,
                    report.verified_points,
                    live_count,
                )
            else:
                raise RebuildFailed(
                    f"{new} holds {report.verified_points} live points after "
                    f"{VERIFY_ROUNDS} rounds; PostgreSQL has {live_count}"
                )
            report.phases_s["verify"] = time.monotonic() - mark
        except BaseException:
            vectors.drop_collection(new)
            raise
        previous = vectors.switch_alias(spec.alias, new)
        # Writes that reached the old generation between the last check and the switch.
        late = index_ids(vectors, old, ctx.settings.index_batch_size) - index_ids(
            vectors, new, ctx.settings.index_batch_size
        )
        report.caught_up += copy_into(ctx, old, new, late)
        if previous is not None and previous != spec.alias:
            vectors.drop_collection(previous)
    report.seconds = time.monotonic() - started
    log.info(
        "rebuilt %s: %s -> %s, %s points verified in %.1fs",
        spec.alias,
        report.old,
        report.new,
        report.verified_points,
        report.seconds,
    )
    return report


def needs_rebuild(ctx: Clients, kind: str) -> tuple[bool, dict[str, Any]]:
    spec = index_spec(ctx.settings, kind)
    if ctx.vectors.resolve(spec.alias) is None:
        return False, {"collection": spec.alias, "exists": False}
    stats = ctx.vectors.stats(spec.alias)
    due = stats.deleted_ratio > ctx.settings.index_rebuild_deleted_ratio
    return due, {
        "collection": spec.alias,
        "physical": stats.name,
        "points": stats.points,
        "deleted": stats.deleted,
        "deleted_ratio": round(stats.deleted_ratio, 4),
    }


def check_indexes(ctx: Clients, kinds: Sequence[str] = KINDS) -> dict[str, Any]:
    """Re-embed collections of another embedding version (start or nudge the run); apply
    the rebuild rule to the others and rebuild those past it."""
    out: dict[str, Any] = {}
    for kind in kinds:
        reembed = check_reembed(ctx, kind)
        if reembed is not None:
            out[kind] = reembed
            continue
        due, info = needs_rebuild(ctx, kind)
        if due:
            try:
                info["rebuild"] = rebuild_index(ctx, kind).as_dict()
            except IndexBusy as exc:  # another job has it; the next check comes soon
                info["rebuild"] = {"skipped": str(exc)}
        elif info.get("exists", True) and ctx.vectors.optimize_would_stall(info["collection"]):
            # The new points' graph, built in place, would hold every thread of the store's
            # owner (its reads too) for as long as it takes: a new generation is built
            # off the serving path instead.
            try:
                info["rebuild"] = rebuild_index(ctx, kind).as_dict()
            except IndexBusy as exc:
                info["rebuild"] = {"skipped": str(exc)}
        elif info.get("exists", True):
            # qdrant-edge has no background optimizer: a segment that outgrew the indexing
            # threshold gets its HNSW graph only when someone runs the optimizers. Doing it
            # here keeps search on graphs as the store grows; with nothing to do it returns
            # at once, and on a server it only asks the server to re-plan.
            started = time.monotonic()
            ctx.vectors.optimize(info["collection"])
            info["optimize_s"] = round(time.monotonic() - started, 3)
        out[kind] = info
    return out


def compact_indexes(ctx: Clients, kinds: Sequence[str] = KINDS) -> dict[str, Any]:
    """Weekly compaction: the engine vacuums deleted points and merges segments."""
    out: dict[str, Any] = {}
    for kind in kinds:
        spec = index_spec(ctx.settings, kind)
        if ctx.vectors.resolve(spec.alias) is None:
            continue
        rebuilt = None
        try:
            if ctx.vectors.optimize_would_stall(spec.alias):
                # Built in place it would stall the owner's reads: a new generation instead
                # (copied from the live points only, so it is compact as well).
                before = ctx.vectors.stats(spec.alias)
                started = time.monotonic()
                rebuilt = rebuild_index(ctx, kind).as_dict()
                after = ctx.vectors.stats(spec.alias)
            else:
                with maintenance_lock(ctx, spec.alias):
                    before = ctx.vectors.stats(spec.alias)
                    started = time.monotonic()
                    ctx.vectors.optimize(spec.alias)
                    after = ctx.vectors.stats(spec.alias)
        except IndexBusy as exc:
            out[kind] = {"collection": spec.alias, "skipped": str(exc)}
            continue
        out[kind] = {
            "collection": spec.alias,
            "segments_before": before.segments,
            "segments_after": after.segments,
            "seconds": round(time.monotonic() - started, 3),
        }
        if rebuilt is not None:
            out[kind]["rebuild"] = rebuilt
    return out


def reconcile_indexes(ctx: Clients, kinds: Sequence[str] = KINDS) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in kinds:
        try:
            out[kind] = reconcile_index(ctx, kind).as_dict()
        except (IndexBusy, EmbeddingVersionMismatch) as exc:
            out[kind] = {"skipped": str(exc)}
    return out
