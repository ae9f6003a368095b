"""The vector index port over qdrant-edge-py: Qdrant's embedded engine, in process.

Why it is one piece: one class implements the whole ``VectorIndex`` port over one engine;
its shards, aliases, fused searches and rebuild support share the alias file and its lock,
so split apart each part would reach into the others' state.

One shard directory per physical collection under the store's root. Aliases live in one
small JSON file beside them (``aliases.json``: alias → shard directory, plus the points
deleted from each shard since it was built, each shard's search parameters and the embedding
version of the vectors it holds), rewritten
whole through a temporary file and ``os.replace``, so an alias switch is one atomic rename
and a crash leaves either the old mapping or the new one.

Like every embedded store it has exactly one owner process (a second one fails to open the
WAL): the write, embed and recall queues, and the index maintenance, are consumed by one
worker in embedded mode. Inside that process readers may run on several threads: a shard
is closed only once no search holds it, so a rebuild that drops the old generation never
pulls it from under a query. Measured on these machines it upserts ~28k points/s and
answers a filtered top-50 in ~6 ms at 100k points (DESIGN.md), where qdrant-client's local
mode commits SQLite once per point (~11 ms each).
"""

from __future__ import annotations

import heapq
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import qdrant_edge as qe

from pipelines.index.vectors import (
    CODE_VECTOR,
    CONTENT_VECTOR,
    CONTEXT_VECTOR,
    SCOPE_FIELD,
    CollectionParams,
    CollectionStats,
    ContextFusion,
    VectorHit,
    VectorPoint,
    scope_key,
)

CONFIG_FILE = "edge_config.json"
ALIAS_FILE = "aliases.json"
# Qdrant's default full_scan_threshold, in KB of vectors: below it a segment is scanned
# exactly, which is faster than walking a graph.
FULL_SCAN_THRESHOLD_KB = 10_000
# Points per engine upsert call. One call of 1,000 points at 384-d held the GIL for 17.5 ms
# here, one of 200 for 3.3 ms: the same cost per point, a fifth of the wait for a read.
UPSERT_CALL_POINTS = 200
# The engine's default indexing threshold, in KB of one vector's data in a segment (Qdrant's
# indexing_threshold_kb): past it optimize builds the segment's graph. Measured with
# qdrant-edge 0.9 at 384-d: a segment of 8k unindexed points was built, one of 3k was not.
ENGINE_INDEXING_THRESHOLD_KB = 10_000
# The engine's default deleted_threshold: past this share of deleted points its vacuum
# optimizer rewrites a segment.
ENGINE_DELETED_THRESHOLD = 0.2
# Each fused search asks both vectors for this many candidates per requested result, so
# that a memory ranked a little lower by one vector still meets the other in the fusion.
FUSION_PREFETCH_FACTOR = 3
INDEXED_FIELDS: tuple[tuple[str, qe.PayloadSchemaType], ...] = (
    ("tenant_id", qe.PayloadSchemaType.Keyword),
    ("task_id", qe.PayloadSchemaType.Keyword),
    ("level", qe.PayloadSchemaType.Integer),
    ("ts", qe.PayloadSchemaType.Float),
    (SCOPE_FIELD, qe.PayloadSchemaType.Keyword),
)
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
_PQ = {
    "x4": qe.CompressionRatio.X4,
    "x8": qe.CompressionRatio.X8,
    "x16": qe.CompressionRatio.X16,
    "x32": qe.CompressionRatio.X32,
    "x64": qe.CompressionRatio.X64,
}


