"""Golden queries in PostgreSQL, and a run of them through the owner's recall.

A run asks every tenant's golden queries the way an agent's ``recall()`` does (embedded mode:
``memory.recall.search`` on the store owner; with a Qdrant server, in process), checks the
expected memory is in the top K, and stores one ``golden_runs`` row per tenant with the index
counts seen at the same moment. A tenant with no golden queries gets some drawn from its
memories first; a query whose memory is no longer stored (forgotten, corrected) is skipped.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from psycopg import Connection

from config import Settings
from pipelines.errors import InvalidInput, NotFound
from pipelines.health.golden import (
    GoldenOutcome,
    GoldenQuery,
    GoldenSummary,
    check_golden_set,
    draw_golden_queries,
    judge,
    summarise,
)
from pipelines.records import check_id
from workers.clients import Clients
from workers.index.targets import KINDS, index_spec
from workers.metrics import count_golden_run
from workers.publish import publish
from workers.queues import TaskName

log = logging.getLogger(__name__)

# Drawn from at most this many of a tenant's memories: the idf of a 2,000-memory sample ranks
# phrases as well as the whole store would, in a few milliseconds.
DRAW_SAMPLE = 2000
# Misses kept in a run's row, for the runbook ("which memory stopped being found?").
MISSES_KEPT = 20

Search = Callable[[str, str, int], list[str]]


def set_golden_queries(conn: Connection[Any], tenant_id: str, items: Sequence[object]) -> int:
    """Replace the tenant's user-set golden queries with ``items``; returns how many."""
    queries = check_golden_set(tenant_id, items)
    _check_owned(conn, tenant_id, queries)
    with conn.transaction():
        conn.execute(
            "DELETE FROM golden_queries WHERE tenant_id = %s AND source = 'user'", (tenant_id,)
        )
        _insert(conn, tenant_id, queries)
    return len(queries)


def add_golden_query(conn: Connection[Any], tenant_id: str, query: str, expected_id: str) -> str:
    [golden] = check_golden_set(tenant_id, [(query, expected_id)])
    _check_owned(conn, tenant_id, [golden])
    with conn.transaction():
        _insert(conn, tenant_id, [golden])
    return str(golden.id)


def _check_owned(conn: Connection[Any], tenant_id: str, queries: Sequence[GoldenQuery]) -> None:
    """Every expected memory is the tenant's (another tenant's id reads as unknown)."""
    wanted = sorted({q.expected_id for q in queries})
    if not wanted:
        return
    rows = conn.execute(
        "SELECT id::text FROM memories WHERE tenant_id = %s AND id = ANY(%s::uuid[])",
        (tenant_id, wanted),
    ).fetchall()
    found = {r[0] for r in rows}
    for memory_id in wanted:
        if memory_id not in found:
            raise NotFound("expected_id", memory_id)


def _insert(conn: Connection[Any], tenant_id: str, queries: Sequence[GoldenQuery]) -> None:
    if not queries:
        return
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO golden_queries (id, tenant_id, query, expected_id, source) "
            "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (id) DO NOTHING",
            [(q.id, tenant_id, q.query, q.expected_id, q.source) for q in queries],
        )


def list_golden_queries(conn: Connection[Any], tenant_id: str) -> list[dict[str, Any]]:
    check_id("tenant_id", tenant_id)
    rows = conn.execute(
        "SELECT id, query, expected_id, source, created_at FROM golden_queries "
        "WHERE tenant_id = %s ORDER BY source DESC, created_at, id",
        (tenant_id,),
    ).fetchall()
    return [
        {"id": str(r[0]), "query": r[1], "expected_id": str(r[2]), "source": r[3],
         "created_at": r[4].isoformat()}
        for r in rows
    ]  # fmt: skip


def draw_for_tenant(conn: Connection[Any], tenant_id: str, count: int) -> int:
    """Replace the tenant's drawn golden queries with ``count`` fresh ones."""
    check_id("tenant_id", tenant_id)
    if not 1 <= count <= 1000:
        raise InvalidInput("count", f"must be between 1 and 1000, got {count}", "1000")
    rows = conn.execute(
        "SELECT id::text, content FROM memories WHERE tenant_id = %s AND status = 'stored' "
        "AND level = 0 AND superseded_by IS NULL ORDER BY id LIMIT %s",
        (tenant_id, DRAW_SAMPLE),
    ).fetchall()
    drawn = draw_golden_queries([(r[0], r[1]) for r in rows], count)
    with conn.transaction():
        conn.execute(
            "DELETE FROM golden_queries WHERE tenant_id = %s AND source = 'drawn'", (tenant_id,)
        )
        _insert(conn, tenant_id, drawn)
    return len(drawn)


def _live_queries(conn: Connection[Any], tenant_id: str) -> list[tuple[str, str, str]]:
    """(query, expected id, source) of the tenant whose memory is still stored."""
    rows = conn.execute(
        "SELECT g.query, g.expected_id::text, g.source FROM golden_queries g "
        "JOIN memories m ON m.id = g.expected_id AND m.tenant_id = g.tenant_id "
        "WHERE g.tenant_id = %s AND m.status = 'stored' AND m.superseded_by IS NULL "
        "ORDER BY g.source DESC, g.id",
        (tenant_id,),
    ).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


def tenants_to_check(conn: Connection[Any]) -> list[str]:
    rows = conn.execute(
        "SELECT tenant_id FROM golden_queries UNION "
        "SELECT tenant_id FROM memories WHERE status = 'stored' GROUP BY tenant_id "
        "ORDER BY 1"
    ).fetchall()
    return [r[0] for r in rows]


