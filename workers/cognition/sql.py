"""SQL of background cognition. Every statement is idempotent or conditional on the state it
expects, so a replayed step changes nothing.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from psycopg import Connection
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from pipelines.cognition.compress import SummaryDraft
from pipelines.cognition.consolidate import KnowledgeChange
from pipelines.cognition.health import CompressionHealth
from pipelines.cognition.link import LinkKind, MemoryLink
from pipelines.cognition.protocol import SourceMemory
from pipelines.cognition.quality import QualityOutcome, QualityReport
from pipelines.records import EpisodicMemory, Level, SemanticMemory, content_hash
from pipelines.text.words import word_count
from workers.db.jobs import EMBED_JOB, UNINDEX_JOB
from workers.db.rows import MEMORY_COLUMNS, row_to_memory


class ConcurrentChange(Exception):
    """Rows changed under a step between its read and its write; the transaction is undone."""


def row_to_source(row: Mapping[str, Any]) -> SourceMemory:
    """Any row, whatever its status (a rolled-back summary's parents may be evicted since)."""
    covered = (row["metadata"] or {}).get("source_words")
    return SourceMemory(
        id=row["id"],
        tenant_id=row["tenant_id"],
        task_id=row["task_id"],
        session_id=row["session_id"],
        timestamp=row["ts"],
        content=row["content"],
        level=Level(row["level"]),
        source_words=covered
        if isinstance(covered, int) and covered >= 0
        else word_count(row["content"]),
        importance=row["importance"],
    )


def row_to_draft(row: Mapping[str, Any]) -> SummaryDraft:
    meta = row["metadata"] or {}
    return SummaryDraft(
        id=row["id"],
        tenant_id=row["tenant_id"],
        task_id=row["task_id"],
        session_id=row["session_id"],
        level=Level(row["level"]),
        version=row["version"],
        parent_ids=tuple(row["parent_ids"]),
        timestamp=row["ts"],
        timestamp_end=datetime.fromisoformat(meta.get("timestamp_end") or row["ts"].isoformat()),
        content=row["content"],
        source_words=int(meta.get("source_words", 0)),
        summary_words=int(meta.get("summary_words", word_count(row["content"]))),
        annotate_only=bool(meta.get("annotate_only", False)),
        annotated_by=str(meta.get("annotated_by", "unknown")),
        compressed_by=str(meta.get("compressed_by", "unknown")),
        malformed_answers=int(meta.get("malformed_answers", 0)),
        kinds=dict(meta.get("kinds", {})),
        compressor=str(meta.get("compressor", "")),
    )


# A task summary (L3) the quality check rolled back, while the task has no stored L3 and a
# parent of it is still live: the compression sweep makes it again. Rolled-back rows are few
# and ``memories_status_idx`` holds them.
_L3_AWAITING_RETRY = """
    r.level = 3 AND r.status = 'retired'
    AND EXISTS (SELECT 1 FROM quality_reports q WHERE q.summary_id = r.id
                AND q.verdict = 'rollback')
    AND NOT EXISTS (SELECT 1 FROM memories s WHERE s.tenant_id = r.tenant_id
                    AND s.task_id = r.task_id AND s.level = 3 AND s.status = 'stored')
    AND EXISTS (SELECT 1 FROM memories p WHERE p.id = ANY(r.parent_ids)
                AND p.status = 'stored' AND p.superseded_by IS NULL)
"""


def scopes_after(
    conn: Connection[Any], after: tuple[str, str] | None, limit: int, max_level: int
) -> list[tuple[str, str]]:
    """(tenant, task) pairs holding live rows below ``max_level`` or a task summary awaiting
    its retry, in key order."""
    tenant, task = after or ("", "")
    rows = conn.execute(
        "SELECT tenant_id, task_id FROM ("
        "SELECT tenant_id, task_id FROM memories "
        "WHERE status = 'stored' AND superseded_by IS NULL AND level < %s "
        "AND (tenant_id, task_id) > (%s, %s) "
        "UNION "
        f"SELECT r.tenant_id, r.task_id FROM memories r WHERE {_L3_AWAITING_RETRY} "
        "AND (r.tenant_id, r.task_id) > (%s, %s)"
        ") scopes ORDER BY 1, 2 LIMIT %s",
        (max_level, tenant, task, tenant, task, limit),
    ).fetchall()
    return [(r[0], r[1]) for r in rows]


def task_summary_to_retry(
    conn: Connection[Any], tenant_id: str, task_id: str
) -> dict[str, Any] | None:
    """The latest rolled-back task summary (L3) of a task when it awaits its retry (see
    ``_L3_AWAITING_RETRY``), else None."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            f"SELECT {MEMORY_COLUMNS} FROM memories r WHERE r.tenant_id = %s AND r.task_id = %s "
            f"AND {_L3_AWAITING_RETRY} ORDER BY r.version DESC, r.ts DESC, r.id LIMIT 1",
            (tenant_id, task_id),
        )
        row: dict[str, Any] | None = cur.fetchone()
        return row


def live_rows(
    conn: Connection[Any],
    tenant_id: str,
    task_id: str,
    level: Level,
    *,
    checked_only: bool,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """Live rows of a level in a task, oldest first; ``checked_only``: summaries that passed
    their quality check (a summary still waiting for it is not compressed further)."""
    checked = (
        "AND EXISTS (SELECT 1 FROM quality_reports q WHERE q.summary_id = m.id "
        "AND q.verdict = 'keep')"
        if checked_only
        else ""
    )
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            f"SELECT {MEMORY_COLUMNS} FROM memories m WHERE tenant_id = %s AND task_id = %s "
            f"AND level = %s AND status = 'stored' AND superseded_by IS NULL {checked} "
            "ORDER BY ts, id LIMIT %s",
            (tenant_id, task_id, int(level), limit),
        )
        return list(cur.fetchall())


def load_health(
    conn: Connection[Any], ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, CompressionHealth]:
    rows = conn.execute(
        "SELECT memory_id, failures, resistant, resistant_to FROM compression_health "
        "WHERE memory_id = ANY(%s)",
        (list(ids),),
    ).fetchall()
    return {
        r[0]: CompressionHealth(memory_id=r[0], failures=r[1], resistant=r[2], resistant_to=r[3])
        for r in rows
    }


INSERT_SUMMARY = """
INSERT INTO memories (id, tenant_id, user_id, agent_id, task_id, session_id, ts, content,
                      content_hash, importance, last_accessed_at, level, metadata, status,
                      parent_ids, version, summary)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 'stored', %s, %s, %s)
