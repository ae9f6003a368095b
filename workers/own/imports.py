"""Import a ``memharness.export/1`` file into this install, all or nothing.

The whole file is read in ONE transaction: each line is checked (``ExportReader``) and each
batch of ``IMPORT_BATCH`` lines of a kind is written as one statement (the batch travels as
one JSON document through ``jsonb_to_recordset``), so a malformed line, a truncated file or
a refused id anywhere rolls every earlier batch back with it. Memory stays flat: only one
batch is held at a time.

Idempotent: every insert is ``ON CONFLICT DO NOTHING`` on the exported ids (events, which
have no id of their own, are matched on what they say), so importing a file twice changes
nothing the second time. An id that belongs to another tenant of this install is refused,
and the answer says no more than that.

Re-embedding: stored memories come in with ``embedding_version`` NULL and an ``embed`` job
each in the outbox, in the same transaction; after COMMIT one ``DRAIN_EMBEDDINGS`` makes the
store's owner embed them with this install's embedder (``workers.cognition.embed``), and the
cognition relay republishes it if that message is lost. A memory still pending in the
source gets a ``write`` job instead: this install decides it. ``content_hash`` is computed
from the content as the write path computes it; ``search_tsv`` by the table's trigger.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from psycopg import Connection
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from pipelines.errors import Conflict, InvalidInput
from pipelines.own.export_format import (
    CheckpointLine,
    EndLine,
    ExportLine,
    ExportReader,
    HeaderLine,
    LineCounts,
    MemoryLine,
    line_fields,
)
from pipelines.records import MemoryStatus, content_hash
from workers.db.jobs import EMBED_JOB, WRITE_JOB
from workers.publish import publish
from workers.queues import TaskName

if TYPE_CHECKING:
    from celery import Celery

log = logging.getLogger(__name__)

# Lines per statement: 500 memories of ~1 KB make a 0.5 MB JSON document, parsed by the
# server in a few milliseconds; larger batches gained nothing measurable.
IMPORT_BATCH = 500
IMPORT_ACTOR = "import"

Progress = Callable[[int, int | None], None]

MEMORY_RECORD = """
    n int, id uuid, user_id text, agent_id text, task_id text, session_id text, ts timestamptz,
    type text, content text, content_hash text, summary text, idempotency_key text,
    importance real, access_count int, last_accessed_at timestamptz, related_ids uuid[],
    decay_factor real, level smallint, modality text, metadata jsonb, status text,
    status_reason text, version int, parent_ids uuid[], superseded_by uuid, supersedes uuid,
    corrected_by uuid, change_reason text, forgotten_at timestamptz, linked_at timestamptz,
    created_at timestamptz, updated_at timestamptz
"""
INSERT_MEMORIES = f"""
WITH r AS (SELECT * FROM jsonb_to_recordset(%(batch)s::jsonb) AS r({MEMORY_RECORD})),
ins AS (
    INSERT INTO memories (id, tenant_id, user_id, agent_id, task_id, session_id, ts, type,
                          content, content_hash, summary, idempotency_key, embedding_version,
                          importance, access_count, last_accessed_at, related_ids, decay_factor,
                          level, modality, metadata, status, status_reason, version, parent_ids,
                          superseded_by, supersedes, corrected_by, change_reason, forgotten_at,
                          linked_at, created_at, updated_at)
    SELECT id, %(tenant)s, user_id, agent_id, task_id, session_id, ts, type, content,
           decode(content_hash, 'hex'), summary, idempotency_key, NULL, importance,
           access_count, last_accessed_at, related_ids, decay_factor, level, modality, metadata,
           status, status_reason, version, parent_ids, superseded_by, supersedes, corrected_by,
           change_reason, forgotten_at, linked_at, created_at, updated_at
    FROM r
    -- Rows already here skip the insert's search_tsv trigger, which runs before a conflict
    -- is found: a re-import then costs a lookup a row.
    WHERE NOT EXISTS (SELECT 1 FROM memories m WHERE m.id = r.id)
    ORDER BY n
    ON CONFLICT DO NOTHING
    RETURNING id, status, version
),
queued AS (
    INSERT INTO jobs (kind, memory_id)
    SELECT CASE WHEN status = 'stored' THEN %(embed)s ELSE %(write)s END, id FROM ins
    WHERE status IN ('stored', 'pending')
    ON CONFLICT DO NOTHING
    RETURNING kind
),
logged AS (
    INSERT INTO memory_events (tenant_id, subject, memory_id, event, version, reason, actor,
                               detail)
    SELECT %(tenant)s, 'memory', id, 'imported', version, %(reason)s, %(actor)s, %(detail)s
    FROM ins
)
SELECT (SELECT count(*) FROM ins),
       (SELECT count(*) FROM queued WHERE kind = %(embed)s),
       (SELECT count(*) FROM queued WHERE kind = %(write)s)
