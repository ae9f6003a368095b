"""Export a tenant as ``memharness.export/1`` JSON Lines (``pipelines.own.export_format``).

One REPEATABLE READ, READ ONLY transaction gives every section the same snapshot, so a link
never names a memory the file lacks even while writers go on. Each table is read through a
server-side cursor in batches of ``EXPORT_BATCH`` rows: memory use stays flat whatever the
tenant's size, and nothing is locked for writers.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Generator
from datetime import UTC, datetime
from typing import Any, TextIO

from psycopg import Connection
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from pipelines.own.export_format import (
    SCHEMA,
    CheckpointLine,
    EndLine,
    EventLine,
    ExportCounts,
    ExportLine,
    HeaderLine,
    LineCounts,
    LinkLine,
    MemoryLine,
    SemanticLine,
    dump_line,
    tombstone_fields,
)
from pipelines.records import check_id

# Rows fetched per round trip of a server-side cursor: at ~1 KB a memory, 2,000 rows keep
# a batch near 2 MB and the round trips a small share of the time spent encoding lines.
EXPORT_BATCH = 2000

Progress = Callable[[int, int | None], None]

MEMORY_SQL = """
SELECT id, user_id, agent_id, task_id, session_id, ts, type, content, summary, idempotency_key,
       importance, access_count, last_accessed_at, related_ids, decay_factor, level, modality,
       metadata, status, status_reason, version, parent_ids, superseded_by, supersedes,
       corrected_by, change_reason, forgotten_at, linked_at, created_at, updated_at
FROM memories WHERE tenant_id = %(tenant)s ORDER BY ts, id
"""
LINK_SQL = """
SELECT l.src_id, l.dst_id, l.kind AS link_kind, l.weight, l.reason, l.created_at
FROM memory_links l JOIN memories m ON m.id = l.src_id
WHERE m.tenant_id = %(tenant)s ORDER BY l.src_id, l.dst_id, l.kind
"""
SEMANTIC_SQL = """
SELECT id, user_id, agent_id, scope, kind AS knowledge_kind, content, confidence, source_ids,
       conditions, status, conflicts_with, reason, created_at, updated_at
FROM semantic_memories WHERE tenant_id = %(tenant)s ORDER BY created_at, id
"""
EVENT_SQL = """
SELECT subject, memory_id, event, version, related_id, reason, actor, at, detail
FROM memory_events WHERE tenant_id = %(tenant)s ORDER BY id
"""
# Insertion order, so the newest checkpoint of a task is the newest again after an import.
CHECKPOINT_SQL = """
SELECT id, task_id, parent_id, created_at, format_version, is_phase_transition, iteration, body
FROM checkpoints WHERE tenant_id = %(tenant)s ORDER BY seq
"""
COUNT_SQL = """
SELECT (SELECT count(*) FROM memories WHERE tenant_id = %(tenant)s),
       (SELECT count(*) FROM memory_links l JOIN memories m ON m.id = l.src_id
        WHERE m.tenant_id = %(tenant)s),
       (SELECT count(*) FROM semantic_memories WHERE tenant_id = %(tenant)s),
       (SELECT count(*) FROM memory_events WHERE tenant_id = %(tenant)s),
       (SELECT count(*) FROM checkpoints WHERE tenant_id = %(tenant)s)
"""
# The version most of the tenant's stored rows were embedded with: what the target's
# embedder will be compared with (the target re-embeds either way).
EMBEDDING_VERSION_SQL = """
SELECT embedding_version FROM memories
WHERE tenant_id = %(tenant)s AND status = 'stored' AND embedding_version IS NOT NULL
GROUP BY 1 ORDER BY count(*) DESC LIMIT 1
"""


def _memory(row: dict[str, Any]) -> MemoryLine:
    if row["status"] == "forgotten":
        row = tombstone_fields(row)
    return MemoryLine.model_validate(
        {
            **row,
            "related_ids": row["related_ids"] or [],
            "parent_ids": row["parent_ids"] or [],
            "metadata": row["metadata"] or {},
        }
    )


def _checkpoint(row: dict[str, Any]) -> CheckpointLine:
    body = bytes(row.pop("body"))
    return CheckpointLine.model_validate({**row, **CheckpointLine.encode_body(body)})


SECTIONS: tuple[tuple[str, str, Callable[[dict[str, Any]], ExportLine]], ...] = (
    ("memory", MEMORY_SQL, _memory),
    ("link", LINK_SQL, LinkLine.model_validate),
    ("semantic", SEMANTIC_SQL, lambda row: SemanticLine.model_validate(
        {**row, "source_ids": row["source_ids"] or []}
    )),
    ("event", EVENT_SQL, lambda row: EventLine.model_validate(
        {**row, "detail": row["detail"] or {}}
    )),
    ("checkpoint", CHECKPOINT_SQL, _checkpoint),
)  # fmt: skip


def export_tenant(
    pool: ConnectionPool,
    tenant_id: str,
    out: TextIO,
    *,
    progress: Progress | None = None,
) -> ExportCounts:
    """Write ``tenant_id``'s memories, links, knowledge, events and checkpoints to ``out``.

    Returns the counts the end line carries. ``progress(done, total)`` is called after each
    batch with the lines written so far and the total the snapshot holds.
    """
    counts = ExportCounts()
    for chunk in export_chunks(pool, tenant_id, counts=counts, progress=progress):
        out.write(chunk)
    out.flush()
    return counts


def export_chunks(
    pool: ConnectionPool,
    tenant_id: str,
    *,
    counts: ExportCounts | None = None,
    progress: Progress | None = None,
) -> Generator[str, None, None]:
    """The export as text chunks (the header line, a batch of lines at a time, the end line),
    read from one snapshot: what ``export_tenant`` writes and the API streams. Closing the
    iterator early ends the snapshot's transaction."""
    tenant = check_id("tenant_id", tenant_id)
    assert tenant is not None
    params = {"tenant": tenant}
    counts = counts if counts is not None else ExportCounts()
    with pool.connection() as conn, conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        total_row = conn.execute(COUNT_SQL, params).fetchone()
        total = sum(int(n) for n in total_row) if total_row else None
        version_row = conn.execute(EMBEDDING_VERSION_SQL, params).fetchone()
        header = HeaderLine(
            schema_id=SCHEMA,
            tenant_id=tenant,
            exported_at=datetime.now(UTC),
            embedding_version=version_row[0] if version_row else None,
        )
        yield dump_line(header) + "\n"
        for kind, query, to_line in SECTIONS:
            yield from _export_section(conn, query, params, to_line, counts, kind, progress, total)
    yield dump_line(EndLine(counts=counts)) + "\n"


def _export_section(
    conn: Connection[Any],
    query: str,
    params: dict[str, Any],
    to_line: Callable[[dict[str, Any]], ExportLine],
    counts: LineCounts,
    kind: str,
    progress: Progress | None,
    total: int | None,
) -> Generator[str, None, None]:
    name = f"export_{kind}_{uuid.uuid4().hex[:8]}"
    with conn.cursor(name=name, row_factory=dict_row) as cur:
        cur.itersize = EXPORT_BATCH
        cur.execute(query, params)
        while rows := cur.fetchmany(EXPORT_BATCH):
            yield "".join(dump_line(to_line(row)) + "\n" for row in rows)
            counts.add(kind, len(rows))
            if progress is not None:
                progress(counts.total, total)
