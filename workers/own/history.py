"""``history(memory_id)``: read from PostgreSQL, tenant-scoped. The logged events (corrections,
supersessions, stale summaries, re-derived knowledge, erasures) come from ``memory_events``;
what the sweeps record in their own tables is read from there: summaries that cover a version
(``parent_ids``), their quality rollbacks, evictions, and the knowledge citing it."""

from __future__ import annotations

import uuid
from typing import Any

from psycopg import Connection
from psycopg.rows import dict_row

from pipelines.errors import NotFound
from pipelines.own.history import HistoryEvent, MemoryHistory, MemoryVersion, build_history
from workers.own.forget import VERSION_CHAIN


def memory_history(conn: Connection[Any], tenant_id: str, memory_id: uuid.UUID) -> MemoryHistory:
    with conn.cursor(row_factory=dict_row) as cur:
        chain = [
            r["id"]
            for r in cur.execute(VERSION_CHAIN, {"id": memory_id, "tenant": tenant_id}).fetchall()
        ]
        if not chain:
            raise NotFound("memory_id", str(memory_id))
        rows = cur.execute(
            "SELECT id, version, status, content, ts, level, supersedes, corrected_by, "
            "change_reason, forgotten_at, created_at, status_reason FROM memories "
            "WHERE id = ANY(%s)",
            (chain,),
        ).fetchall()
        versions = [
            MemoryVersion(
                id=r["id"],
                version=r["version"],
                status=r["status"],
                content=r["content"],
                timestamp=r["ts"],
                level=r["level"],
                supersedes=r["supersedes"],
                corrected_by=r["corrected_by"],
                change_reason=r["change_reason"],
                forgotten_at=r["forgotten_at"],
            )
            for r in rows
        ]
        events = [
            HistoryEvent(
                at=r["created_at"],
                event="written",
                memory_id=r["id"],
                version=r["version"],
                reason=r["status_reason"] if r["status"] in ("discarded", "dead") else None,
            )
            for r in rows
        ]
        events += [
            HistoryEvent(**r)
            for r in cur.execute(
                "SELECT at, event, memory_id, version, related_id, reason, actor FROM "
                "memory_events WHERE memory_id = ANY(%s) AND subject = 'memory'",
                (chain,),
            ).fetchall()
        ]
        for r in cur.execute(
            "SELECT s.id, s.level, s.status, s.created_at, p AS parent FROM memories s, "
            "unnest(s.parent_ids) AS p WHERE s.tenant_id = %s AND s.level >= 1 "
            "AND s.parent_ids && %s::uuid[] AND p = ANY(%s)",
            (tenant_id, chain, chain),
        ).fetchall():
            events.append(
                HistoryEvent(
                    at=r["created_at"],
                    event=f"compressed into an L{r['level']} summary",
                    memory_id=r["parent"],
                    related_id=r["id"],
                    reason=f"the summary is {r['status']}",
                )
            )
        for r in cur.execute(
            "SELECT q.summary_id, q.checked_at, q.reason, p AS parent FROM quality_reports q "
            "JOIN memories s ON s.id = q.summary_id, unnest(s.parent_ids) AS p "
            "WHERE q.verdict = 'rollback' AND s.parent_ids && %s::uuid[] AND p = ANY(%s)",
            (chain, chain),
        ).fetchall():
            events.append(
                HistoryEvent(
                    at=r["checked_at"],
                    event="summary rolled back",
                    memory_id=r["parent"],
                    related_id=r["summary_id"],
                    reason=r["reason"],
                )
            )
        for r in cur.execute(
            "SELECT memory_id, evicted_at FROM evictions WHERE memory_id = ANY(%s)", (chain,)
        ).fetchall():
            events.append(
                HistoryEvent(
                    at=r["evicted_at"],
                    event="evicted",
                    memory_id=r["memory_id"],
                    reason="the forgetting curve fell below the eviction line",
                )
            )
        for r in cur.execute(
            "SELECT id, status, created_at, s AS source FROM semantic_memories, "
            "unnest(source_ids) AS s WHERE tenant_id = %s AND source_ids && %s::uuid[] "
            "AND s = ANY(%s)",
            (tenant_id, chain, chain),
        ).fetchall():
            events.append(
                HistoryEvent(
                    at=r["created_at"],
                    event="cited by semantic knowledge",
                    memory_id=r["source"],
                    related_id=r["id"],
                    reason=f"the knowledge is {r['status']}",
                )
            )
    return build_history(memory_id, versions, events)