"""
LINK_RECORD = (
    "n int, src_id uuid, dst_id uuid, link_kind text, weight real, reason text, "
    "created_at timestamptz"
)
DANGLING_LINK = f"""
SELECT n, NOT EXISTS (SELECT 1 FROM memories m WHERE m.id = r.src_id AND m.tenant_id = %(tenant)s)
FROM jsonb_to_recordset(%(batch)s::jsonb) AS r({LINK_RECORD})
WHERE NOT EXISTS (SELECT 1 FROM memories m WHERE m.id = r.src_id AND m.tenant_id = %(tenant)s)
   OR NOT EXISTS (SELECT 1 FROM memories m WHERE m.id = r.dst_id AND m.tenant_id = %(tenant)s)
ORDER BY n LIMIT 1
"""
INSERT_LINKS = f"""
INSERT INTO memory_links (src_id, dst_id, kind, weight, reason, tenant_id, created_at)
SELECT src_id, dst_id, link_kind, weight, reason, %(tenant)s, created_at
FROM jsonb_to_recordset(%(batch)s::jsonb) AS r({LINK_RECORD})
ON CONFLICT DO NOTHING
"""
SEMANTIC_RECORD = """
    n int, id uuid, user_id text, agent_id text, scope text, knowledge_kind text, content text,
    confidence real, source_ids uuid[], conditions text, status text, conflicts_with uuid,
    reason text, created_at timestamptz, updated_at timestamptz
"""
INSERT_SEMANTIC = f"""
WITH ins AS (
    INSERT INTO semantic_memories (id, tenant_id, user_id, agent_id, scope, kind, content,
                                   confidence, source_ids, conditions, embedding_version, status,
                                   conflicts_with, reason, created_at, updated_at)
    SELECT id, %(tenant)s, user_id, agent_id, scope, knowledge_kind, content, confidence,
           source_ids, conditions, NULL, status, conflicts_with, reason, created_at, updated_at
    FROM jsonb_to_recordset(%(batch)s::jsonb) AS r({SEMANTIC_RECORD})
    ON CONFLICT (id) DO NOTHING
    RETURNING id
), logged AS (
    INSERT INTO memory_events (tenant_id, subject, memory_id, event, reason, actor, detail)
    SELECT %(tenant)s, 'semantic', id, 'imported', %(reason)s, %(actor)s, %(detail)s FROM ins
)
SELECT count(*) FROM ins
"""
EVENT_RECORD = """
    n int, subject text, memory_id uuid, event text, version int, related_id uuid, reason text,
    actor text, at timestamptz, detail jsonb
"""
# Events have no id of their own: one saying the same thing about the same memory at the
# same time is the same event.
INSERT_EVENTS = f"""
INSERT INTO memory_events (tenant_id, subject, memory_id, event, version, related_id, reason,
                           actor, at, detail)
SELECT %(tenant)s, subject, memory_id, event, version, related_id, reason, actor, at, detail
FROM jsonb_to_recordset(%(batch)s::jsonb) AS r({EVENT_RECORD})
WHERE NOT EXISTS (
    SELECT 1 FROM memory_events e
    WHERE e.memory_id = r.memory_id AND e.at = r.at AND e.tenant_id = %(tenant)s
      AND e.subject = r.subject AND e.event = r.event
)
ORDER BY n
"""
CHECKPOINT_RECORD = """
    n int, id uuid, task_id text, parent_id uuid, created_at timestamptz, format_version int,
    is_phase_transition boolean, iteration int, body_b64 text
