"""Collections of the vector index and where reads and writes go.

Each kind of memory (episodic, semantic) has an alias that points at its live generation
(``<alias>__g<n>``). Each generation records the embedding version of the vectors it holds;
``dense_search_target`` answers None while the live generation holds another version, so a
score never mixes two models. The payload builders say what each point carries.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from config import Settings
from pipelines.index.vectors import CollectionParams
from pipelines.records import Level
from workers.clients import Clients

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


# The version recorded for a generation from before versions were kept whose vector size is
# not the embedder's: certainly another model.
UNRECORDED_VERSION = "unrecorded"


def _legacy_version(ctx: Clients, spec: IndexSpec, check_size: bool) -> str:
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
    ctx: Clients, spec: IndexSpec, *, record: bool = True
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


def require_current(ctx: Clients, spec: IndexSpec) -> None:
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


def dense_search_target(ctx: Clients, kind: str, *, max_age_s: float = 0.0) -> str | None:
    """The collection whose vectors are of the current embedder's version: the alias when
    its generation matches (or when nothing is indexed yet), else None: a re-embed run is
    due or in progress and dense recall must be skipped, so that no score mixes versions.

    Reads only (a ``Clients`` or the read path's stores). With a Qdrant server each
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
