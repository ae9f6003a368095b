"""The vector index and the embedder that fills it, as ports.

What the write path, the read path and index maintenance need of a vector store and of an
embedding model. Adapters in ``workers/adapters`` implement them (qdrant-edge, qdrant-client,
the hashing, sentence-transformers and OpenAI-compatible embedders).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field


@runtime_checkable
class Embedder(Protocol):
    @property
    def version(self) -> str:
        """Model and size, e.g. ``hashing-v2/384``: scores never mix two versions."""
        ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors of stored texts (memories, their context strings, knowledge)."""
        ...


@runtime_checkable
class QueryEmbedder(Embedder, Protocol):
    """An embedder trained with a different form for questions than for the texts that
    answer them (e5's ``query: `` and ``passage: `` prefixes): the read path embeds what it
    is asked with ``embed_query``, everything stored with ``embed``."""

    def embed_query(self, texts: Sequence[str]) -> list[list[float]]: ...


def embed_queries(embedder: Embedder, texts: Sequence[str]) -> list[list[float]]:
    """Vectors of questions asked of the store: ``embed_query`` where the embedder has one
    (an asymmetric model), else ``embed`` (a symmetric one: the same vector either way)."""
    embed_query = getattr(embedder, "embed_query", None)
    if embed_query is None:
        return embedder.embed(texts)
    vectors: list[list[float]] = embed_query(texts)
    return vectors


# Names of the dense vectors of a point: what the memory says, the situation it was written
# in (phase, focus, trigger; ``pipelines.index.context_vector``), and for a memory of
# ``modality=code`` what its code says read as words (``pipelines.text.code.code_text``).
CONTENT_VECTOR = "content"
CONTEXT_VECTOR = "context"
CODE_VECTOR = "code"


class VectorPoint(BaseModel):
    """One memory in the index. ``vector`` is the content vector; ``context`` the optional
    context vector, ``code`` the code vector of a code memory (same size). The id is the
    memory id: deleting the point deletes all three."""

    model_config = ConfigDict(frozen=True)

    id: uuid.UUID
    vector: list[float]
    payload: dict[str, Any]
    context: list[float] | None = None
    code: list[float] | None = None


# A point's (tenant, task) pair as one indexed payload value: a task-scoped search then
# filters on one keyword index instead of intersecting the tenant's and the task's (at 100k
# points a batch of four searches took 3.5 ms with the two conditions and 1.2 with one).
SCOPE_FIELD = "scope"


def scope_key(tenant_id: str, task_id: str) -> str:
    """The ``SCOPE_FIELD`` value of a tenant's task: the JSON of the pair, so no two pairs
    share a value whatever characters their ids hold."""
    return json.dumps([tenant_id, task_id], ensure_ascii=False, separators=(",", ":"))


class VectorHit(NamedTuple):
    """One point of a search answer. A named tuple, not a model: the adapters build a
    hundred or more per search from values the engine already typed (a third of a
    model's cost), and every adapter gives ``payload`` its own dict."""

    id: uuid.UUID
    score: float
    payload: dict[str, Any]


class CollectionParams(BaseModel):
    """Index parameters of one collection (docs/configuration.md). ``pq`` is the product
    quantization compression ratio (``x4`` … ``x32``), or None for full-precision search."""

    model_config = ConfigDict(frozen=True)

    hnsw_m: int = Field(16, ge=4, le=128)
    hnsw_ef_construct: int = Field(200, ge=4, le=4096)
    search_ef: int = Field(128, ge=1, le=4096)
    pq: str | None = Field(None, pattern=r"^x(4|8|16|32|64)$")


class CollectionStats(BaseModel):
    """What the maintenance rules need: live points and points deleted since the build."""

    model_config = ConfigDict(frozen=True)

    name: str
    points: int = Field(ge=0)
    deleted: int = Field(ge=0)
    segments: int = Field(ge=0)

    @property
    def deleted_ratio(self) -> float:
        total = self.points + self.deleted
        return self.deleted / total if total else 0.0


