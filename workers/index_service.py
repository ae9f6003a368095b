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

A fourth keeps every score within one embedding version:

- **re-embedding** (``check_indexes``, or the first write that notices): each generation
  records the embedding version of the vectors it holds. When the live generation's version
  is not the embedder's (``MEMHARNESS_EMBEDDER`` / ``_EMBED_MODEL`` / ``_EMBED_DIM`` changed), a
  run (``cognition_runs``, kind ``reembed``) creates the next generation at the new size and
  short steps re-embed every live row from PostgreSQL into it in id order, the cursor kept in
  the run, progress in its stats; then its HNSW graph is built, its count verified against
  PostgreSQL, the alias switched and the old generation dropped. Meanwhile writes go to the
  new generation and dense search is off (``dense_search_target`` is None): a score never
  mixes two versions.

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
from datetime import UTC, datetime
from typing import Any, Protocol

from psycopg import Connection
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from config import Settings
from pipelines.embedding_context import context_text
from pipelines.ports import CollectionParams, Embedder, VectorIndex, VectorPoint
from pipelines.records import Level
from workers.context import WorkerContext
from workers.db.cognition import Run, get_run

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


class EmbeddingVersionMismatch(RuntimeError):
    """The live generation holds vectors of another embedding version: re-embed first."""


class IndexNotReady(RuntimeError):
    """No generation of the embedder's version can take writes yet (its re-embed run could
    not be started just now); the write is retried."""


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
        "embedding_version": embedding_version,
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
        "embedding_version": embedding_version,
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


def _set_versions(
    conn: Connection[Any], spec: IndexSpec, ids: Sequence[uuid.UUID], version: str
) -> None:
    """Record on the rows the embedding version of the vectors just written for them."""
    if ids:
        conn.execute(
            f"UPDATE {spec.table} SET embedding_version = %s "
            "WHERE id = ANY(%s) AND embedding_version IS DISTINCT FROM %s",
            (version, list(ids), version),
        )


def _upsert_rows(
    ctx: WorkerContext, spec: IndexSpec, collection: str, rows: Sequence[dict[str, Any]]
) -> None:
    ctx.vectors.upsert(collection, build_points(ctx.embedder, spec, rows))
    with ctx.pool.connection() as conn:
        _set_versions(conn, spec, [row["id"] for row in rows], ctx.embedder.version)


def _embed_into(ctx: WorkerContext, spec: IndexSpec, collection: str, ids: set[uuid.UUID]) -> int:
    """Re-embed the live rows of ``ids`` from PostgreSQL into ``collection``."""
    done = 0
    for batch in _chunks(ids, ctx.settings.index_batch_size):
        with ctx.pool.connection() as conn:
            rows = _fetch_live_rows(conn, spec, batch)
        _upsert_rows(ctx, spec, collection, rows)
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
        _require_current(ctx, spec)
        ctx.vectors.ensure_collection(
            spec.alias, ctx.embedder.dim, spec.params, ctx.embedder.version
        )
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
        _require_current(ctx, spec)
        old = vectors.resolve(spec.alias)
        if old is None:
            vectors.ensure_collection(
                spec.alias, ctx.embedder.dim, spec.params, ctx.embedder.version
            )
            report.new = vectors.resolve(spec.alias)
            report.embedded = _embed_into(ctx, spec, spec.alias, _live_ids(ctx, spec))
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
    """Re-embed collections of another embedding version (start or nudge the run); apply
    the rebuild rule to the others and rebuild those past it."""
    out: dict[str, Any] = {}
    for kind in kinds:
        reembed = _check_reembed(ctx, kind)
        if reembed is not None:
            out[kind] = reembed
            continue
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
        except (IndexBusy, EmbeddingVersionMismatch) as exc:
            out[kind] = {"skipped": str(exc)}
    return out


# -- embedding versions and re-embedding -------------------------------------------------------

