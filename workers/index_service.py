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
``workers.tasks.index``); with a Qdrant server, on any maintenance worker, one at a time per
collection (a Redis lock).
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from psycopg import Connection
from psycopg.rows import dict_row

from config import Settings
from pipelines.embedding_context import context_text
from pipelines.ports import CollectionParams, Embedder, VectorIndex, VectorPoint
from pipelines.records import Level
from workers.context import WorkerContext

log = logging.getLogger(__name__)

EPISODIC = "episodic"
SEMANTIC = "semantic"
KINDS = (EPISODIC, SEMANTIC)
GENERATION_RE = re.compile(r"^(?P<alias>.+)__g(?P<n>\d+)$")
LOCK_KEY = "memharness:index:lock:{alias}"
# A build is verified, and caught up with the writes that landed during it, this many times
# before it is given up: each round is short, so only a store that keeps changing under a
# server-mode rebuild takes more than one.
VERIFY_ROUNDS = 3
# The hashing and remote embedders both take a few hundred texts per call comfortably.
EMBED_CHUNK = 256


class IndexBusy(RuntimeError):
    """Another worker holds this collection's maintenance lock."""


class RebuildFailed(RuntimeError):
    """The new generation did not verify against PostgreSQL; the alias was left alone."""


@dataclass(frozen=True)
class IndexSpec:
    """One collection: its alias, its parameters, and where its rows live in PostgreSQL."""

    kind: str
    alias: str
    params: CollectionParams
    table: str
    live_statuses: tuple[str, ...]
    inflight_statuses: tuple[str, ...]


def alias_name(settings: Settings, kind: str) -> str:
    return f"{settings.collection_prefix}_{kind}"


def collection_params(settings: Settings, kind: str) -> CollectionParams:
    if kind == EPISODIC:
        return CollectionParams(
            hnsw_m=settings.vector_episodic_hnsw_m,
            hnsw_ef_construct=settings.vector_episodic_ef_construct,
            search_ef=settings.vector_episodic_search_ef,
            pq=None if settings.vector_episodic_pq == "off" else settings.vector_episodic_pq,
        )
    if kind == SEMANTIC:
        return CollectionParams(
            hnsw_m=settings.vector_semantic_hnsw_m,
            hnsw_ef_construct=settings.vector_semantic_ef_construct,
            search_ef=settings.vector_semantic_search_ef,
        )
    raise ValueError(f"unknown collection kind {kind!r}")


def index_spec(settings: Settings, kind: str) -> IndexSpec:
    if kind == EPISODIC:
        return IndexSpec(
            kind=EPISODIC,
            alias=alias_name(settings, EPISODIC),
            params=collection_params(settings, EPISODIC),
            table="memories",
            live_statuses=("stored",),
            inflight_statuses=("pending",),
        )
    if kind == SEMANTIC:
        return IndexSpec(
            kind=SEMANTIC,
            alias=alias_name(settings, SEMANTIC),
            params=collection_params(settings, SEMANTIC),
            table="semantic_memories",
            live_statuses=("active", "needs_confirmation"),
            inflight_statuses=(),
        )
    raise ValueError(f"unknown collection kind {kind!r}")


def next_generation(alias: str, current: str | None, existing: Iterable[str]) -> str:
    """``<alias>__g<n+1>`` after the highest generation of ``alias`` seen anywhere."""
    highest = 0
    for name in [*existing, current or ""]:
        match = GENERATION_RE.match(name)
        if match and match["alias"] == alias:
            highest = max(highest, int(match["n"]))
    return f"{alias}__g{highest + 1}"


# -- PostgreSQL side ---------------------------------------------------------------------------


def _ids_with_status(
    conn: Connection[Any], spec: IndexSpec, statuses: Sequence[str]
) -> set[uuid.UUID]:
    if not statuses:
        return set()
    with conn.cursor() as cur:
        cur.execute(
            f"SELECT id FROM {spec.table} WHERE status = ANY(%s)",
            (list(statuses),),
        )
        return {row[0] for row in cur.fetchall()}


def _fetch_live_rows(
    conn: Connection[Any], spec: IndexSpec, ids: Sequence[uuid.UUID]
) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            f"SELECT * FROM {spec.table} WHERE id = ANY(%s) AND status = ANY(%s)",
            (list(ids), list(spec.live_statuses)),
        )
        return list(cur.fetchall())


