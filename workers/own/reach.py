"""Every copy of a memory outside its row, and how a correction or an erasure reaches it:
the summaries that contain it, the knowledge that cites it, its vector points in every
generation, its turn in the Redis window, and the answers Celery keeps in Redis.

Each function is idempotent: run twice, it finds nothing left to do the second time. The
SQL ones run inside the caller's transaction.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from psycopg import Connection
from psycopg.types.json import Jsonb

from pipelines.own.versions import KnowledgeAction, rederive
from workers.clients import Clients
from workers.db.jobs import EMBED_JOB, UNINDEX_JOB
from workers.window import KEY_PREFIX, WorkingMemoryPool

log = logging.getLogger(__name__)

# Points per delete call: one edge-shard update per 1,000 ids (the index's own batch size).
POINT_BATCH = 1000

# An erased row: no content, summary, metadata or search vector (its trigger only runs for
# stored rows); a content hash of its id, so that the hash says nothing about the text (a
# hash of the content would confirm a guess of it).
TOMBSTONE_SET = """
status = 'forgotten', content = '', summary = NULL, metadata = '{}'::jsonb,
content_hash = sha256(convert_to('forgotten:' || id::text, 'UTF8')), idempotency_key = NULL,
related_ids = '{}', search_tsv = NULL, status_reason = 'forgotten', change_reason = %(reason)s,
forgotten_at = now(), updated_at = now()
"""

# Summaries containing any of %(ids)s, directly or through a summary they cover.
SUMMARIES_CONTAINING = """
WITH RECURSIVE hit(id) AS (
    SELECT id FROM memories
    WHERE tenant_id = %(tenant)s AND level >= 1 AND parent_ids && %(ids)s::uuid[]
  UNION
    SELECT m.id FROM memories m JOIN hit ON m.parent_ids @> ARRAY[hit.id]
    WHERE m.tenant_id = %(tenant)s AND m.level >= 1
)
SELECT id FROM hit
"""


def log_events(
    conn: Connection[Any],
    tenant_id: str,
    event: str,
    ids: Iterable[uuid.UUID],
    *,
    reason: str,
    actor: str,
    related_id: uuid.UUID | None = None,
    subject: str = "memory",
) -> None:
    conn.execute(
        "INSERT INTO memory_events (tenant_id, subject, memory_id, event, related_id, reason, "
        "actor, version) SELECT %s, %s, i, %s, %s, %s, %s, m.version "
        "FROM unnest(%s::uuid[]) AS i LEFT JOIN memories m ON m.id = i",
        (tenant_id, subject, event, related_id, reason[:2000], actor, list(ids)),
    )


def unwind_summaries(
    conn: Connection[Any],
    tenant_id: str,
    ids: Collection[uuid.UUID],
    *,
    erase: bool,
    reason: str,
    actor: str,
) -> list[uuid.UUID]:
    """The summaries containing ``ids``: erased (a forgotten memory's text may be in them) or
    retired as stale (a corrected one's is); either way the rows they covered are live again,
    so the compress sweep summarises what remains. Returns the summaries' ids."""
    if not ids:
        return []
    rows = conn.execute(SUMMARIES_CONTAINING, {"tenant": tenant_id, "ids": list(ids)}).fetchall()
    hit = [r[0] for r in rows]
    if not hit:
        return []
    if erase:
        changed = conn.execute(
            f"UPDATE memories SET {TOMBSTONE_SET} WHERE id = ANY(%(hit)s) "
            "AND status <> 'forgotten' RETURNING id",
            {"reason": reason, "hit": hit},
        ).fetchall()
        conn.execute(
            "UPDATE quality_reports SET report = '{}'::jsonb, reason = %s "
            "WHERE summary_id = ANY(%s)",
            ("erased: the summary contained a forgotten memory", hit),
        )
        event = "forgotten"
    else:
        changed = conn.execute(
            "UPDATE memories SET status = 'retired', status_reason = %s, updated_at = now() "
            "WHERE id = ANY(%s) AND status = 'stored' RETURNING id",
            (reason[:2000], hit),
        ).fetchall()
        event = "summary_stale"
    restore_evicted(conn, tenant_id, hit, keep_out=ids, reason=reason, actor=actor)
    conn.execute(
        "UPDATE memories SET superseded_by = NULL, updated_at = now() "
        "WHERE superseded_by = ANY(%s) AND NOT (id = ANY(%s))",
        (hit, hit),
    )
    if changed:
        log_events(conn, tenant_id, event, [r[0] for r in changed], reason=reason, actor=actor)
    return hit


def restore_evicted(
    conn: Connection[Any],
    tenant_id: str,
    summaries: Collection[uuid.UUID],
    *,
    keep_out: Collection[uuid.UUID],
    reason: str,
    actor: str,
) -> list[uuid.UUID]:
    """The rows decay evicted because one of ``summaries`` covered them come back: that
    summary is going, so they are the only record of what they said. Stored again, back into
    the index (a pending unindex is cancelled), the eviction log line removed and a
    ``restored`` event written. ``keep_out`` (the corrected or forgotten rows themselves) stay
    as they are. Returns the restored ids."""
    rows = conn.execute(
        "UPDATE memories SET status = 'stored', status_reason = NULL, updated_at = now() "
        "WHERE tenant_id = %s AND status = 'evicted' AND superseded_by = ANY(%s) "
        "AND NOT (id = ANY(%s)) RETURNING id",
        (tenant_id, list(summaries), list(keep_out)),
    ).fetchall()
    back = sorted(r[0] for r in rows)
    if not back:
        return []
    conn.execute("DELETE FROM evictions WHERE memory_id = ANY(%s)", (back,))
    conn.execute(
        "UPDATE jobs SET status = 'done', updated_at = now() "
        "WHERE kind = %s AND memory_id = ANY(%s) AND status IN ('pending', 'running')",
        (UNINDEX_JOB, back),
    )
    conn.cursor().executemany(
        "INSERT INTO jobs (kind, memory_id) VALUES (%s, %s) ON CONFLICT (kind, memory_id) "
        "DO UPDATE SET status = 'pending', attempts = 0, lease_until = now(), updated_at = now()",
        [(EMBED_JOB, m) for m in back],
    )
    log_events(
        conn,
        tenant_id,
        "restored",
        back,
        reason=f"evicted as covered by a summary that is no longer kept ({reason})",
        actor=actor,
    )
    return back


def rederive_knowledge(
    conn: Connection[Any],
    tenant_id: str,
    ids: Collection[uuid.UUID],
    *,
    erase: bool,
    reason: str,
    actor: str,
) -> dict[str, list[uuid.UUID]]:
    """Knowledge citing ``ids`` loses them as sources: confidence recomputed from the sources
    left; with none left it is retired (a correction) or deleted (an erasure). The same for
    statements still waiting to recur. Returns the semantic ids per action."""
    done: dict[str, list[uuid.UUID]] = {a.value: [] for a in KnowledgeAction}
    if not ids:
        return done
    removed = set(ids)
    rows = conn.execute(
        "SELECT id, source_ids, confidence FROM semantic_memories "
        "WHERE tenant_id = %s AND source_ids && %s::uuid[] AND status <> 'retired' FOR UPDATE",
        (tenant_id, list(ids)),
    ).fetchall()
    for semantic_id, source_ids, confidence in rows:
        plan = rederive(source_ids, confidence, removed, erased=erase)
        why = f"{reason} — {plan.reason}"
        if plan.action is KnowledgeAction.ERASE:
            conn.execute(
                "UPDATE semantic_memories SET conflicts_with = NULL WHERE conflicts_with = %s",
                (semantic_id,),
            )
            conn.execute("DELETE FROM semantic_memories WHERE id = %s", (semantic_id,))
            event = "forgotten"
        elif plan.action is KnowledgeAction.RETIRE:
            conn.execute(
                "UPDATE semantic_memories SET status = 'retired', reason = %s, "
                "updated_at = now() WHERE id = %s",
                (why[:2000], semantic_id),
            )
            event = "retired"
        else:
            conn.execute(
                "UPDATE semantic_memories SET source_ids = %s, confidence = %s, reason = %s, "
                "updated_at = now() WHERE id = %s",
                (list(plan.source_ids), plan.confidence, why[:2000], semantic_id),
            )
            event = "rederived"
        done[plan.action.value].append(semantic_id)
        log_events(
            conn, tenant_id, event, [semantic_id], reason=why, actor=actor, subject="semantic"
        )
    if erase:
        # A waiting statement may be the erased memory's own words: it goes, and the next
        # consolidation finds what the remaining episodes say.
        conn.execute(
            "DELETE FROM consolidation_waiting WHERE tenant_id = %s AND source_ids && %s::uuid[]",
            (tenant_id, list(ids)),
        )
        return done
    conn.execute(
        "DELETE FROM consolidation_waiting WHERE tenant_id = %s AND source_ids <@ %s::uuid[]",
        (tenant_id, list(ids)),
    )
    conn.execute(
        "UPDATE consolidation_waiting SET source_ids = ARRAY(SELECT unnest(source_ids) "
        "EXCEPT SELECT unnest(%s::uuid[])) WHERE tenant_id = %s AND source_ids && %s::uuid[]",
        (list(ids), tenant_id, list(ids)),
    )
    return done


def erase_traces(conn: Connection[Any], ids: Sequence[uuid.UUID]) -> dict[str, int]:
    """What else names or quotes an erased memory: its links (their reasons quote it), its
    outbox jobs and their errors, its dead letters, the reasons of its write decisions, its
    eviction record and its compression health."""
    id_list = list(ids)
    texts = [str(i) for i in ids]
    counts = {
        "links": conn.execute(
            "DELETE FROM memory_links WHERE src_id = ANY(%s) OR dst_id = ANY(%s)",
            (id_list, id_list),
        ).rowcount,
        "jobs": conn.execute(
            "DELETE FROM jobs WHERE memory_id = ANY(%s) AND kind <> 'settle'", (id_list,)
        ).rowcount,
        "dead_letters": conn.execute(
            "DELETE FROM dead_letters WHERE EXISTS (SELECT 1 FROM unnest(%s::text[]) AS t "
            "WHERE strpos(dead_letters.args::text, t) > 0)",
            (texts,),
        ).rowcount,
    }
    conn.execute(
        "UPDATE write_decisions SET reason = 'erased with the memory' "
        "WHERE memory_id = ANY(%s) AND reason <> 'erased with the memory'",
        (id_list,),
    )
    conn.execute("UPDATE evictions SET record = %s WHERE memory_id = ANY(%s)", (Jsonb({}), id_list))
    conn.execute("DELETE FROM compression_health WHERE memory_id = ANY(%s)", (id_list,))
    return counts


# -- outside PostgreSQL ------------------------------------------------------------------------


def purge_points(ctx: Clients, ids: Collection[uuid.UUID]) -> int:
    """Delete the points of ``ids`` from every collection of the store: both kinds, every
    generation (the live one, one a re-embed run is building, one kept after a switch).
    Deleting an id a collection does not hold is a no-op. Returns the collections visited."""
    names = ctx.vectors.collections()
    ordered = sorted(ids)
    for name in names:
        for start in range(0, len(ordered), POINT_BATCH):
            ctx.vectors.delete(name, ordered[start : start + POINT_BATCH])
    return len(names)


def points_left(ctx: Clients, ids: Collection[uuid.UUID]) -> int:
    """How many of ``ids`` some collection still holds (0 once a purge settled)."""
    ordered = sorted(ids)
    left = 0
    for name in ctx.vectors.collections():
        for start in range(0, len(ordered), POINT_BATCH):
            left += len(ctx.vectors.retrieve(name, ordered[start : start + POINT_BATCH]))
    return left


def rewrite_windows(
    ctx: Clients,
    tenant_id: str,
    sessions: Iterable[tuple[str, str]],
    *,
    remove: set[str],
    replace: dict[str, tuple[str, str]] | None = None,
) -> bool:
    """Take ``remove`` out of the sessions' Redis windows and correct ``replace``; False when
    a session's summary lock was busy (retry later)."""
    pool = WorkingMemoryPool(
        ctx.redis,
        max_turns=ctx.settings.working_memory_max_turns,
        ttl_s=ctx.settings.working_memory_ttl_s,
    )
    done = True
    for task_id, session_id in sorted(set(sessions)):
        done &= pool.rewrite(
            tenant_id, task_id, session_id, remove=remove, replace=dict(replace or {})
        )
    return done


def drop_tenant_windows(ctx: Clients, tenant_id: str) -> int:
    """Every working-memory key of a tenant ("|" cannot occur in ids, so the prefix is exact)."""
    dropped = 0
    for key in ctx.redis.scan_iter(match=f"{KEY_PREFIX}|{tenant_id}|*", count=1000):
        dropped += int(ctx.redis.delete(key))
    return dropped


def purge_results(ctx: Clients, needles: Collection[str]) -> int:
    """Celery keeps a recall or context answer in Redis for ``result_expires``; delete the
    ones that name an erased memory (its id is in every answer that carried its text)."""
    if not needles:
        return 0
    dropped = 0
    for key in ctx.redis.scan_iter(match="celery-task-meta-*", count=1000):
        raw = ctx.redis.get(key)
        if raw is None:
            continue
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        if any(needle in text for needle in needles):
            dropped += int(ctx.redis.delete(key))
    return dropped
