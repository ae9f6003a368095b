"""Points made from PostgreSQL rows, copied between generations, and the lock that keeps one
maintenance job per collection at a time.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from psycopg import Connection
from psycopg.rows import dict_row

from pipelines.index.context_vector import context_text
from pipelines.index.vectors import Embedder, VectorIndex, VectorPoint
from pipelines.records import Modality
from workers.clients import Clients
from workers.index.targets import EPISODIC, IndexBusy, IndexSpec, episodic_payload, semantic_payload

LOCK_KEY = "memharness:index:lock:{alias}"
# A build is verified, and caught up with the writes that landed during it, this many times
# before it is given up: each round is short, so only a store that keeps changing under a
# server-mode rebuild takes more than one.
VERIFY_ROUNDS = 3
CODE_MODALITY = Modality.CODE.value
# The hashing and remote embedders both take a few hundred texts per call comfortably.
EMBED_CHUNK = 256


# -- PostgreSQL side ---------------------------------------------------------------------------


def ids_with_status(
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


def fetch_live_rows(
    conn: Connection[Any], spec: IndexSpec, ids: Sequence[uuid.UUID]
) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            f"SELECT * FROM {spec.table} WHERE id = ANY(%s) AND status = ANY(%s)",
            (list(ids), list(spec.live_statuses)),
        )
        return list(cur.fetchall())


def code_vectors(
    code_embedder: Embedder | None, rows: Sequence[dict[str, Any]]
) -> list[list[float] | None]:
    """The code vector of each row of ``modality=code`` (None for the others, and for every
    row when code vectors are off), in one embedder call."""
    if code_embedder is None:
        return [None] * len(rows)
    code = [i for i, row in enumerate(rows) if row.get("modality") == CODE_MODALITY]
    vectors: list[list[float] | None] = [None] * len(rows)
    if code:
        embedded = code_embedder.embed([rows[i]["content"] for i in code])
        for i, vector in zip(code, embedded, strict=True):
            vectors[i] = vector
    return vectors


def build_points(
    embedder: Embedder,
    spec: IndexSpec,
    rows: Sequence[dict[str, Any]],
    code_embedder: Embedder | None = None,
) -> list[VectorPoint]:
    """Content and context vectors of ``rows`` (and the code vector of code memories, with
    ``code_embedder``), embedded in chunks, with their payloads."""
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
        codes = code_vectors(code_embedder if spec.kind == EPISODIC else None, chunk)
        payload_of = episodic_payload if spec.kind == EPISODIC else semantic_payload
        for i, row in enumerate(chunk):
            points.append(
                VectorPoint(
                    id=row["id"],
                    vector=vectors[i],
                    context=vectors[len(chunk) + i],
                    code=codes[i],
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


def chunks(ids: Iterable[uuid.UUID], size: int) -> Iterator[list[uuid.UUID]]:
    batch: list[uuid.UUID] = []
    for item in sorted(ids):
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def set_versions(
    conn: Connection[Any], spec: IndexSpec, ids: Sequence[uuid.UUID], version: str
) -> None:
    """Record on the rows the embedding version of the vectors just written for them."""
    if ids:
        conn.execute(
            f"UPDATE {spec.table} SET embedding_version = %s "
            "WHERE id = ANY(%s) AND embedding_version IS DISTINCT FROM %s",
            (version, list(ids), version),
        )


def upsert_rows(
    ctx: Clients, spec: IndexSpec, collection: str, rows: Sequence[dict[str, Any]]
) -> None:
    ctx.vectors.upsert(collection, build_points(ctx.embedder, spec, rows, ctx.code_embedder))
    with ctx.pool.connection() as conn:
        set_versions(conn, spec, [row["id"] for row in rows], ctx.embedder.version)


def embed_into(ctx: Clients, spec: IndexSpec, collection: str, ids: set[uuid.UUID]) -> int:
    """Re-embed the live rows of ``ids`` from PostgreSQL into ``collection``."""
    done = 0
    for batch in chunks(ids, ctx.settings.index_batch_size):
        with ctx.pool.connection() as conn:
            rows = fetch_live_rows(conn, spec, batch)
        upsert_rows(ctx, spec, collection, rows)
        done += len(rows)
    return done


def copy_into(ctx: Clients, source: str, target: str, ids: set[uuid.UUID]) -> int:
    """Copy the points ``ids`` (both vectors, payload) from ``source`` to ``target``."""
    done = 0
    for batch in chunks(ids, ctx.settings.index_batch_size):
        points = ctx.vectors.retrieve(source, batch)
        ctx.vectors.upsert(target, points)
        done += len(points)
    return done


@contextmanager
def maintenance_lock(ctx: Clients, alias: str) -> Iterator[None]:
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


def live_ids(ctx: Clients, spec: IndexSpec) -> set[uuid.UUID]:
    with ctx.pool.connection() as conn:
        return ids_with_status(conn, spec, spec.live_statuses)