ON CONFLICT (id) DO NOTHING
RETURNING id
"""


def insert_summary(
    conn: Connection[Any], draft: SummaryDraft, parents: Sequence[Mapping[str, Any]]
) -> bool:
    """The summary row, its parents pointed at it, and its embedding job: all or nothing.

    Returns False when the summary exists already (a replay). Raises ConcurrentChange when a
    parent is no longer live (another sweep covered it first); nothing is then written.
    """
    users = {p["user_id"] for p in parents}
    agents = {p["agent_id"] for p in parents}
    accessed = [p["last_accessed_at"] for p in parents if p["last_accessed_at"] is not None]
    with conn.transaction():
        inserted = conn.execute(
            INSERT_SUMMARY,
            (
                draft.id,
                draft.tenant_id,
                next(iter(users)) if len(users) == 1 else None,
                next(iter(agents)) if len(agents) == 1 else None,
                draft.task_id,
                draft.session_id,
                draft.timestamp,
                draft.content,
                content_hash(draft.content),
                max(float(p["importance"]) for p in parents),
                max(accessed) if accessed else None,
                int(draft.level),
                Jsonb(draft.metadata()),
                list(draft.parent_ids),
                draft.version,
                draft.content[:500],
            ),
        ).fetchone()
        if inserted is None:
            return False
        covered = conn.execute(
            "UPDATE memories SET superseded_by = %s, updated_at = now() "
            "WHERE id = ANY(%s) AND status = 'stored' AND superseded_by IS NULL",
            (draft.id, list(draft.parent_ids)),
        ).rowcount
        if covered != len(draft.parent_ids):
            raise ConcurrentChange(
                f"summary {draft.id}: {len(draft.parent_ids) - covered} parent(s) not live"
            )
        conn.execute(
            "INSERT INTO jobs (kind, memory_id) VALUES (%s, %s) ON CONFLICT DO NOTHING",
            (EMBED_JOB, draft.id),
        )
    return True


def unchecked_summaries(
    conn: Connection[Any], after: uuid.UUID | None, limit: int
) -> list[uuid.UUID]:
    rows = conn.execute(
        "SELECT id FROM memories m WHERE level BETWEEN 1 AND 3 AND status = 'stored' "
        "AND id > %s AND NOT EXISTS (SELECT 1 FROM quality_reports q WHERE q.summary_id = m.id) "
        "ORDER BY id LIMIT %s",
        (after or uuid.UUID(int=0), limit),
    ).fetchall()
    return [r[0] for r in rows]


def record_quality(
    conn: Connection[Any],
    draft: SummaryDraft,
    report: QualityReport,
    outcome: QualityOutcome,
    *,
    run_id: uuid.UUID | None,
    now: datetime,
) -> bool:
    """The report, and on a rollback the retirement, the parents freed and the failures
    counted: one transaction. Returns False when this summary was checked already."""
    with conn.transaction():
        inserted = conn.execute(
            "INSERT INTO quality_reports (summary_id, tenant_id, run_id, level, version, "
            "fact_recall, decision_fidelity, verdict, reason, report, checked_at) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (summary_id) DO NOTHING RETURNING summary_id",
            (
                draft.id,
                draft.tenant_id,
                run_id,
                int(draft.level),
                draft.version,
                report.fact_recall,
                report.decision_fidelity,
                report.verdict.value,
                report.reason,
                Jsonb(json.loads(report.model_dump_json())),
                now,
            ),
        ).fetchone()
        if inserted is None:
            return False
        if outcome.rollback is None:
            return True
        conn.execute(
            "UPDATE memories SET status = 'retired', status_reason = %s, updated_at = now() "
            "WHERE id = %s AND status = 'stored'",
            (f"rolled back: {report.reason}"[:2000], draft.id),
        )
        conn.execute(
            "UPDATE memories SET superseded_by = NULL, updated_at = now() WHERE superseded_by = %s",
            (draft.id,),
        )
        conn.cursor().executemany(
            "INSERT INTO compression_health (memory_id, tenant_id, failures, resistant, "
            "resistant_to) VALUES (%s, %s, %s, %s, %s) ON CONFLICT (memory_id) DO UPDATE "
            "SET failures = EXCLUDED.failures, resistant = EXCLUDED.resistant, "
            "resistant_to = EXCLUDED.resistant_to, updated_at = now()",
            [
                (h.memory_id, draft.tenant_id, h.failures, h.resistant, h.resistant_to)
                for h in outcome.health
            ],
        )
        conn.execute(
            "INSERT INTO jobs (kind, memory_id) VALUES (%s, %s) ON CONFLICT DO NOTHING",
            (UNINDEX_JOB, draft.id),
        )
    return True


# -- decay ----------------------------------------------------------------------------------


def tenants_after(conn: Connection[Any], after: str | None, limit: int) -> list[str]:
    rows = conn.execute(
        "SELECT DISTINCT tenant_id FROM memories WHERE status = 'stored' AND tenant_id > %s "
        "ORDER BY 1 LIMIT %s",
        (after or "", limit),
    ).fetchall()
    return [r[0] for r in rows]


def live_episodic_count(conn: Connection[Any]) -> int:
    row = conn.execute(
        "SELECT count(*) FROM memories WHERE status = 'stored' AND superseded_by IS NULL"
    ).fetchone()
    return int(row[0]) if row else 0


# -- embedding of summaries and unindexing ---------------------------------------------------


def close_jobs(conn: Connection[Any], job_ids: Iterable[int]) -> None:
    ids = list(job_ids)
    if ids:
        conn.execute(
            "UPDATE jobs SET status = 'done', updated_at = now() "
            "WHERE id = ANY(%s) AND status = 'running'",
            (ids,),
        )


def set_embedding_versions(
    conn: Connection[Any], versions: Sequence[tuple[uuid.UUID, str]], job_ids: Iterable[int]
) -> None:
    with conn.transaction():
        conn.cursor().executemany(
            "UPDATE memories SET embedding_version = %s, updated_at = now() "
            "WHERE id = %s AND status = 'stored'",
            [(version, memory_id) for memory_id, version in versions],
        )
        close_jobs(conn, job_ids)


# -- links -------------------------------------------------------------------------------------


def recent_memories(
    conn: Connection[Any], tenant_id: str, *, limit: int, level: int = 0
) -> list[EpisodicMemory]:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE tenant_id = %s AND status = 'stored' "
            "AND level = %s ORDER BY ts DESC, id LIMIT %s",
            (tenant_id, level, limit),
        )
        return [row_to_memory(row) for row in cur.fetchall()]


def older_memories(
    conn: Connection[Any], tenant_id: str, *, before: EpisodicMemory, limit: int
) -> list[EpisodicMemory]:
    """The ``limit`` episodes of a tenant that precede ``before`` by (timestamp, id), oldest
    first: the same window whenever the memory is linked (index ``memories_link_window_idx``).
    Corrected rows are part of it, so a correction applied between two link passes does not
    change what the later pass sees; callers that need live rows filter on ``status``."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE tenant_id = %s "
            "AND status IN ('stored', 'corrected') AND level = 0 AND (ts, id) < (%s, %s) "
            "ORDER BY ts DESC, id DESC LIMIT %s",
            (tenant_id, before.timestamp, before.id, limit),
        )
        rows = [row_to_memory(row) for row in cur.fetchall()]
    rows.reverse()
    return rows