REEMBED_KIND = "reembed"
OWNER_REEMBED_TASK = "memory.embed.reembed_step"
SERVER_REEMBED_TASK = "memory.maintenance.reembed_step"
# Cursor of a re-embed run: ``embed:<last id>`` while rows are re-embedded in id order, then
# ``index`` (HNSW build of the new generation), ``verify`` (catch up, count, switch, drop),
# ``done``.
EMBED_PHASE = "embed"
INDEX_PHASE = "index"
VERIFY_PHASE = "verify"
DONE_PHASE = "done"
# The version recorded for a generation from before versions were kept whose vector size is
# not the embedder's: certainly another model.
UNRECORDED_VERSION = "unrecorded"


class IndexStores(Protocol):
    """What the version checks read: a ``WorkerContext``, or the read path's stores."""

    @property
    def settings(self) -> Settings: ...
    @property
    def pool(self) -> ConnectionPool: ...
    @property
    def vectors(self) -> VectorIndex: ...
    @property
    def embedder(self) -> Embedder: ...


def _legacy_version(ctx: IndexStores, spec: IndexSpec, check_size: bool) -> str:
    """The version of a live generation that has none recorded (a store from before versions
    were kept): another one if its vectors are of another size, or if PostgreSQL records
    another version on a live row; else the embedder's."""
    if check_size:
        try:
            ctx.vectors.ensure_collection(spec.alias, ctx.embedder.dim, spec.params)
        except ValueError:
            return UNRECORDED_VERSION
    with ctx.pool.connection() as conn:
        row = conn.execute(
            f"SELECT embedding_version FROM {spec.table} WHERE status = ANY(%s) "
            "AND embedding_version IS NOT NULL AND embedding_version <> %s LIMIT 1",
            (list(spec.live_statuses), ctx.embedder.version),
        ).fetchone()
    return str(row[0]) if row else ctx.embedder.version


def generation_version(
    ctx: IndexStores, spec: IndexSpec, *, record: bool = True
) -> tuple[str | None, str | None]:
    """(the physical collection behind the alias, the embedding version it holds); (None,
    None) when there is none. An unrecorded version is inferred and, with ``record``, kept."""
    physical = ctx.vectors.resolve(spec.alias)
    if physical is None:
        return None, None
    version = ctx.vectors.embedding_version(physical)
    if version is None:
        version = _legacy_version(ctx, spec, check_size=record)
        if record:
            ctx.vectors.set_embedding_version(physical, version)
    return physical, version


def _require_current(ctx: WorkerContext, spec: IndexSpec) -> None:
    """Rebuilds and reconciliation embed with the current embedder into the live generation:
    only when that generation holds the same version."""
    physical, version = generation_version(ctx, spec)
    if physical is not None and version != ctx.embedder.version:
        raise EmbeddingVersionMismatch(
            f"{spec.alias} ({physical}) holds {version} vectors, the embedder makes "
            f"{ctx.embedder.version}: a re-embed run replaces it (the index check or the "
            "next write starts it)"
        )


_TARGETS: dict[tuple[int, str, str], tuple[float, str | None, float]] = {}
# How long a reader reuses an inferred (unrecorded) version: the owner records it on its
# next write or index check, within one check interval at most.
LEGACY_REUSE_S = 30.0


def dense_search_target(ctx: IndexStores, kind: str, *, max_age_s: float = 0.0) -> str | None:
    """The collection whose vectors are of the current embedder's version: the alias when
    its generation matches (or when nothing is indexed yet), else None: a re-embed run is
    due or in progress and dense recall must be skipped, so that no score mixes versions.

    Reads only (a ``WorkerContext`` or the read path's stores). With a Qdrant server each
    call costs two small requests; ``max_age_s`` reuses an answer that young (a reader
    then notices a switch that much later)."""
    spec = index_spec(ctx.settings, kind)
    key = (id(ctx.vectors), spec.alias, ctx.embedder.version)
    now = time.monotonic()
    cached = _TARGETS.get(key)
    if cached is not None and now - cached[0] < max(max_age_s, cached[2]):
        return cached[1]
    physical = ctx.vectors.resolve(spec.alias)
    recorded = ctx.vectors.embedding_version(physical) if physical is not None else None
    if physical is None or recorded is not None:
        version, reuse_s = recorded, 0.0
    else:
        # An unrecorded generation (from before versions were kept) is inferred with a
        # PostgreSQL query; readers reuse the answer until the owner records the version.
        version, reuse_s = _legacy_version(ctx, spec, check_size=False), LEGACY_REUSE_S
    target = spec.alias if physical is None or version == ctx.embedder.version else None
    _TARGETS[key] = (now, target, reuse_s)
    return target


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


