"""Multi-hop reads over the causal links: "what does the delay of the auth module affect?" """

from __future__ import annotations

import uuid
from collections.abc import Sequence

from psycopg_pool import ConnectionPool
from pydantic import BaseModel, ConfigDict

from pipelines.cognition.link import (
    MemoryLink,
)
from pipelines.cognition.link import affected_by as affected_by_pipeline
from pipelines.records import EpisodicMemory
from workers.cognition.sql import (
    links_touching,
    recent_memories,
)
from workers.db.rows import fetch_rows

# Traversal starts from the tenant's most recent episodes.
TRAVERSAL_CANDIDATES = 2000


class PgLinks:
    """``LinkStore`` over ``memory_links``: one indexed query per hop, inside one tenant."""

    def __init__(self, pool: ConnectionPool, tenant_id: str) -> None:
        self._pool = pool
        self._tenant_id = tenant_id

    def links_touching(self, ids: Sequence[uuid.UUID]) -> list[MemoryLink]:
        with self._pool.connection() as conn:
            return links_touching(conn, self._tenant_id, ids)


class AffectedMemory(BaseModel):
    model_config = ConfigDict(frozen=True)

    memory_id: uuid.UUID
    content: str
    hops: int
    score: float
    path: tuple[uuid.UUID, ...]


class Traversal(BaseModel):
    model_config = ConfigDict(frozen=True)

    query: str
    starts: tuple[AffectedMemory, ...]
    affected: tuple[AffectedMemory, ...]


def affected_by(
    pool: ConnectionPool, tenant_id: str, query: str, *, max_hops: int = 3
) -> Traversal:
    """ "What does the delay of the auth module affect?": the memories the question is about,
    then what their causal links lead to, hop by hop (one query per hop)."""
    with pool.connection() as conn:
        memories: list[EpisodicMemory] = recent_memories(
            conn, tenant_id, limit=TRAVERSAL_CANDIDATES
        )
    roots, reached = affected_by_pipeline(
        query, memories, PgLinks(pool, tenant_id), max_hops=max_hops
    )
    with pool.connection() as conn:
        rows = fetch_rows(conn, [r.memory_id for r in reached])
    return Traversal(
        query=query,
        starts=tuple(
            AffectedMemory(memory_id=m.id, content=m.content, hops=0, score=1.0, path=(m.id,))
            for m in roots
        ),
        affected=tuple(
            AffectedMemory(
                memory_id=r.memory_id,
                content=rows[r.memory_id]["content"],
                hops=r.hops,
                score=round(r.score, 4),
                path=r.path,
            )
            for r in reached
            if r.memory_id in rows and rows[r.memory_id]["status"] == "stored"
        ),
    )