def insert_links(
    conn: Connection[Any], tenant_id: str, memory_id: uuid.UUID, links: Sequence[MemoryLink]
) -> int:
    """The links of one memory and its ``linked_at`` mark, in one transaction."""
    inserted = 0
    with conn.transaction(), conn.cursor() as cur:
        if links:
            # One pipelined round trip for all of them.
            cur.executemany(
                "INSERT INTO memory_links (src_id, dst_id, kind, weight, reason, tenant_id) "
                "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                [
                    (link.src_id, link.dst_id, link.kind.value, link.weight, link.reason, tenant_id)
                    for link in links
                ],
            )
            inserted = max(0, cur.rowcount)
        conn.execute(
            "UPDATE memories SET linked_at = now() WHERE id = %s AND linked_at IS NULL",
            (memory_id,),
        )
    return inserted


def links_touching(
    conn: Connection[Any], tenant_id: str, ids: Sequence[uuid.UUID]
) -> list[MemoryLink]:
    rows = conn.execute(
        "SELECT src_id, dst_id, kind, weight, reason FROM memory_links "
        "WHERE (src_id = ANY(%s) OR dst_id = ANY(%s)) AND tenant_id = %s",
        (list(ids), list(ids), tenant_id),
    ).fetchall()
    return [
        MemoryLink(
            src_id=r[0], dst_id=r[1], kind=LinkKind(r[2]), weight=min(1.0, r[3]), reason=r[4]
        )
        for r in rows
    ]