class EdgeIndex:
    def __init__(self, root: Path, *, search_threads: int = 1) -> None:
        if search_threads < 1:
            raise ValueError(f"search_threads must be at least 1, got {search_threads}")
        self._root = root
        self._search_threads = search_threads
        root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Condition(threading.RLock())
        self._shards: dict[str, qe.EdgeShard] = {}
        # Collections whose graph a child process is building (closed here meanwhile).
        self._building: set[str] = set()
        self._in_use: dict[str, int] = {}
        self._dims: dict[str, int] = {}
        state = _read_state(root / ALIAS_FILE)
        self._aliases: dict[str, str] = dict(state.get("aliases", {}))
        self._deleted: dict[str, int] = {k: int(v) for k, v in state.get("deleted", {}).items()}
        self._ef: dict[str, int] = {k: int(v) for k, v in state.get("search_ef", {}).items()}
        self._versions: dict[str, str] = {
            k: str(v) for k, v in state.get("embedding_version", {}).items()
        }
        # Collections built since points carry SCOPE_FIELD (indexed): a task-scoped search
        # filters on it. Older ones keep the tenant and task conditions until a rebuild.
        self._scoped: set[str] = {str(k) for k in state.get("scoped", [])}

    # -- names ------------------------------------------------------------------------------

    def _path(self, name: str) -> Path:
        if not _NAME_RE.fullmatch(name):
            raise ValueError(f"invalid collection name {name!r}")
        return self._root / name

    def _exists(self, name: str) -> bool:
        return (self._path(name) / CONFIG_FILE).exists()

    def resolve(self, name: str) -> str | None:
        with self._lock:
            target = self._aliases.get(name)
            if target is not None:
                return target
            return name if self._exists(name) else None

    def collections(self) -> list[str]:
        return sorted(p.name for p in self._root.iterdir() if (p / CONFIG_FILE).exists())

    def switch_alias(self, alias: str, collection: str) -> str | None:
        with self._lock:
            if not self._exists(collection):
                raise LookupError(f"collection {collection} does not exist")
            if alias == collection:
                raise ValueError(f"{alias} cannot be an alias of itself")
            previous = self._aliases.get(alias)
            if self._exists(alias):
                previous = self._retire_unaliased(alias)
            self._aliases[alias] = collection
            self._save()
            return previous

    def _retire_unaliased(self, name: str) -> str:
        """A store from before aliases keeps its collection under the alias's own name:
        rename it to generation 0 (under the lock, so no reader sees the gap) and return
        the new name for the caller to drop."""
        while self._in_use.get(name, 0) > 0:
            self._lock.wait(timeout=1.0)
        shard = self._shards.pop(name, None)
        if shard is not None:
            shard.flush()
            shard.close()
        retired = f"{name}__g0"
        shutil.rmtree(self._path(retired), ignore_errors=True)
        os.replace(self._path(name), self._path(retired))
        for table in (self._deleted, self._ef):
            if name in table:
                table[retired] = table.pop(name)
        if name in self._versions:
            self._versions[retired] = self._versions.pop(name)
        if name in self._scoped:
            self._scoped.discard(name)
            self._scoped.add(retired)
        self._dims.pop(name, None)
        return retired

    def _save(self) -> None:
        state = {
            "aliases": self._aliases,
            "deleted": self._deleted,
            "search_ef": self._ef,
            "embedding_version": self._versions,
            "scoped": sorted(self._scoped),
        }
        tmp = self._root / f".{ALIAS_FILE}.{os.getpid()}.tmp"
        with tmp.open("w") as fh:
            json.dump(state, fh, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self._root / ALIAS_FILE)

    # -- shards -----------------------------------------------------------------------------

    def _open(self, physical: str) -> qe.EdgeShard | None:
        with self._lock:
            while physical in self._building:  # its builder holds it; back when built
                self._lock.wait(timeout=1.0)
            shard = self._shards.get(physical)
            if shard is None and self._exists(physical):
                path = self._path(physical)
                sizes = _vector_sizes(path)
                # The engine needs the stored vectors' names to take a config on load; the
                # rest of a config left unset keeps what the collection was built with.
                shard = (
                    qe.EdgeShard.load(str(path), self._load_config(sizes))
                    if sizes
                    else qe.EdgeShard.load(str(path))
                )
                self._shards[physical] = shard
            return shard

    def _load_config(self, sizes: dict[str, int]) -> qe.EdgeConfig:
        vectors = {
            name: qe.EdgeVectorParams(size=size, distance=qe.Distance.Cosine)
            for name, size in sizes.items()
        }
        return qe.EdgeConfig(vectors=vectors, max_search_threads=self._search_threads)

    @contextmanager
    def _using(self, collection: str) -> Iterator[tuple[str, qe.EdgeShard] | None]:
        """The shard behind ``collection`` (alias or name), held open while in use."""
        with self._lock:
            physical = self.resolve(collection)
            shard = self._open(physical) if physical is not None else None
            if physical is None or shard is None:
                held = None
            else:
                held = (physical, shard)
                self._in_use[physical] = self._in_use.get(physical, 0) + 1
        try:
            yield held
        finally:
            if held is not None:
                with self._lock:
                    self._in_use[held[0]] -= 1
                    self._lock.notify_all()

    @contextmanager
    def require(self, collection: str) -> Iterator[tuple[str, qe.EdgeShard]]:
        with self._using(collection) as held:
            if held is None:
                raise LookupError(
                    f"collection {collection} does not exist; call ensure_collection first"
                )
            yield held

    def ensure_collection(
        self,
        name: str,
        dim: int,
        params: CollectionParams | None = None,
        embedding_version: str | None = None,
    ) -> None:
        if self._dims.get(name) == dim:
            return
        with self._lock:
            physical = self.resolve(name)
            if physical is None:
                physical = f"{name}__g1"
                if not self._exists(physical):
                    self.create_collection(
                        physical, dim, params or CollectionParams(), embedding_version
                    )
                if physical != name:
                    self.switch_alias(name, physical)
            else:
                sizes = _vector_sizes(self._path(physical))
                size = sizes.get(CONTENT_VECTOR)
                if size is not None and size != dim:
                    raise ValueError(
                        f"collection {name} holds {size}-d vectors but the embedder makes "
                        f"{dim}-d; re-embed into a new collection instead of mixing versions"
                    )
                # A store from before context or code vectors gets the vector, empty: its
                # points gain one as they are written again (a rebuild writes them all).
                for missing in (CONTEXT_VECTOR, CODE_VECTOR):
                    if missing not in sizes:
                        shard = self._open(physical)
                        assert shard is not None
                        shard.update(
                            qe.UpdateOperation.create_dense_vector(missing, dim, qe.Distance.Cosine)
                        )
            self._dims[name] = dim

    def create_collection(
        self,
        name: str,
        dim: int,
        params: CollectionParams,
        embedding_version: str | None = None,
    ) -> None:
        with self._lock:
            if self._exists(name):
                raise ValueError(f"collection {name} exists already")
            if name in self._aliases:
                raise ValueError(f"{name} is an alias; a collection cannot shadow it")
            vector = qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine)
            config = qe.EdgeConfig(
                vectors={CONTENT_VECTOR: vector, CONTEXT_VECTOR: vector, CODE_VECTOR: vector},
                hnsw_config=qe.HnswIndexConfig(
                    m=params.hnsw_m,
                    ef_construct=params.hnsw_ef_construct,
                    full_scan_threshold=FULL_SCAN_THRESHOLD_KB,
                ),
                quantization_config=(
                    qe.ProductQuantizationConfig(compression=_PQ[params.pq]) if params.pq else None
                ),
                max_search_threads=self._search_threads,
            )
            path = self._path(name)
            shutil.rmtree(path, ignore_errors=True)  # leftovers of a crashed create
            shard = qe.EdgeShard.create(str(path), config)
            for field, schema in INDEXED_FIELDS:
                shard.update(qe.UpdateOperation.create_field_index(field, schema))
            self._shards[name] = shard
            self._deleted[name] = 0
            self._ef[name] = params.search_ef
            self._scoped.add(name)
            if embedding_version is not None:
                self._versions[name] = embedding_version
            else:
                self._versions.pop(name, None)
            self._save()

    def embedding_version(self, collection: str) -> str | None:
        with self._lock:
            physical = self.resolve(collection)
            return None if physical is None else self._versions.get(physical)

    def set_embedding_version(self, collection: str, version: str) -> None:
        with self._lock:
            physical = self.resolve(collection)
            if physical is None:
                raise LookupError(f"collection {collection} does not exist")
            self._versions[physical] = version
            self._save()

    def drop_collection(self, name: str) -> None:
        with self._lock:
            if name in self._aliases.values():
                raise ValueError(f"collection {name} is behind an alias; switch it first")
            while self._in_use.get(name, 0) > 0:  # a search still reads it
                self._lock.wait(timeout=1.0)
            shard = self._shards.pop(name, None)
            if shard is not None:
                shard.close()
            self._in_use.pop(name, None)
            self._deleted.pop(name, None)
            self._ef.pop(name, None)
            self._versions.pop(name, None)
            self._scoped.discard(name)
            self._dims = {k: v for k, v in self._dims.items() if k != name}
            self._save()
            shutil.rmtree(self._path(name), ignore_errors=True)

    # -- points -----------------------------------------------------------------------------

    def upsert(self, collection: str, points: Sequence[VectorPoint]) -> None:
        if not points:
            return
        with self.require(collection) as (_, shard):
            # In engine calls of at most UPSERT_CALL_POINTS: each holds the GIL throughout,
            # and the store owner's read slot waits for the one in progress.
            for start in range(0, len(points), UPSERT_CALL_POINTS):
                chunk = points[start : start + UPSERT_CALL_POINTS]
                shard.update(qe.UpdateOperation.upsert_points([_point(p) for p in chunk]))

    def delete(self, collection: str, ids: Sequence[uuid.UUID]) -> None:
        if not ids:
            return
        with self.require(collection) as (physical, shard):
            existing = shard.retrieve(list(ids), with_payload=False, with_vector=False)
            shard.update(qe.UpdateOperation.delete_points(list(ids)))
            if existing:
                with self._lock:
                    self._deleted[physical] = self._deleted.get(physical, 0) + len(existing)
                    self._save()

    def count(self, collection: str, tenant_id: str | None = None) -> int:
        with self._using(collection) as held:
            if held is None:
                return 0
            flt = _scope_filter(tenant_id, None, None) if tenant_id is not None else None
            return int(held[1].count(qe.CountRequest(exact=True, filter=flt)))

    def stats(self, collection: str) -> CollectionStats:
        with self.require(collection) as (physical, shard):
            info = shard.info()
            return CollectionStats(
                name=physical,
                points=int(info.points_count),
                deleted=self._deleted.get(physical, 0),
                segments=int(info.segments_count),
            )

    def scroll_ids(
        self, collection: str, offset: uuid.UUID | None = None, limit: int = 1000
    ) -> tuple[list[uuid.UUID], uuid.UUID | None]:
        with self._using(collection) as held:
            if held is None:
                return [], None
            records, nxt = held[1].scroll(
                qe.ScrollRequest(offset=offset, limit=limit, with_payload=False, with_vector=False)
            )
            return [uuid.UUID(str(r.id)) for r in records], (
                uuid.UUID(str(nxt)) if nxt is not None else None
            )

    def retrieve(self, collection: str, ids: Sequence[uuid.UUID]) -> list[VectorPoint]:
        if not ids:
            return []
        with self._using(collection) as held:
            if held is None:
                return []
            records = held[1].retrieve(list(ids), with_payload=True, with_vector=True)
        out = []
        for record in records:
            vectors: Any = record.vector or {}
            out.append(
                VectorPoint(
                    id=uuid.UUID(str(record.id)),
                    vector=list(vectors[CONTENT_VECTOR]),
                    context=list(vectors[CONTEXT_VECTOR]) if CONTEXT_VECTOR in vectors else None,
                    code=list(vectors[CODE_VECTOR]) if CODE_VECTOR in vectors else None,
                    payload=_own_payload(record.payload),
                )
            )
        return out

    def search(
        self,
        collection: str,
        vector: Sequence[float],
        *,
        tenant_id: str,
        task_id: str | None = None,
        limit: int = 10,
        using: str = CONTENT_VECTOR,
        fusion: ContextFusion | None = None,
        since_ts: float | None = None,
        with_payload: bool = True,
        ids: Sequence[uuid.UUID] | None = None,
    ) -> list[VectorHit]:
        if ids is not None and not ids:
            return []
        where = (tenant_id, task_id, since_ts, ids)
        return self._query(collection, [vector], where, limit, using, fusion, with_payload)[0]

    def search_many(
        self,
        collection: str,
        vectors: Sequence[Sequence[float]],
        *,
        tenant_id: str,
        task_id: str | None = None,
        limit: int = 10,
        using: str = CONTENT_VECTOR,
        fusion: ContextFusion | None = None,
        since_ts: float | None = None,
        with_payload: bool = True,
    ) -> list[list[VectorHit]]:
        if not vectors:
            return []
        where = (tenant_id, task_id, since_ts, None)
        return self._query(collection, vectors, where, limit, using, fusion, with_payload)

    def _query(
        self,
        collection: str,
        vectors: Sequence[Sequence[float]],
        where: tuple[str, str | None, float | None, Sequence[uuid.UUID] | None],
        limit: int,
        using: str,
        fusion: ContextFusion | None,
        with_payload: bool,
    ) -> list[list[VectorHit]]:
        """One planned batch for every vector, inside ``where`` (tenant, task, since, ids).

        A fused search is fused here, not by the engine's prefetch-and-formula query: the
        batch holds each content search and *one* context search (the step's context is
        the same for every vector), and the weighted sum is taken over the union of the
        two answers, a point missing from one counting 0 there, which is what the formula
        computes. At 100k points three fused searches took 17–19 ms with the formula and
        7 ms this way (the formula ran both prefetches once per vector); at 10k the two
        measured the same.
        """
        with self._using(collection) as held:
            if held is None:
                return [[] for _ in vectors]
            physical, shard = held
            flt = _scope_filter(*where, scoped=physical in self._scoped)
            params = qe.SearchParams(hnsw_ef=self._ef.get(physical))
            if fusion is None:
                requests = [
                    _nearest(vector, using, flt, params, limit, with_payload) for vector in vectors
                ]
            else:
                depth = limit * FUSION_PREFETCH_FACTOR
                requests = [
                    _nearest(vector, CONTENT_VECTOR, flt, params, depth, with_payload)
                    for vector in vectors
                ]
                requests.append(
                    _nearest(fusion.context, CONTEXT_VECTOR, flt, params, depth, with_payload)
                )
            answers = shard.query_batch(qe.QueryBatchRequest(requests))
        if fusion is None:
            return [_hits(points) for points in answers]
        *contents, context = answers
        # Keyed by the id's integer: a UUID's hash and equality run in Python, an int's in C
        # (a fused call unions ~600 points); the engine builds a new id object on each
        # access, so each point's is read once.
        context_scores: dict[int, float] = {}
        payloads: dict[int, Any] = {}
        for p in context:
            key = _int_id(p.id)
            context_scores[key] = fusion.context_weight * p.score
            if with_payload:
                payloads[key] = p.payload
        return [
            _fused(points, context_scores, payloads, fusion, limit, with_payload)
            for points in contents
        ]

    def optimize(self, collection: str) -> None:
        with self.require(collection) as (_, shard):
            shard.optimize()
            shard.flush()

    def optimize_would_stall(self, collection: str) -> bool:
        """A serving collection whose points not in a graph yet outgrew the engine's indexing
        threshold, or with a share of deleted points the engine vacuums (rewriting segments
        and their graphs): ``optimize`` would do it here, holding the GIL throughout."""
        with self._using(collection) as held:
            if held is None:
                return False
            physical, shard = held
            serving = physical in self._aliases.values()
            info = shard.info()
        sizes = _vector_sizes(self._path(physical))
        if not serving or not sizes:
            return False
        deleted = self._deleted.get(physical, 0)
        in_graphs = int(info.indexed_vectors_count) > 0  # a vacuum rewrites their graphs
        if in_graphs and deleted > ENGINE_DELETED_THRESHOLD * (int(info.points_count) + deleted):
            return True
        unindexed = int(info.points_count) - int(info.indexed_vectors_count) // len(sizes)
        return unindexed * max(sizes.values()) * 4 > ENGINE_INDEXING_THRESHOLD_KB * 1024

    def build_index(self, collection: str) -> None:
        """Build the HNSW graph of a collection no reader uses yet (a rebuild's or a
        re-embed's next generation) in a child process, then serve it from here again.

        qdrant-edge-py holds the GIL for a whole ``optimize`` (measured: a 20k-point build
        stopped every other thread of the process for its 21 s), so built in the owner it
        would stall the read slot for minutes at 100k. The shard is flushed and closed here,
        the child opens it (one process at a time: the WAL lock), builds, flushes, closes;
        a use of the collection meanwhile waits for it. A collection behind an alias is
        serving reads and cannot be closed: it is optimized in place (``optimize``).
        """
        with self._lock:
            physical = self.resolve(collection)
            if physical is None:
                raise LookupError(f"collection {collection} does not exist")
            serving = physical in self._aliases.values()
            if not serving:
                while self._in_use.get(physical, 0) > 0:
                    self._lock.wait(timeout=1.0)
                self._building.add(physical)
                shard = self._shards.pop(physical, None)
                if shard is not None:
                    shard.flush()
                    shard.close()
        if serving:
            self.optimize(collection)
            return
        try:
            build_in_child(self._path(physical), self._search_threads)
        finally:
            with self._lock:
                self._building.discard(physical)
                self._lock.notify_all()

    def close(self) -> None:
        with self._lock:
            for shard in self._shards.values():
                shard.flush()
                shard.close()
            self._shards.clear()
            self._dims.clear()
            self._in_use.clear()


