"""The vector index port over qdrant-client: a Qdrant server (``QDRANT_URL``) or local mode.

Local mode keeps its data in a directory and takes an exclusive lock on it: exactly one
process may open it (the store owner, see README "Embedded mode"). Tenant scope is a filter
inside every query, never applied to the results afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path

from qdrant_client import QdrantClient, models

from pipelines.ports import VectorHit, VectorPoint

CONTENT_VECTOR = "content"


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

    def ensure_collection(self, name: str, dim: int) -> None:
        if self._known.get(name) == dim:
            return
        if self._client.collection_exists(name):
            info = self._client.get_collection(name)
            vectors = info.config.params.vectors
            size = vectors[CONTENT_VECTOR].size if isinstance(vectors, dict) else None
            if size != dim:
                raise ValueError(
                    f"collection {name} holds {size}-d vectors but the embedder makes {dim}-d; "
                    "re-embed into a new collection instead of mixing versions"
                )
        else:
            self._client.create_collection(
                name,
                vectors_config={
                    CONTENT_VECTOR: models.VectorParams(size=dim, distance=models.Distance.COSINE)
                },
                hnsw_config=models.HnswConfigDiff(m=16, ef_construct=200),
            )
            for field, schema in (
                ("tenant_id", models.PayloadSchemaType.KEYWORD),
                ("task_id", models.PayloadSchemaType.KEYWORD),
                ("level", models.PayloadSchemaType.INTEGER),
                ("ts", models.PayloadSchemaType.FLOAT),
            ):
                if not self.local:  # local mode ignores payload indexes (and says so)
                    self._client.create_payload_index(name, field, field_schema=schema)
        self._known[name] = dim

    def upsert(self, collection: str, points: Sequence[VectorPoint]) -> None:
        if not points:
            return
        self._client.upsert(
            collection,
            points=[
                models.PointStruct(
                    id=str(point.id), vector={CONTENT_VECTOR: point.vector}, payload=point.payload
                )
                for point in points
            ],
            wait=True,
        )

    def delete(self, collection: str, ids: Sequence[uuid.UUID]) -> None:
        if ids:
            self._client.delete(
                collection, points_selector=models.PointIdsList(points=[str(i) for i in ids])
            )

    def count(self, collection: str, tenant_id: str | None = None) -> int:
        if not self._client.collection_exists(collection):
            return 0
        flt = _scope_filter(tenant_id, None) if tenant_id is not None else None
        return int(self._client.count(collection, count_filter=flt, exact=True).count)

    def search(
        self,
        collection: str,
        vector: Sequence[float],
        *,
        tenant_id: str,
        task_id: str | None = None,
        limit: int = 10,
    ) -> list[VectorHit]:
        if not self._client.collection_exists(collection):
            return []
        response = self._client.query_points(
            collection,
            query=list(vector),
            using=CONTENT_VECTOR,
            query_filter=_scope_filter(tenant_id, task_id),
            limit=limit,
            with_payload=True,
        )
        return [
            VectorHit(id=uuid.UUID(str(p.id)), score=float(p.score), payload=p.payload or {})
            for p in response.points
        ]

    def close(self) -> None:
        self._client.close()


def _scope_filter(tenant_id: str | None, task_id: str | None) -> models.Filter:
    must: list[models.Condition] = []
    if tenant_id is not None:
        must.append(
            models.FieldCondition(key="tenant_id", match=models.MatchValue(value=tenant_id))
        )
    if task_id is not None:
        must.append(models.FieldCondition(key="task_id", match=models.MatchValue(value=task_id)))
    return models.Filter(must=must)