def unlinked_ids(conn: Connection[Any], *, older_than_s: float, limit: int) -> list[uuid.UUID]:
    rows = conn.execute(
        "SELECT id FROM memories WHERE status = 'stored' AND level = 0 AND linked_at IS NULL "
        "AND updated_at < now() - make_interval(secs => %s) ORDER BY updated_at LIMIT %s",
        (older_than_s, limit),
    ).fetchall()
    return [r[0] for r in rows]


# -- consolidation -------------------------------------------------------------------------------


def consolidation_inputs(
    conn: Connection[Any], tenant_id: str, since: datetime, limit: int
) -> tuple[list[EpisodicMemory], list[SemanticMemory], dict[uuid.UUID, str]]:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE tenant_id = %s AND status = 'stored' "
            "AND level = 0 AND ts >= %s ORDER BY ts DESC, id LIMIT %s",
            (tenant_id, since, limit),
        )
        memories = [row_to_memory(row) for row in reversed(cur.fetchall())]
        cur.execute(
            "SELECT id, tenant_id, user_id, agent_id, content, confidence, source_ids, scope, "
            "conditions, created_at, updated_at, status FROM semantic_memories "
            "WHERE tenant_id = %s AND status <> 'retired' ORDER BY created_at, id",
            (tenant_id,),
        )
        existing: list[SemanticMemory] = []
        statuses: dict[uuid.UUID, str] = {}
        for row in cur.fetchall():
            statuses[row["id"]] = row["status"]
            existing.append(
                SemanticMemory(
                    id=row["id"],
                    tenant_id=row["tenant_id"],
                    user_id=row["user_id"],
                    agent_id=row["agent_id"],
                    content=row["content"],
                    confidence=row["confidence"],
                    source_memory_ids=tuple(row["source_ids"]),
                    scope=row["scope"],
                    conditions=row["conditions"],
                    created_at=row["created_at"],
                    updated_at=row["updated_at"],
                )
            )
    return memories, existing, statuses