def episodic_payload(row: dict[str, Any], embedding_version: str) -> dict[str, Any]:
    """The payload the write path and the summary embedder store, rebuilt from a row."""
    payload = {
        "tenant_id": row["tenant_id"],
        "user_id": row["user_id"],
        "agent_id": row["agent_id"],
        "task_id": row["task_id"],
        "session_id": row["session_id"],
        "level": int(row["level"]),
        "ts": row["ts"].timestamp(),
        "type": row["type"],
        "importance": float(row["importance"]),
        "modality": row["modality"],
        "embedding_version": row.get("embedding_version") or embedding_version,
    }
    if "version" in row:
        payload["version"] = int(row["version"])
    return payload


def semantic_payload(row: dict[str, Any], embedding_version: str) -> dict[str, Any]:
    return {
        "tenant_id": row["tenant_id"],
        "user_id": row["user_id"],
        "agent_id": row["agent_id"],
        "task_id": None,
        "scope": row["scope"],
        "kind": row.get("kind"),
        "level": int(Level.L4),
        "ts": row["created_at"].timestamp(),
        "confidence": float(row["confidence"]),
        "status": row["status"],
        "embedding_version": row.get("embedding_version") or embedding_version,
    }


def build_points(
    embedder: Embedder, spec: IndexSpec, rows: Sequence[dict[str, Any]]
) -> list[VectorPoint]:
    """Content and context vectors of ``rows``, embedded in chunks, with their payloads."""
    points: list[VectorPoint] = []
    for start in range(0, len(rows), EMBED_CHUNK):
        chunk = rows[start : start + EMBED_CHUNK]
        if spec.kind == EPISODIC:
            contexts = [
                context_text(row.get("metadata"), row["type"], row["task_id"]) for row in chunk
            ]
        else:
            contexts = [
                context_text(None, f"semantic {row.get('kind') or 'knowledge'}", None)
                for row in chunk
            ]
        vectors = embedder.embed([row["content"] for row in chunk] + contexts)
        payload_of = episodic_payload if spec.kind == EPISODIC else semantic_payload
        for i, row in enumerate(chunk):
            points.append(
                VectorPoint(
                    id=row["id"],
                    vector=vectors[i],
                    context=vectors[len(chunk) + i],
                    payload=payload_of(row, embedder.version),
                )
            )
    return points


# -- index side --------------------------------------------------------------------------------


def index_ids(vectors: VectorIndex, collection: str, page: int) -> set[uuid.UUID]:
    ids: set[uuid.UUID] = set()
    offset: uuid.UUID | None = None
    while True:
        batch, offset = vectors.scroll_ids(collection, offset, page)
        ids.update(batch)
        if offset is None:
            return ids


def _chunks(ids: Iterable[uuid.UUID], size: int) -> Iterator[list[uuid.UUID]]:
    batch: list[uuid.UUID] = []
    for item in sorted(ids):
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _embed_into(ctx: WorkerContext, spec: IndexSpec, collection: str, ids: set[uuid.UUID]) -> int:
    """Re-embed the live rows of ``ids`` from PostgreSQL into ``collection``."""
    done = 0
    for batch in _chunks(ids, ctx.settings.index_batch_size):
        with ctx.pool.connection() as conn:
            rows = _fetch_live_rows(conn, spec, batch)
        ctx.vectors.upsert(collection, build_points(ctx.embedder, spec, rows))
        done += len(rows)
    return done


def _copy_into(ctx: WorkerContext, source: str, target: str, ids: set[uuid.UUID]) -> int:
    """Copy the points ``ids`` (both vectors, payload) from ``source`` to ``target``."""
    done = 0
    for batch in _chunks(ids, ctx.settings.index_batch_size):
        points = ctx.vectors.retrieve(source, batch)
        ctx.vectors.upsert(target, points)
        done += len(points)
    return done