def live_rows(conn: Connection[Any], settings: Settings) -> dict[str, int]:
    out = {}
    for kind in KINDS:
        spec = index_spec(settings, kind)
        row = conn.execute(
            f"SELECT count(*) FROM {spec.table} WHERE status = ANY(%s)",
            (list(spec.live_statuses),),
        ).fetchone()
        out[kind] = int(row[0]) if row else 0
    return out


def count_points(ctx: Clients) -> dict[str, int]:
    """Points per collection kind, counted on this process's index (the owner's, embedded)."""
    out = {}
    for kind in KINDS:
        alias = index_spec(ctx.settings, kind).alias
        out[kind] = ctx.vectors.count(alias) if ctx.vectors.resolve(alias) is not None else 0
    return out


def index_points(
    settings: Settings, timeout_s: float, ctx: Clients | None = None
) -> dict[str, int]:
    """The index's points per kind: asked of the store's owner in embedded mode (only it may
    open the store), counted on ``ctx``'s index with a Qdrant server."""
    if not settings.store_is_embedded:
        if ctx is not None:
            return count_points(ctx)
        own = Clients(settings, name="memharness-health")
        try:
            return count_points(own)
        finally:
            own.close()
    from workers.app import get_app

    result = publish(TaskName.INDEX_COUNTS, app=get_app(settings))
    counts: dict[str, int] = result.get(timeout=timeout_s, disable_sync_subtasks=False)
    return {str(k): int(v) for k, v in counts.items()}


def owner_search(ctx: Clients, timeout_s: float) -> Search:
    """``recall()``'s search as an agent would make it."""
    if not ctx.settings.store_is_embedded:
        from workers.read.search import search

        def local(tenant_id: str, query: str, limit: int) -> list[str]:
            hits = search(ctx, tenant_id=tenant_id, query=query, task_id=None, limit=limit)
            return [h["id"] for h in hits]

        return local
    from pipelines.read.hits import recall_hits
    from workers.app import get_app

    app = get_app(ctx.settings)

    def remote(tenant_id: str, query: str, limit: int) -> list[str]:
        # The index itself: keyword hits added over a short index would hide its damage.
        result = publish(
            TaskName.RECALL_SEARCH,
            app=app,
            tenant_id=tenant_id,
            query=query,
            limit=limit,
            fallback=False,
        )
        hits = recall_hits(result.get(timeout=timeout_s, disable_sync_subtasks=False))
        return [h["id"] for h in hits]

    return remote


def run_tenant(
    conn: Connection[Any], tenant_id: str, search: Search, settings: Settings
) -> tuple[GoldenSummary, list[GoldenOutcome]]:
    queries = _live_queries(conn, tenant_id)
    drawn_live = sum(1 for q in queries if q[2] == "drawn")
    has_user = any(q[2] == "user" for q in queries)
    if not has_user and drawn_live < settings.golden_draw_count // 2:
        # No user set, and most drawn answers are gone (or none drawn yet): draw again.
        draw_for_tenant(conn, tenant_id, settings.golden_draw_count)
        queries = _live_queries(conn, tenant_id)
    outcomes = []
    for query, expected_id, _ in queries:
        started = time.perf_counter()
        returned = search(tenant_id, query, settings.golden_top_k)
        outcomes.append(judge(expected_id, returned, time.perf_counter() - started))
    return summarise(outcomes), outcomes


def run_golden_queries(
    ctx: Clients,
    tenant_id: str | None = None,
    *,
    search: Search | None = None,
    points: dict[str, int] | None = None,
) -> dict[str, Any]:
    """One run over ``tenant_id`` (default: every tenant); one ``golden_runs`` row each."""
    settings = ctx.settings
    search = search or owner_search(ctx, settings.golden_timeout_s)
    if points is None:
        try:
            points = index_points(settings, settings.golden_timeout_s, ctx)
        except Exception as exc:  # the run's hit rate still says what retrieval does
            log.warning("index not counted in the golden run: %s", exc)
    out: dict[str, Any] = {}
    with ctx.pool.connection() as conn:
        rows = live_rows(conn, settings)
        tenants = [tenant_id] if tenant_id is not None else tenants_to_check(conn)
    for tenant in tenants:
        # One short transaction a tenant: the searches are other processes' work.
        with ctx.pool.connection() as conn:
            summary, outcomes = run_tenant(conn, tenant, search, settings)
            misses = [o.expected_id for o in outcomes if not o.hit][:MISSES_KEPT]
            conn.execute(
                "INSERT INTO golden_runs (tenant_id, queries, hits, hit_ratio, p50_s, p95_s, "
                "mrr, top_k, misses, index_points, live_rows) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (tenant, summary.queries, summary.hits, summary.hit_ratio, summary.p50_s,
                 summary.p95_s, summary.mrr, settings.golden_top_k, json.dumps(misses),
                 json.dumps(points) if points is not None else None, json.dumps(rows)),
            )  # fmt: skip
            if summary.hit_ratio is None:
                outcome = "empty"
            elif summary.hit_ratio >= settings.health_golden_min_ratio:
                outcome = "passed"
            else:
                outcome = "failed"
            count_golden_run(tenant, outcome)
            out[tenant] = {
                "queries": summary.queries,
                "hits": summary.hits,
                "hit_ratio": summary.hit_ratio,
                "p50_s": summary.p50_s,
                "p95_s": summary.p95_s,
                "mrr": summary.mrr,
                "outcome": outcome,
                "misses": misses,
            }
    return {"tenants": out, "index_points": points, "live_rows": rows}