"""
INSERT_CHECKPOINTS = f"""
INSERT INTO checkpoints (id, tenant_id, task_id, parent_id, created_at, format_version,
                         is_phase_transition, iteration, size_bytes, body)
SELECT id, %(tenant)s, task_id, parent_id, created_at, format_version, is_phase_transition,
       iteration, length(decode(body_b64, 'base64')), decode(body_b64, 'base64')
FROM jsonb_to_recordset(%(batch)s::jsonb) AS r({CHECKPOINT_RECORD})
ORDER BY n
ON CONFLICT (id) DO NOTHING
"""
# Ids that another tenant of this install holds, per table an imported id may land in.
FOREIGN_IDS = {
    "memory": "SELECT id FROM memories WHERE id = ANY(%s) AND tenant_id <> %s LIMIT 1",
    "semantic": "SELECT id FROM semantic_memories WHERE id = ANY(%s) AND tenant_id <> %s LIMIT 1",
    "checkpoint": "SELECT id FROM checkpoints WHERE id = ANY(%s) AND tenant_id <> %s LIMIT 1",
}


@dataclass
class ImportCounts:
    """Lines read per kind, rows this import added (the rest were there already), and the
    jobs it queued: ``embed`` for stored memories, ``write`` for pending ones."""

    tenant_id: str = ""
    read: LineCounts = field(default_factory=LineCounts)
    inserted: LineCounts = field(default_factory=LineCounts)
    embed_jobs: int = 0
    write_jobs: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "tenant_id": self.tenant_id,
            "read": self.read.model_dump(),
            "inserted": self.inserted.model_dump(),
            "embed_jobs": self.embed_jobs,
            "write_jobs": self.write_jobs,
        }


def tombstone_hash(memory_id: uuid.UUID) -> bytes:
    """A forgotten row's content hash: unique per row (the level-0 repeat index holds it) and
    derived from nothing the memory said."""
    return hashlib.sha256(b"forgotten\x1f" + memory_id.bytes).digest()


def _memory_fields(line: MemoryLine) -> dict[str, Any]:
    data = line_fields(line)
    digest = (
        tombstone_hash(line.id)
        if line.status is MemoryStatus.FORGOTTEN
        else content_hash(line.content)
    )
    data["content_hash"] = digest.hex()
    return data


class _Importer:
    def __init__(self, conn: Connection[Any], header: HeaderLine) -> None:
        self.conn = conn
        self.tenant = header.tenant_id
        self.counts = ImportCounts(tenant_id=header.tenant_id)
        self.common = {
            "tenant": self.tenant,
            "actor": IMPORT_ACTOR,
            "reason": f"imported from an export of {header.exported_at.isoformat()}",
            "detail": Jsonb(
                {"schema": header.schema_id, "exported_at": header.exported_at.isoformat()}
            ),
            "embed": EMBED_JOB,
            "write": WRITE_JOB,
        }

    def flush(self, kind: str, batch: list[tuple[int, ExportLine]]) -> None:
        self.counts.read.add(kind, len(batch))
        if kind in FOREIGN_IDS:
            self._refuse_foreign(kind, batch)
        if kind == "memory":
            rows = [
                {"n": n, **_memory_fields(line)}
                for n, line in batch
                if isinstance(line, MemoryLine)
            ]
            row = self._run(INSERT_MEMORIES, rows)
            self.counts.inserted.add("memory", int(row[0]))
            self.counts.embed_jobs += int(row[1])
            self.counts.write_jobs += int(row[2])
        elif kind == "link":
            rows = [{"n": n, **line_fields(line)} for n, line in batch]
            dangling = self.conn.execute(
                DANGLING_LINK, {"tenant": self.tenant, "batch": json.dumps(rows)}
            ).fetchone()
            if dangling is not None:
                end = "src_id" if dangling[1] else "dst_id"
                raise InvalidInput(
                    f"line {dangling[0]}: link.{end}", "names no memory of this file or tenant"
                )
            self.counts.inserted.add("link", self._rowcount(INSERT_LINKS, rows))
        elif kind == "semantic":
            rows = [{"n": n, **line_fields(line)} for n, line in batch]
            self.counts.inserted.add("semantic", int(self._run(INSERT_SEMANTIC, rows)[0]))
        elif kind == "event":
            self._refuse_foreign_events(batch)
            rows = [{"n": n, **line_fields(line)} for n, line in batch]
            self.counts.inserted.add("event", self._rowcount(INSERT_EVENTS, rows))
        elif kind == "checkpoint":
            rows = [
                {"n": n, **line_fields(line, drop=("kind", "body_sha256"))}
                for n, line in batch
                if isinstance(line, CheckpointLine)
            ]
            self.counts.inserted.add("checkpoint", self._rowcount(INSERT_CHECKPOINTS, rows))

    def _run(self, query: str, rows: list[dict[str, Any]]) -> tuple[Any, ...]:
        row = self.conn.execute(query, {**self.common, "batch": json.dumps(rows)}).fetchone()
        assert row is not None
        return tuple(row)

    def _rowcount(self, query: str, rows: list[dict[str, Any]]) -> int:
        cursor = self.conn.execute(query, {**self.common, "batch": json.dumps(rows)})
        return max(0, cursor.rowcount)

    def _refuse_foreign(self, kind: str, batch: list[tuple[int, ExportLine]]) -> None:
        line_of = {line.id: n for n, line in batch if hasattr(line, "id")}
        row = self.conn.execute(FOREIGN_IDS[kind], (list(line_of), self.tenant)).fetchone()
        if row is not None:
            raise _taken(f"line {line_of[row[0]]}: {kind}.id", self.tenant)

    def _refuse_foreign_events(self, batch: list[tuple[int, ExportLine]]) -> None:
        line_of = {line.memory_id: n for n, line in batch if hasattr(line, "memory_id")}
        for table in ("memory", "semantic"):
            row = self.conn.execute(FOREIGN_IDS[table], (list(line_of), self.tenant)).fetchone()
            if row is not None:
                raise _taken(f"line {line_of[row[0]]}: event.memory_id", self.tenant)


def _taken(field_name: str, tenant: str) -> Conflict:
    # The same words whatever holds the id: an import never learns whose it is.
    return Conflict(field_name, f"this id cannot be imported into tenant {tenant!r}")


def import_file(
    pool: ConnectionPool,
    lines: Iterable[str | bytes],
    *,
    progress: Progress | None = None,
    app: Celery | None = None,
) -> ImportCounts:
    """Import an export file's ``lines`` (a file object or any iterable of lines) into the
    tenant its header names, all or nothing; returns what was read and added.

    Raises InvalidInput naming ``line N: kind.field`` for a malformed line or a truncated
    file, Conflict for an id another tenant holds; nothing is written then."""
    reader = ExportReader(lines)
    importer: _Importer | None = None
    batch: list[tuple[int, ExportLine]] = []
    batch_kind = ""
    done = 0
    with pool.connection() as conn, conn.transaction():
        for line_no, line in reader:
            if importer is None:
                assert reader.header is not None
                importer = _Importer(conn, reader.header)
            if batch and (line.kind != batch_kind or len(batch) >= IMPORT_BATCH):
                importer.flush(batch_kind, batch)
                done += len(batch)
                if progress is not None:
                    progress(done, None)
                batch = []
            if isinstance(line, EndLine):
                continue
            batch_kind = line.kind
            batch.append((line_no, line))
        # The reader raised already for a file without its end line: here it was complete.
        assert importer is not None and not batch
    counts = importer.counts
    _wake_owner(counts, app)
    log.info("imported tenant %s: %s", counts.tenant_id, counts.as_dict())
    return counts


def _wake_owner(counts: ImportCounts, app: Celery | None) -> None:
    """After COMMIT: the owner embeds (and decides) what came in. A lost message loses
    nothing: the jobs are in the outbox and the relays publish due ones again."""
    try:
        if counts.embed_jobs:
            publish(TaskName.DRAIN_EMBEDDINGS, app=app)
        if counts.write_jobs:
            publish(TaskName.DRAIN_WRITES, app=app, trigger_id=None)
    except Exception:
        log.warning("could not publish after the import; the relays will", exc_info=True)