@contextmanager
def maintenance_lock(ctx: WorkerContext, alias: str) -> Iterator[None]:
    """One maintenance job per collection at a time, across workers."""
    key = LOCK_KEY.format(alias=alias)
    token = uuid.uuid4().hex
    ttl_s = max(60, ctx.settings.broker_visibility_timeout_s // 2)
    if not ctx.redis.set(key, token, nx=True, ex=ttl_s):
        raise IndexBusy(f"maintenance of {alias} is already running")
    try:
        yield
    finally:
        # Release only our own lock: compare and delete in one step.
        ctx.redis.eval(
            "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) "
            "else return 0 end",
            1,
            key,
            token,
        )


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


def reconcile_index(ctx: WorkerContext, kind: str) -> ReconcileReport:
    """Make the index equal to PostgreSQL: embed what is missing, delete what is orphaned."""
    spec = index_spec(ctx.settings, kind)
    with maintenance_lock(ctx, spec.alias):
        ctx.vectors.ensure_collection(spec.alias, ctx.embedder.dim, spec.params)
        indexed = index_ids(ctx.vectors, spec.alias, ctx.settings.index_batch_size)
        with ctx.pool.connection() as conn:
            live = _ids_with_status(conn, spec, spec.live_statuses)
            inflight = _ids_with_status(conn, spec, spec.inflight_statuses)
        report = ReconcileReport(collection=spec.alias, live=len(live), indexed=len(indexed))
        missing = live - indexed
        orphans = indexed - live - inflight
        report.missing = len(missing)
        report.embedded = _embed_into(ctx, spec, spec.alias, missing)
        for batch in _chunks(orphans, ctx.settings.index_batch_size):
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


def _catch_up(
    ctx: WorkerContext, spec: IndexSpec, old: str, new: str
) -> tuple[int, int, set[uuid.UUID]]:
    """Bring ``new`` level with PostgreSQL (vectors from ``old`` where it has them).

    Returns (points written, PostgreSQL's live count, the in-flight ids)."""
    page = ctx.settings.index_batch_size
    old_ids = index_ids(ctx.vectors, old, page)
    new_ids = index_ids(ctx.vectors, new, page)
    with ctx.pool.connection() as conn:
        live = _ids_with_status(conn, spec, spec.live_statuses)
        inflight = _ids_with_status(conn, spec, spec.inflight_statuses)
    wanted = live | (inflight & old_ids)
    written = _copy_into(ctx, old, new, (wanted & old_ids) - new_ids)
    written += _embed_into(ctx, spec, new, live - old_ids - new_ids)
    extra = new_ids - wanted
    for batch in _chunks(extra, page):
        ctx.vectors.delete(new, batch)
    return written + len(extra), len(live), inflight


def rebuild_index(ctx: WorkerContext, kind: str) -> RebuildReport:
    """Build the next generation, verify it against PostgreSQL, switch the alias, drop the
    old one. Readers keep reading the old generation through the alias until the switch."""
    spec = index_spec(ctx.settings, kind)
    started = time.monotonic()
    report = RebuildReport(alias=spec.alias)
    vectors = ctx.vectors
    with maintenance_lock(ctx, spec.alias):
        old = vectors.resolve(spec.alias)
        if old is None:
            vectors.ensure_collection(spec.alias, ctx.embedder.dim, spec.params)
            report.new = vectors.resolve(spec.alias)
            report.embedded = _embed_into(ctx, spec, spec.alias, _live_ids(ctx, spec))
            report.seconds = time.monotonic() - started
            return report
        report.old = old
        new = next_generation(spec.alias, old, vectors.collections())
        report.new = new
        vectors.create_collection(new, ctx.embedder.dim, spec.params)
        try:
            mark = time.monotonic()
            written, _, _ = _catch_up(ctx, spec, old, new)
            report.copied = written
            report.phases_s["copy"] = time.monotonic() - mark
            mark = time.monotonic()
            vectors.optimize(new)
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
        report.caught_up += _copy_into(ctx, old, new, late)
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


def _live_ids(ctx: WorkerContext, spec: IndexSpec) -> set[uuid.UUID]:
    with ctx.pool.connection() as conn:
        return _ids_with_status(conn, spec, spec.live_statuses)


def needs_rebuild(ctx: WorkerContext, kind: str) -> tuple[bool, dict[str, Any]]:
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


def check_indexes(ctx: WorkerContext, kinds: Sequence[str] = KINDS) -> dict[str, Any]:
    """Apply the rebuild rule to each collection; rebuild those past it."""
    out: dict[str, Any] = {}
    for kind in kinds:
        due, info = needs_rebuild(ctx, kind)
        if due:
            try:
                info["rebuild"] = rebuild_index(ctx, kind).as_dict()
            except IndexBusy as exc:  # another job has it; the next check comes soon
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


def compact_indexes(ctx: WorkerContext, kinds: Sequence[str] = KINDS) -> dict[str, Any]:
    """Weekly compaction: the engine vacuums deleted points and merges segments."""
    out: dict[str, Any] = {}
    for kind in kinds:
        spec = index_spec(ctx.settings, kind)
        if ctx.vectors.resolve(spec.alias) is None:
            continue
        try:
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
    return out


def reconcile_indexes(ctx: WorkerContext, kinds: Sequence[str] = KINDS) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in kinds:
        try:
            out[kind] = reconcile_index(ctx, kind).as_dict()
        except IndexBusy as exc:
            out[kind] = {"skipped": str(exc)}
    return out