# The child that builds a graph runs at this niceness: on a machine of two cores the owner's
# reads and PostgreSQL come first, the build takes what is left.
BUILD_NICENESS = 10


def build_in_child(path: Path, search_threads: int) -> None:
    """Run ``python -m workers.adapters.vector_edge <path>`` and wait: it loads the shard,
    builds its graphs, flushes and closes it. Killed if this process is interrupted (a time
    limit) or dies (the child asks the kernel for that), so no orphan keeps the WAL lock."""
    argv = [
        "nice", "-n", str(BUILD_NICENESS),
        sys.executable, "-m", "workers.adapters.vector_edge",
        str(path), str(search_threads), str(os.getpid()),
    ]  # fmt: skip
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _, stderr = child.communicate()
    except BaseException:
        child.kill()
        child.wait()
        raise
    if child.returncode != 0:
        detail = stderr.decode("utf-8", errors="replace").strip().splitlines()[-3:]
        raise RuntimeError(f"building the graph of {path.name} failed: {' / '.join(detail)}")


def _build_here(path: Path, search_threads: int, parent_pid: int) -> None:
    """The child's side of ``build_in_child``."""
    _die_with(parent_pid)
    sizes = _vector_sizes(path)
    vectors = {
        name: qe.EdgeVectorParams(size=size, distance=qe.Distance.Cosine)
        for name, size in sizes.items()
    }
    shard = qe.EdgeShard.load(
        str(path), qe.EdgeConfig(vectors=vectors, max_search_threads=search_threads)
    )
    try:
        shard.optimize()
        shard.flush()
    finally:
        shard.close()


