"""``MemoryClient.recall``: a plain dense search inside the tenant's scope, rows read back.

A question in code's terms (``looks_like_code``) searches code memories' code vectors first,
then the content vectors; the two answers are fused by rank as ``context()`` fuses them (the
code list above), each memory scored with its best cosine of the two.

``context()`` is the full read pipeline (rewrites, dense, sparse and temporal recall, rerank,
budgeted assembly); this is the single search an agent can ask for directly.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from psycopg.rows import dict_row

from pipelines.index.vectors import CODE_VECTOR, VectorHit, embed_queries
from pipelines.read.config import DEFAULT_CONFIG, RRF_K
from pipelines.text.code import looks_like_code
from workers.clients import Clients
from workers.index.completeness import index_degraded
from workers.index.targets import EPISODIC, dense_search_target
from workers.metrics import count_degraded_read
from workers.read.fallback import fuse_hits, keyword_hits

# Hits fetched past ``limit``: a row corrected or forgotten a moment ago (its point not purged
# yet) is skipped without shortening the answer, and hits tied at the cut are ordered by id
# rather than by where the engine happened to store them (an exported and re-imported tenant
# answers the same list).
EXTRA_HITS = 10
# Scores equal to this many decimals are a tie (float noise of the same vectors).
TIE_DECIMALS = 5


def ranked(hits: Sequence[VectorHit]) -> list[VectorHit]:
    """Content hits best first, ties by id."""
    return sorted(hits, key=lambda h: (-round(h.score, TIE_DECIMALS), str(h.id)))


def fuse_code_first(
    code: Sequence[VectorHit], content: Sequence[VectorHit], code_weight: float
) -> list[VectorHit]:
    """The code vectors' answer and the content vectors', one hit per memory: ordered by
    weighted reciprocal rank (the code list weighs ``code_weight``, as in ``context()``),
    each hit scored with its best cosine through either encoder."""
    fused: dict[uuid.UUID, float] = {}
    best: dict[uuid.UUID, VectorHit] = {}
    for weight, hits in ((code_weight, ranked(code)), (1.0, ranked(content))):
        for rank, hit in enumerate(hits, start=1):
            fused[hit.id] = fused.get(hit.id, 0.0) + weight / (RRF_K + rank)
            known = best.get(hit.id)
            if known is None or hit.score > known.score:
                best[hit.id] = hit
    return sorted(best.values(), key=lambda h: (-fused[h.id], str(h.id)))


def search(
    ctx: Clients, *, tenant_id: str, query: str, task_id: str | None, limit: int
) -> list[dict[str, Any]]:
    collection = dense_search_target(ctx, EPISODIC)
    if collection is None:
        # A re-embed run is building the current model's vectors: a dense score against the
        # old ones would mix versions. context() still answers from full-text and recency.
        return []
    code: list[VectorHit] = []
    code_embedder = ctx.code_embedder
    if code_embedder is not None and looks_like_code(query):
        # The dual encoder: a question in code's terms searches the code vectors first.
        code = ctx.vectors.search(
            collection,
            embed_queries(code_embedder, [query])[0],
            tenant_id=tenant_id,
            task_id=task_id,
            limit=limit + EXTRA_HITS,
            using=CODE_VECTOR,
        )
    content = ctx.vectors.search(
        collection,
        embed_queries(ctx.embedder, [query])[0],
        tenant_id=tenant_id,
        task_id=task_id,
        limit=limit + EXTRA_HITS,
    )
    hits = fuse_code_first(code, content, DEFAULT_CONFIG.code_weight) if code else ranked(content)
    if not hits:
        return []
    with ctx.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            "SELECT id, task_id, session_id, ts, type, content, summary, importance "
            "FROM memories WHERE id = ANY(%s) AND tenant_id = %s AND status = 'stored'",
            ([hit.id for hit in hits], tenant_id),
        )
        rows = {row["id"]: row for row in cur.fetchall()}
    results: list[dict[str, Any]] = []
    for hit in hits:
        row = rows.get(hit.id)
        if row is None:
            continue
        if len(results) == limit:
            break
        results.append(
            {
                "id": str(row["id"]),
                "score": round(hit.score, 4),
                "task_id": row["task_id"],
                "session_id": row["session_id"],
                "timestamp": row["ts"].isoformat(),
                "type": row["type"],
                "content": row["content"],
                "importance": row["importance"],
            }
        )
    return results


def search_answer(
    ctx: Clients,
    *,
    tenant_id: str,
    query: str,
    task_id: str | None,
    limit: int,
    fallback: bool = True,
) -> dict[str, Any]:
    """``recall()``'s answer: the hits and whether the index behind them is ``degraded``.

    Degraded (the collection known to miss live rows, or dense recall out during a re-embed
    run), the dense hits are fused with PostgreSQL's keyword hits (``workers.read.fallback``):
    an agent is never told it remembers nothing because the derived index is not whole.
    ``fallback=False`` leaves them out: the golden queries measure the index itself, and
    keyword hits would hide the damage they are there to catch."""
    degraded = index_degraded(ctx, EPISODIC) or dense_search_target(ctx, EPISODIC) is None
    hits = search(ctx, tenant_id=tenant_id, query=query, task_id=task_id, limit=limit)
    if degraded and fallback:
        count_degraded_read("recall")
        keyword = keyword_hits(ctx, tenant_id=tenant_id, query=query, task_id=task_id, limit=limit)
        hits = fuse_hits(hits, keyword, limit)
    return {"hits": hits, "degraded": degraded}
