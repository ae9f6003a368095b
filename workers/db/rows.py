"""Rows of ``memories`` as records, shared by every path that reads them."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from psycopg import Connection
from psycopg.rows import dict_row

from pipelines.records import EpisodicMemory, Level

MEMORY_COLUMNS = (
    "id, tenant_id, user_id, agent_id, task_id, session_id, ts, type, content, summary, "
    "embedding_version, importance, access_count, last_accessed_at, related_ids, decay_factor, "
    "level, modality, metadata, status, status_reason, version, parent_ids, superseded_by, "
    "supersedes, corrected_by, change_reason, forgotten_at"
)


def row_to_memory(row: Mapping[str, Any]) -> EpisodicMemory:
    """A ``memories`` row as the pipelines' record (a row without a status column: stored)."""
    return EpisodicMemory(
        id=row["id"],
        tenant_id=row["tenant_id"],
        user_id=row["user_id"],
        agent_id=row["agent_id"],
        task_id=row["task_id"],
        session_id=row["session_id"],
        timestamp=row["ts"],
        type=row["type"],
        content=row["content"],
        summary=row["summary"],
        embedding_version=row["embedding_version"],
        importance=row["importance"],
        access_count=row["access_count"],
        last_accessed_at=row["last_accessed_at"],
        related_memory_ids=tuple(row["related_ids"] or ()),
        decay_factor=row["decay_factor"],
        level=Level(row["level"]),
        modality=row["modality"],
        metadata=row["metadata"] or {},
        status=row.get("status") or "stored",
        status_reason=row["status_reason"],
        version=row.get("version") or 1,
        supersedes=row.get("supersedes"),
        corrected_by=row.get("corrected_by"),
        change_reason=row.get("change_reason"),
        forgotten_at=row.get("forgotten_at"),
    )


def fetch_rows(conn: Connection[Any], ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id = ANY(%s)", (list(ids),))
        return {row["id"]: row for row in cur.fetchall()}