def _die_with(parent_pid: int) -> None:
    """Ask Linux to kill this process when its parent dies (best effort elsewhere)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:  # the parent died before the request was made
        raise SystemExit("parent gone")


def _nearest(
    vector: Sequence[float],
    using: str,
    flt: qe.Filter,
    params: qe.SearchParams,
    limit: int,
    with_payload: bool,
) -> qe.QueryRequest:
    return qe.QueryRequest(
        limit=limit,
        query=qe.Query.Nearest(list(vector), using=using),
        filter=flt,
        params=params,
        with_payload=with_payload,
    )


def _fused(
    content: Sequence[qe.ScoredPoint],
    context_scores: dict[int, float],
    context_payloads: dict[int, Any],
    fusion: ContextFusion,
    limit: int,
    with_payload: bool,
) -> list[VectorHit]:
    """w_content·cos(content) + w_context·cos(context) over the union of a content search
    and the context search (given weighted), best first, ties by id."""
    scores = dict(context_scores)
    payloads = dict(context_payloads) if with_payload else context_payloads
    weight = fusion.content_weight
    # The content side's own id objects are handed back (building a UUID costs ~0.7 µs).
    ids: dict[int, uuid.UUID] = {}
    for p in content:
        point_id = p.id
        key = _int_id(point_id)
        if isinstance(point_id, uuid.UUID):
            ids[key] = point_id
        scores[key] = scores.get(key, 0.0) + weight * p.score
        if with_payload:
            payloads[key] = p.payload
    best = heapq.nsmallest(limit, scores.items(), key=_best_first)
    return [
        VectorHit(
            id=ids.get(key) or uuid.UUID(int=key),
            score=score,
            payload=_own_payload(payloads.get(key)) if with_payload else {},
        )
        for key, score in best
    ]


def _int_id(key: Any) -> int:
    """A point id as the integer of its UUID (every id the adapter writes is a UUID)."""
    return key.int if isinstance(key, uuid.UUID) else uuid.UUID(str(key)).int


def _best_first(item: tuple[int, float]) -> tuple[float, int]:
    # Ties by id: the integers order as the UUIDs do.
    return (-item[1], item[0])


def _point(point: VectorPoint) -> qe.Point:
    vectors: dict[str, Any] = {CONTENT_VECTOR: point.vector}
    if point.context is not None:
        vectors[CONTEXT_VECTOR] = point.context
    if point.code is not None:
        vectors[CODE_VECTOR] = point.code
    payload = dict(point.payload)
    tenant, task = payload.get("tenant_id"), payload.get("task_id")
    if isinstance(tenant, str) and isinstance(task, str):
        payload[SCOPE_FIELD] = scope_key(tenant, task)
    return qe.Point(point.id, vectors, payload)


def _own_payload(payload: dict[str, Any] | None) -> dict[str, Any]:
    """A point's payload as its writer gave it (the adapter's scope field left out)."""
    if not payload:
        return {}
    return {key: value for key, value in payload.items() if key != SCOPE_FIELD}


def _read_state(path: Path) -> dict[str, Any]:
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    if not isinstance(state, dict):
        raise ValueError(f"{path} is not an alias file")
    return state


def _vector_sizes(path: Path) -> dict[str, int]:
    """The stored vector sizes, from the shard's own config file (ShardInfo omits them)."""
    try:
        config = json.loads((path / CONFIG_FILE).read_text())
        return {name: int(spec["size"]) for name, spec in config["vectors"].items()}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _hits(points: Sequence[qe.ScoredPoint]) -> list[VectorHit]:
    # The engine's own answer, typed here: built without a second validation (a context()
    # call reads a few hundred of them).
    hits = []
    for p in points:
        key = p.id  # the engine builds a new id object on each access: read it once
        hits.append(
            VectorHit(
                id=key if isinstance(key, uuid.UUID) else uuid.UUID(str(key)),
                score=float(p.score),
                payload=_own_payload(p.payload),
            )
        )
    return hits


def _scope_filter(
    tenant_id: str | None,
    task_id: str | None,
    since_ts: float | None,
    ids: Sequence[uuid.UUID] | None = None,
    *,
    scoped: bool = False,
) -> qe.Filter:
    """The search's scope as engine conditions. In a ``scoped`` collection a tenant's task
    is one condition on ``SCOPE_FIELD`` (the tenant's stays, as a second guard)."""
    must: list[qe.FieldCondition | qe.HasIdCondition] = []
    if scoped and tenant_id is not None and task_id is not None:
        key = scope_key(tenant_id, task_id)
        must.append(qe.FieldCondition(key=SCOPE_FIELD, match=qe.MatchValue(key)))
        task_id = None
    if tenant_id is not None:
        must.append(qe.FieldCondition(key="tenant_id", match=qe.MatchValue(tenant_id)))
    if task_id is not None:
        must.append(qe.FieldCondition(key="task_id", match=qe.MatchValue(task_id)))
    if since_ts is not None:
        must.append(qe.FieldCondition(key="ts", range=qe.RangeFloat(gte=since_ts)))
    if ids is not None:
        must.append(qe.HasIdCondition(set(ids)))
    return qe.Filter(must=list(must))


if __name__ == "__main__":
    _build_here(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
