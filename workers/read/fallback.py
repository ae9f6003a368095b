"""``recall()`` while the vector index is known to be short of PostgreSQL: keyword hits.

A dense search over a collection that lost points answers only what is left of it (nothing,
for a deleted directory), and says nothing about it. While the owner's measurement
(``workers.index.completeness``) says the collection misses live rows, or while a re-embed
run keeps dense recall out, recall() also asks PostgreSQL's full-text index, which is
written in the memory's own transaction and so is whole: ``memories_search_vector``
(migration 0005, Han text as bigrams) through ``memories_search_idx``, with the same OR of
keywords as ``context()``'s sparse recall (``tsquery_of``). The two lists are fused by rank,
and the answer says ``degraded``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from psycopg.rows import dict_row

from pipelines.read.config import RRF_K
from workers.clients import Clients
from workers.read.sql import TASK_SCOPE_SQL, TENANT_SCOPE_SQL, TS_CONFIG, tsquery_of

KEYWORD_SQL = f"""
    SELECT m.id, m.task_id, m.session_id, m.ts, m.type, m.content, m.importance,
           ts_rank(m.search_tsv, q.query) AS s
    FROM to_tsquery('{TS_CONFIG}', %(q)s) AS q(query), memories m
    WHERE {{scope}} AND m.status = 'stored' AND m.search_tsv @@ q.query
    ORDER BY s DESC, m.id
    LIMIT %(limit)s
"""


def keyword_hits(
    ctx: Clients, *, tenant_id: str, query: str, task_id: str | None, limit: int
) -> list[dict[str, Any]]:
    """The best keyword matches in scope, as ``recall()`` hits (``score`` is ts_rank)."""
    tsquery = tsquery_of(query)
    if not tsquery:
        return []
    scope = TASK_SCOPE_SQL if task_id is not None else TENANT_SCOPE_SQL
    params = {"tenant": tenant_id, "task": task_id, "q": tsquery, "limit": limit}
    with ctx.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        cur.execute(KEYWORD_SQL.replace("{scope}", scope), params)
        rows = cur.fetchall()
    return [
        {
            "id": str(row["id"]),
            "score": round(float(row["s"]), 4),
            "task_id": row["task_id"],
            "session_id": row["session_id"],
            "timestamp": row["ts"].isoformat(),
            "type": row["type"],
            "content": row["content"],
            "importance": row["importance"],
        }
        for row in rows
    ]


def fuse_hits(
    dense: Sequence[dict[str, Any]], keyword: Sequence[dict[str, Any]], limit: int
) -> list[dict[str, Any]]:
    """Dense and keyword hits in one list by reciprocal rank (``RRF_K``, as ``context()``
    fuses its recalls), one hit per memory, the dense one kept where both found it (its
    score is a cosine); ties by id."""
    fused: dict[str, float] = {}
    hit_of: dict[str, dict[str, Any]] = {}
    for hits in (dense, keyword):
        for rank, hit in enumerate(hits, start=1):
            key = str(hit["id"])
            fused[key] = fused.get(key, 0.0) + 1.0 / (RRF_K + rank)
            hit_of.setdefault(key, hit)
    order = sorted(fused, key=lambda key: (-fused[key], uuid.UUID(key)))
    return [hit_of[key] for key in order[:limit]]
