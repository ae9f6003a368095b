"""The vector index port over qdrant-client: a Qdrant server (``QDRANT_URL``) or local mode.

Aliases are Qdrant's own: a switch is one ``update_collection_aliases`` call holding the
delete and the create, which Qdrant applies atomically. The points deleted since a
collection was built are counted in the collection's metadata (read-modify-write: with
several workers deleting at once the count is approximate, which is all the rebuild rule
needs). The search ``ef`` of each collection is kept there too, and the embedding version
of the vectors it holds.

Local mode keeps its data in a directory and takes an exclusive lock on it: exactly one
process may open it (the store owner, see docs/how-it-works.md); it ignores HNSW,
quantization and payload-index settings. Tenant scope is a filter inside every query, never
applied to the results afterwards.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from qdrant_client import QdrantClient, models

from pipelines.index.vectors import (
    CODE_VECTOR,
    CONTENT_VECTOR,
    CONTEXT_VECTOR,
    CollectionParams,
    CollectionStats,
    ContextFusion,
    VectorHit,
    VectorPoint,
)

log = logging.getLogger(__name__)

# See workers/adapters/vector_edge.py: the same fusion depth.
FUSION_PREFETCH_FACTOR = 3
# Qdrant builds a 100k-point HNSW graph in a couple of minutes on small machines; a
# rebuild waits this long for it before switching anyway (search stays exact meanwhile).
OPTIMIZE_WAIT_S = 600
DELETED_KEY = "memharness_deleted"
SEARCH_EF_KEY = "memharness_search_ef"
EMBEDDING_VERSION_KEY = "memharness_embedding_version"
INDEXED_FIELDS: tuple[tuple[str, models.PayloadSchemaType], ...] = (
    ("tenant_id", models.PayloadSchemaType.KEYWORD),
    ("task_id", models.PayloadSchemaType.KEYWORD),
    ("level", models.PayloadSchemaType.INTEGER),
    ("ts", models.PayloadSchemaType.FLOAT),
)
_PQ = {
    "x4": models.CompressionRatio.X4,
    "x8": models.CompressionRatio.X8,
    "x16": models.CompressionRatio.X16,
    "x32": models.CompressionRatio.X32,
    "x64": models.CompressionRatio.X64,
}


class QdrantIndex:
    def __init__(self, *, url: str = "", path: Path | None = None, api_key: str | None = None):
        if url:
            self._client = QdrantClient(url=url, api_key=api_key, timeout=10)
            self.local = False
        elif path is not None:
            path.mkdir(parents=True, exist_ok=True)
            self._client = QdrantClient(path=str(path))
            self.local = True
        else:
            self._client = QdrantClient(location=":memory:")
            self.local = True
        self._known: dict[str, int] = {}
        self._ef: dict[str, int | None] = {}
        # The named vectors of each physical collection: Qdrant cannot add one to an existing
        # collection, so one built before code vectors has none until it is rebuilt.
        self._names: dict[str, frozenset[str]] = {}

    # -- names ------------------------------------------------------------------------------

    def _aliases(self) -> dict[str, str]:
        return {a.alias_name: a.collection_name for a in self._client.get_aliases().aliases}

    def resolve(self, name: str) -> str | None:
        target = self._aliases().get(name)
        if target is not None:
            return target
        return name if self._client.collection_exists(name) else None

    def collections(self) -> list[str]:
        return sorted(c.name for c in self._client.get_collections().collections)

    def switch_alias(self, alias: str, collection: str) -> str | None:
        if not self._client.collection_exists(collection):
            raise LookupError(f"collection {collection} does not exist")
        previous = self._aliases().get(alias)
        operations: list[models.CreateAliasOperation | models.DeleteAliasOperation] = []
        if previous is not None:
            operations.append(
                models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=alias))
            )
        operations.append(
            models.CreateAliasOperation(
                create_alias=models.CreateAlias(collection_name=collection, alias_name=alias)
            )
        )
        self._client.update_collection_aliases(change_aliases_operations=operations)
        return previous

    # -- collections ------------------------------------------------------------------------

    def ensure_collection(
        self,
        name: str,
        dim: int,
        params: CollectionParams | None = None,
        embedding_version: str | None = None,
    ) -> None:
        if self._known.get(name) == dim:
            return
        physical = self.resolve(name)
        if physical is None:
            physical = f"{name}__g1"
            if not self._client.collection_exists(physical):
                self.create_collection(
                    physical, dim, params or CollectionParams(), embedding_version
                )
            self.switch_alias(name, physical)
        else:
            info = self._client.get_collection(physical)
            vectors = info.config.params.vectors
            sizes = {k: v.size for k, v in vectors.items()} if isinstance(vectors, dict) else {}
            size = sizes.get(CONTENT_VECTOR)
            if size != dim:
                raise ValueError(
                    f"collection {name} holds {size}-d vectors but the embedder makes {dim}-d; "
                    "re-embed into a new collection instead of mixing versions"
                )
            if CONTEXT_VECTOR not in sizes:
                raise ValueError(
                    f"collection {name} has no {CONTEXT_VECTOR} vector; rebuild it "
                    "(memharness index rebuild) to add one"
                )
            if CODE_VECTOR not in sizes:
                log.warning(
                    "collection %s has no %s vector: code memories are found by their content "
                    "only until it is rebuilt (task memory.maintenance.rebuild_index)",
                    name,
                    CODE_VECTOR,
                )
        self._known[name] = dim

    def create_collection(
        self,
        name: str,
        dim: int,
        params: CollectionParams,
        embedding_version: str | None = None,
    ) -> None:
        metadata: dict[str, Any] = {DELETED_KEY: 0, SEARCH_EF_KEY: params.search_ef}
        if embedding_version is not None:
            metadata[EMBEDDING_VERSION_KEY] = embedding_version
        vector = models.VectorParams(size=dim, distance=models.Distance.COSINE)
        self._client.create_collection(
            name,
            vectors_config={CONTENT_VECTOR: vector, CONTEXT_VECTOR: vector, CODE_VECTOR: vector},
            hnsw_config=models.HnswConfigDiff(
                m=params.hnsw_m, ef_construct=params.hnsw_ef_construct
            ),
            quantization_config=(
                models.ProductQuantization(
                    product=models.ProductQuantizationConfig(compression=_PQ[params.pq])
                )
                if params.pq
                else None
            ),
            metadata=metadata,
        )
        if not self.local:  # local mode ignores payload indexes (and says so)
            for field, schema in INDEXED_FIELDS:
                self._client.create_payload_index(name, field, field_schema=schema, wait=True)

    def drop_collection(self, name: str) -> None:
        if name in self._aliases().values():
            raise ValueError(f"collection {name} is behind an alias; switch it first")
        self._client.delete_collection(name)
        self._known = {k: v for k, v in self._known.items() if k != name}
        self._ef.pop(name, None)
        self._names.pop(name, None)

    def _metadata(self, physical: str) -> dict[str, Any]:
        return dict(self._client.get_collection(physical).config.metadata or {})

    def embedding_version(self, collection: str) -> str | None:
        physical = self.resolve(collection)
        if physical is None:
            return None
        version = self._metadata(physical).get(EMBEDDING_VERSION_KEY)
        return None if version is None else str(version)

    def set_embedding_version(self, collection: str, version: str) -> None:
        physical = self.resolve(collection)
        if physical is None:
            raise LookupError(f"collection {collection} does not exist")
        metadata = self._metadata(physical)
        metadata[EMBEDDING_VERSION_KEY] = version
        self._client.update_collection(physical, metadata=metadata)

    # -- points -----------------------------------------------------------------------------

    def _has_vector(self, collection: str, name: str) -> bool:
        physical = self.resolve(collection)
        if physical is None:
            return False
        names = self._names.get(physical)
        if names is None:
            vectors = self._client.get_collection(physical).config.params.vectors
            names = frozenset(vectors) if isinstance(vectors, dict) else frozenset()
            self._names[physical] = names
        return name in names

    def upsert(self, collection: str, points: Sequence[VectorPoint]) -> None:
        if not points:
            return
        code = any(p.code is not None for p in points) and self._has_vector(collection, CODE_VECTOR)
        self._client.upsert(
            collection,
            points=[
                models.PointStruct(id=str(p.id), vector=_vectors(p, code=code), payload=p.payload)
                for p in points
            ],
            wait=True,
        )

    def delete(self, collection: str, ids: Sequence[uuid.UUID]) -> None:
        if not ids:
            return
        physical = self.resolve(collection)
        if physical is None:
            raise LookupError(f"collection {collection} does not exist")
        existing = self._client.retrieve(
            physical, [str(i) for i in ids], with_payload=False, with_vectors=False
        )
        self._client.delete(
            physical, points_selector=models.PointIdsList(points=[str(i) for i in ids]), wait=True
        )
        if existing:
            metadata = self._metadata(physical)
            metadata[DELETED_KEY] = int(metadata.get(DELETED_KEY, 0)) + len(existing)
            self._client.update_collection(physical, metadata=metadata)

    def count(self, collection: str, tenant_id: str | None = None) -> int:
        if self.resolve(collection) is None:
            return 0
        flt = _scope_filter(tenant_id, None, None) if tenant_id is not None else None
        return int(self._client.count(collection, count_filter=flt, exact=True).count)

    def stats(self, collection: str) -> CollectionStats:
        physical = self.resolve(collection)
        if physical is None:
            raise LookupError(f"collection {collection} does not exist")
        info = self._client.get_collection(physical)
        metadata = dict(info.config.metadata or {})
        return CollectionStats(
            name=physical,
            points=int(info.points_count or 0),
            deleted=int(metadata.get(DELETED_KEY, 0)),
            segments=int(info.segments_count or 0),
        )

    def scroll_ids(
        self, collection: str, offset: uuid.UUID | None = None, limit: int = 1000
    ) -> tuple[list[uuid.UUID], uuid.UUID | None]:
        if self.resolve(collection) is None:
            return [], None
        records, nxt = self._client.scroll(
            collection,
            limit=limit,
            offset=str(offset) if offset is not None else None,
            with_payload=False,
            with_vectors=False,
        )
        return [uuid.UUID(str(r.id)) for r in records], (
            uuid.UUID(str(nxt)) if nxt is not None else None
        )

    def retrieve(self, collection: str, ids: Sequence[uuid.UUID]) -> list[VectorPoint]:
        if not ids or self.resolve(collection) is None:
            return []
        records = self._client.retrieve(
            collection, [str(i) for i in ids], with_payload=True, with_vectors=True
        )
        out = []
        for record in records:
            vectors: Any = record.vector or {}
            out.append(
                VectorPoint(
                    id=uuid.UUID(str(record.id)),
                    vector=list(vectors[CONTENT_VECTOR]),
                    context=list(vectors[CONTEXT_VECTOR]) if CONTEXT_VECTOR in vectors else None,
                    code=list(vectors[CODE_VECTOR]) if CODE_VECTOR in vectors else None,
                    payload=dict(record.payload or {}),
                )
            )
        return out

    def _search_params(self, collection: str) -> models.SearchParams | None:
        physical = self.resolve(collection)
        if physical is None or self.local:  # local mode searches exactly (and warns)
            return None
        if physical not in self._ef:
            ef = self._metadata(physical).get(SEARCH_EF_KEY)
            self._ef[physical] = int(ef) if ef is not None else None
        ef_value = self._ef[physical]
        return models.SearchParams(hnsw_ef=ef_value) if ef_value else None

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
        if self.resolve(collection) is None or (ids is not None and not ids):
            return []
        if using != CONTENT_VECTOR and not self._has_vector(collection, using):
            return []
        flt = _scope_filter(tenant_id, task_id, since_ts, ids)
        request = self._request(collection, vector, flt, limit, using, fusion, with_payload)
        (response,) = self._client.query_batch_points(collection, requests=[request])
        return _hits(response.points)

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
        if self.resolve(collection) is None:
            return [[] for _ in vectors]
        if using != CONTENT_VECTOR and not self._has_vector(collection, using):
            return [[] for _ in vectors]
        flt = _scope_filter(tenant_id, task_id, since_ts)
        responses = self._client.query_batch_points(
            collection,
            requests=[
                self._request(collection, vector, flt, limit, using, fusion, with_payload)
                for vector in vectors
            ],
        )
        return [_hits(response.points) for response in responses]

    def _request(
        self,
        collection: str,
        vector: Sequence[float],
        flt: models.Filter,
        limit: int,
        using: str,
        fusion: ContextFusion | None,
        with_payload: bool,
    ) -> models.QueryRequest:
        params = self._search_params(collection)
        if fusion is None:
            return models.QueryRequest(
                query=list(vector),
                using=using,
                filter=flt,
                params=params,
                limit=limit,
                with_payload=with_payload,
            )
        depth = limit * FUSION_PREFETCH_FACTOR
        return models.QueryRequest(
            prefetch=[
                models.Prefetch(
                    query=list(vector), using=CONTENT_VECTOR, filter=flt, params=params, limit=depth
                ),
                models.Prefetch(
                    query=fusion.context,
                    using=CONTEXT_VECTOR,
                    filter=flt,
                    params=params,
                    limit=depth,
                ),
            ],
            # w_content·cos(content) + w_context·cos(context), 0 where a side is absent.
            query=models.FormulaQuery(
                formula=models.SumExpression(
                    sum=[
                        models.MultExpression(mult=[fusion.content_weight, "$score[0]"]),
                        models.MultExpression(mult=[fusion.context_weight, "$score[1]"]),
                    ]
                ),
                defaults={"$score[0]": 0.0, "$score[1]": 0.0},
            ),
            filter=flt,
            limit=limit,
            with_payload=with_payload,
        )

    def build_index(self, collection: str) -> None:
        # The server builds graphs in its own process already.
        self.optimize(collection)

    def optimize_would_stall(self, collection: str) -> bool:
        # A server optimizes in its own process; local mode keeps no graphs.
        return False

    def optimize(self, collection: str) -> None:
        physical = self.resolve(collection)
        if physical is None:
            raise LookupError(f"collection {collection} does not exist")
        if self.local:
            return  # local mode keeps no segments to vacuum
        # An update with an empty optimizer diff makes the server re-plan its optimizers:
        # vacuum of deleted points, merges and HNSW builds run in the background. Wait for
        # them (status green) so that a rebuild switches to a collection with its graph.
        self._client.update_collection(physical, optimizers_config=models.OptimizersConfigDiff())
        deadline = time.monotonic() + OPTIMIZE_WAIT_S
        while time.monotonic() < deadline:
            if self._client.get_collection(physical).status == models.CollectionStatus.GREEN:
                return
            time.sleep(1.0)
        log.warning("%s still optimizing after %ss; going on", physical, OPTIMIZE_WAIT_S)

    def close(self) -> None:
        self._client.close()


def _vectors(point: VectorPoint, *, code: bool = True) -> dict[str, list[float]]:
    """The point's named vectors; its code vector only where the collection has one."""
    vectors = {CONTENT_VECTOR: point.vector}
    if point.context is not None:
        vectors[CONTEXT_VECTOR] = point.context
    if code and point.code is not None:
        vectors[CODE_VECTOR] = point.code
    return vectors


def _hits(points: Sequence[models.ScoredPoint]) -> list[VectorHit]:
    return [
        VectorHit(id=uuid.UUID(str(p.id)), score=float(p.score), payload=p.payload or {})
        for p in points
    ]


def _scope_filter(
    tenant_id: str | None,
    task_id: str | None,
    since_ts: float | None,
    ids: Sequence[uuid.UUID] | None = None,
) -> models.Filter:
    must: list[models.Condition] = []
    if tenant_id is not None:
        must.append(
            models.FieldCondition(key="tenant_id", match=models.MatchValue(value=tenant_id))
        )
    if task_id is not None:
        must.append(models.FieldCondition(key="task_id", match=models.MatchValue(value=task_id)))
    if since_ts is not None:
        must.append(models.FieldCondition(key="ts", range=models.Range(gte=since_ts)))
    if ids is not None:
        must.append(models.HasIdCondition(has_id=[str(i) for i in ids]))
    return models.Filter(must=must)