def apply_knowledge(
    conn: Connection[Any],
    tenant_id: str,
    changes: Sequence[KnowledgeChange],
    waiting: Sequence[tuple[str, str, Sequence[uuid.UUID], str]],
    embedding_version: str,
) -> dict[str, int]:
    """Write a consolidation plan in one transaction. A stored item is only ever extended
    (sources, confidence), never overwritten: contradictions are new rows."""
    counts: dict[str, int] = {}
    with conn.transaction():
        for change in changes:
            row = change.semantic
            if change.action.value == "merge":
                # Sources already counted are not added again, so a replay changes nothing.
                n = conn.execute(
                    "UPDATE semantic_memories SET confidence = %s, source_ids = %s, "
                    "updated_at = %s WHERE id = %s AND NOT (%s <@ source_ids)",
                    (
                        row.confidence,
                        list(row.source_memory_ids),
                        row.updated_at,
                        row.id,
                        list(change.added_source_ids),
                    ),
                ).rowcount
            else:
                n = conn.execute(
                    "INSERT INTO semantic_memories (id, tenant_id, user_id, agent_id, scope, "
                    "content, confidence, source_ids, conditions, embedding_version, status, "
                    "kind, conflicts_with, reason, created_at, updated_at) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
                    "ON CONFLICT (id) DO NOTHING",
                    (
                        row.id,
                        tenant_id,
                        row.user_id,
                        row.agent_id,
                        row.scope,
                        row.content,
                        row.confidence,
                        list(row.source_memory_ids),
                        row.conditions,
                        embedding_version,
                        change.status,
                        change.kind.value,
                        change.conflicts_with,
                        change.reason[:2000],
                        row.created_at,
                        row.updated_at,
                    ),
                ).rowcount
            if n:
                counts[change.action.value] = counts.get(change.action.value, 0) + 1
        for kind, statement, source_ids, reason in waiting:
            conn.execute(
                "INSERT INTO consolidation_waiting (tenant_id, kind, statement, source_ids, "
                "reason) VALUES (%s, %s, %s, %s, %s) ON CONFLICT (tenant_id, kind, statement) "
                "DO UPDATE SET source_ids = EXCLUDED.source_ids, reason = EXCLUDED.reason "
                "WHERE consolidation_waiting.source_ids <> EXCLUDED.source_ids",
                (tenant_id, kind, statement[:2000], list(source_ids), reason),
            )
    return counts