class ContextFusion(BaseModel):
    """Search both named vectors; a hit scores content_weight·cos(content) +
    context_weight·cos(context), a side the point is missing from counting 0."""

    model_config = ConfigDict(frozen=True)

    context: list[float]
    content_weight: float = Field(ge=0.0)
    context_weight: float = Field(ge=0.0)


@runtime_checkable
class VectorIndex(Protocol):
    """A narrow vector store: tenant scope is a required argument of every read.

    Readers and writers name collections by alias (``memharness_episodic``); the physical
    collection behind an alias is a generation (``memharness_episodic__g3``) that a rebuild
    replaces by switching the alias in one call. Every method taking ``collection`` accepts
    either an alias or a physical name.
    """

    def ensure_collection(
        self,
        name: str,
        dim: int,
        params: CollectionParams | None = None,
        embedding_version: str | None = None,
    ) -> None:
        """Make ``name`` usable: an existing alias or collection is checked for its vector
        size; otherwise generation 1 is created with ``params`` and aliased as ``name``,
        recording ``embedding_version`` as the version of the vectors it holds."""
        ...

    def create_collection(
        self,
        name: str,
        dim: int,
        params: CollectionParams,
        embedding_version: str | None = None,
    ) -> None:
        """A new physical collection (content, context and code vectors, payload indexes) that
        records ``embedding_version``: the embedder version of every vector it will hold."""
        ...

    def embedding_version(self, collection: str) -> str | None:
        """The embedding version recorded for the physical collection behind ``collection``
        (alias or name); None when none was recorded (a store from before versions were
        kept) or the collection does not exist."""
        ...

    def set_embedding_version(self, collection: str, version: str) -> None:
        """Record ``version`` for the physical collection behind ``collection``."""
        ...

    def drop_collection(self, name: str) -> None: ...

    def collections(self) -> list[str]:
        """Physical collections, sorted."""
        ...

    def resolve(self, name: str) -> str | None:
        """The physical collection behind an alias (or the name itself); None if neither."""
        ...

    def switch_alias(self, alias: str, collection: str) -> str | None:
        """Point ``alias`` at ``collection`` atomically; returns the previous target."""
        ...

    def upsert(self, collection: str, points: Sequence[VectorPoint]) -> None: ...

    def delete(self, collection: str, ids: Sequence[uuid.UUID]) -> None:
        """Delete by ids; those that existed count towards ``stats().deleted``."""
        ...

    def count(self, collection: str, tenant_id: str | None = None) -> int: ...

    def stats(self, collection: str) -> CollectionStats: ...

    def scroll_ids(
        self, collection: str, offset: uuid.UUID | None = None, limit: int = 1000
    ) -> tuple[list[uuid.UUID], uuid.UUID | None]:
        """One page of point ids in id order and the offset of the next (None: done)."""
        ...

    def retrieve(self, collection: str, ids: Sequence[uuid.UUID]) -> list[VectorPoint]:
        """The stored points (every vector and the payload) of those ``ids`` that exist."""
        ...

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
        """Nearest points inside the tenant's scope. With ``fusion`` the content vector
        (``vector``) and the context vector are searched together and each score is the
        weighted sum of the two cosines (``ContextFusion``). ``with_payload=False`` returns
        ids and scores only (the read path reads rows from PostgreSQL anyway). ``ids``
        restricts the search to those points (the scores of known memories, from their
        stored vectors)."""
        ...

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
        """``search`` of each vector with the same scope and options, in one call (one
        planned batch where the engine has one); the answers in the order of ``vectors``."""
        ...

    def optimize(self, collection: str) -> None:
        """Compaction: vacuum deleted points, merge segments, (re)build the HNSW graph."""
        ...

    def build_index(self, collection: str) -> None:
        """``optimize`` a collection that serves no reader yet (a rebuild's or a re-embed's
        next generation), away from the process's other work where the engine allows it."""
        ...

    def optimize_would_stall(self, collection: str) -> bool:
        """Whether ``optimize(collection)`` would build a graph inside this process while
        holding its other threads (an embedded engine's serving collection with a segment
        past the indexing threshold). The maintenance then rebuilds off the serving path."""
        ...

    def close(self) -> None: ...
