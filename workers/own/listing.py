"""Listing a tenant's memories and semantic knowledge, a keyset page at a time.

The filters and the cursor are checked by ``pipelines.own.listing``; this module turns them
into one query each. A page asks for one row more than its limit to know whether another
page follows. With a task the scope index ``memories_scope_ts_idx`` (tenant, task, ts DESC)
yields the rows in page order; without one the tenant's rows are sorted, which is what an
audit of a whole tenant costs.
"""

from __future__ import annotations

from typing import Any

from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from pipelines.own.listing import (
    MemoryItem,
    MemoryListing,
    MemoryPage,
    SemanticItem,
    SemanticListing,
    SemanticPage,
    check_memory_listing,
    check_semantic_listing,
    page_of,
)

MEMORY_ITEM_COLUMNS = (
    "id, tenant_id, user_id, agent_id, task_id, session_id, ts, type, level, status, "
    "status_reason, content, summary, importance, version, supersedes, corrected_by, "
    "superseded_by, parent_ids, change_reason, forgotten_at, created_at, updated_at"
)
SEMANTIC_ITEM_COLUMNS = (
    "id, tenant_id, user_id, agent_id, kind, content, confidence, conditions, scope, status, "
    "source_ids, conflicts_with, reason, created_at, updated_at"
)


def memory_query(listing: MemoryListing) -> tuple[str, dict[str, Any]]:
    where = ["tenant_id = %(tenant)s"]
    params: dict[str, Any] = {"tenant": listing.tenant_id, "limit": listing.limit + 1}
    if listing.task_id is not None:
        where.append("task_id = %(task)s")
        params["task"] = listing.task_id
    if listing.type is not None:
        where.append("type = %(type)s")
        params["type"] = listing.type
    if listing.level is not None:
        where.append("level = %(level)s")
        params["level"] = listing.level
    if listing.statuses is not None:
        where.append("status = ANY(%(statuses)s)")
        params["statuses"] = list(listing.statuses)
    if listing.since is not None:
        where.append("ts >= %(since)s")
        params["since"] = listing.since
    if listing.after is not None:
        where.append("(ts, id) < (%(after_at)s, %(after_id)s)")
        params["after_at"] = listing.after.at
        params["after_id"] = listing.after.id
    query = (
        f"SELECT {MEMORY_ITEM_COLUMNS} FROM memories WHERE {' AND '.join(where)} "
        "ORDER BY ts DESC, id DESC LIMIT %(limit)s"
    )
    return query, params


def semantic_query(listing: SemanticListing) -> tuple[str, dict[str, Any]]:
    where = ["tenant_id = %(tenant)s"]
    params: dict[str, Any] = {"tenant": listing.tenant_id, "limit": listing.limit + 1}
    if listing.kind is not None:
        where.append("kind = %(kind)s")
        params["kind"] = listing.kind
    if listing.statuses is not None:
        where.append("status = ANY(%(statuses)s)")
        params["statuses"] = list(listing.statuses)
    if listing.after is not None:
        where.append("(created_at, id) < (%(after_at)s, %(after_id)s)")
        params["after_at"] = listing.after.at
        params["after_id"] = listing.after.id
    query = (
        f"SELECT {SEMANTIC_ITEM_COLUMNS} FROM semantic_memories WHERE {' AND '.join(where)} "
        "ORDER BY created_at DESC, id DESC LIMIT %(limit)s"
    )
    return query, params


def _memory_item(row: dict[str, Any]) -> MemoryItem:
    if row["status"] == "forgotten":
        # A tombstone says that something was here and why it is gone, never what it said.
        row = {**row, "content": "", "summary": None}
    return MemoryItem.model_validate({**row, "parent_ids": row["parent_ids"] or []})


def list_memories(
    pool: ConnectionPool,
    tenant_id: str,
    *,
    task_id: str | None = None,
    type: str | None = None,
    level: int | str | None = None,
    status: str | None = None,
    since: Any = None,
    cursor: str | None = None,
    limit: int = 50,
) -> MemoryPage:
    """A page of the tenant's memories, newest first; ``next_cursor`` is None at the end.

    Default status ``stored`` (what the read paths return); ``status="any"`` lists every row,
    tombstones included. Raises InvalidInput naming the field and the limit."""
    listing = check_memory_listing(
        tenant_id,
        task_id=task_id,
        type=type,
        level=level,
        status=status,
        since=since,
        cursor=cursor,
        limit=limit,
    )
    query, params = memory_query(listing)
    with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(query, params).fetchall()
    items, next_cursor = page_of(
        [_memory_item(row) for row in rows], listing.limit, listing.fingerprint(), "ts"
    )
    return MemoryPage(items=items, next_cursor=next_cursor)


def list_semantic(
    pool: ConnectionPool,
    tenant_id: str,
    *,
    kind: str | None = None,
    status: str | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> SemanticPage:
    """A page of the tenant's semantic knowledge, newest first. Default statuses: the live
    ones (active, needs_confirmation); ``status="any"`` adds retired rows."""
    listing = check_semantic_listing(
        tenant_id, kind=kind, status=status, cursor=cursor, limit=limit
    )
    query, params = semantic_query(listing)
    with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(query, params).fetchall()
    items, next_cursor = page_of(
        [
            SemanticItem.model_validate({**row, "source_ids": row["source_ids"] or []})
            for row in rows
        ],
        listing.limit,
        listing.fingerprint(),
        "created_at",
    )
    return SemanticPage(items=items, next_cursor=next_cursor)