def _drop_if_unaliased(ctx: WorkerContext, spec: IndexSpec, name: str | None) -> bool:
    if not name or name == spec.alias or name == ctx.vectors.resolve(spec.alias):
        return False
    if name not in ctx.vectors.collections():
        return False
    ctx.vectors.drop_collection(name)
    return True


def _ensure_target(ctx: WorkerContext, spec: IndexSpec, stats: dict[str, Any]) -> None:
    """The run's new generation exists (a crash between recording the run and creating it
    leaves a run without one)."""
    target = str(stats["target"])
    if target not in ctx.vectors.collections():
        ctx.vectors.create_collection(
            target, ctx.embedder.dim, spec.params, str(stats["to_version"])
        )


def start_reembed(ctx: WorkerContext, kind: str) -> Run | None:
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


def reembed_task_name(ctx: WorkerContext) -> str:
    """The step task on the queue of index maintenance (``workers.tasks.index``)."""
    return SERVER_REEMBED_TASK if ctx.settings.qdrant_url else OWNER_REEMBED_TASK


def publish_reembed_step(ctx: WorkerContext, kind: str, run_id: uuid.UUID, cursor: str) -> None:
    """Best effort: a lost step is published again by the next index check."""
    from workers.app import app

    name = reembed_task_name(ctx)
    queue = "maintenance" if name == SERVER_REEMBED_TASK else "embed"
    try:
        app.send_task(
            name, kwargs={"kind": kind, "run_id": str(run_id), "cursor": cursor}, queue=queue
        )
    except Exception:
        log.warning("could not publish %s; the next index check does", name, exc_info=True)


def write_target(ctx: WorkerContext, kind: str) -> str:
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


def _check_reembed(ctx: WorkerContext, kind: str) -> dict[str, Any] | None:
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


def reembed_status(ctx: WorkerContext, kinds: Sequence[str] = KINDS) -> dict[str, Any]:
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
    ctx: WorkerContext,
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
        _upsert_rows(ctx, spec, target, rows)
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


def _verify_and_switch(ctx: WorkerContext, spec: IndexSpec, stats: dict[str, Any]) -> bool:
    """Bring the new generation level with PostgreSQL, verify its count, switch the alias,
    drop the old generation. False when it did not verify (the next step tries again)."""
    vectors = ctx.vectors
    page = ctx.settings.index_batch_size
    target = str(stats["target"])
    for round_ in range(1, VERIFY_ROUNDS + 1):
        target_ids = index_ids(vectors, target, page)
        with ctx.pool.connection() as conn:
            live = _ids_with_status(conn, spec, spec.live_statuses)
            inflight = _ids_with_status(conn, spec, spec.inflight_statuses)
        stats["caught_up"] = int(stats.get("caught_up", 0)) + _embed_into(
            ctx, spec, target, live - target_ids
        )
        extra = target_ids - live - inflight
        for batch in _chunks(extra, page):
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
    late = _live_ids(ctx, spec) - index_ids(vectors, target, page)
    stats["caught_up"] = int(stats.get("caught_up", 0)) + _embed_into(ctx, spec, target, late)
    for name in {previous, stats.get("source")}:
        if _drop_if_unaliased(ctx, spec, name):
            stats.setdefault("dropped", []).append(name)
    stats["switched_at"] = datetime.now(UTC).isoformat()
    return True


def reembed_step(ctx: WorkerContext, kind: str, run_id: uuid.UUID, cursor: str) -> dict[str, Any]:
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
                ctx.vectors.optimize(target)
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
