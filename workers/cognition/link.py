"""Links (``embed`` queue, the store's owner): new memories are linked to older ones by shared
entities, vector neighbours of their task and causal proposals of the LLM port.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pipelines.answers import ask_with_fallback
from pipelines.cognition.causal import propose_causal_offline
from pipelines.cognition.entities import extract_entities
from pipelines.cognition.link import Neighbour, causal_links, entity_links, similar_links
from pipelines.errors import TransientLLMError
from pipelines.own.contradict import confirm, contradicted
from pipelines.records import EpisodicMemory, MemoryStatus
from workers.clients import Clients
from workers.cognition.sql import (
    insert_links,
    older_memories,
    unlinked_ids,
)
from workers.db.jobs import WRITE_JOB, count_due_jobs
from workers.db.rows import fetch_rows, row_to_memory
from workers.index.targets import EPISODIC, dense_search_target
from workers.metrics import count_automatic_corrections
from workers.own.correct import apply_supersessions
from workers.publish import publish_quietly
from workers.queues import TaskName

log = logging.getLogger(__name__)

# Entity links look at the tenant's most recent rows: 300 keeps a link step inside ~50 ms of
# Python per memory with the offline extractor, and recent memories are the likely partners.
LINK_CANDIDATES = 300
LINK_NEIGHBOURS = 10


# Entities of a row never change (content is immutable): computed once per process.
_ENTITIES: dict[uuid.UUID, frozenset[str]] = {}
_ENTITIES_MAX = 50_000


def _entities_of(memories: Sequence[EpisodicMemory]) -> dict[uuid.UUID, frozenset[str]]:
    if len(_ENTITIES) > _ENTITIES_MAX:
        _ENTITIES.clear()
    for memory in memories:
        if memory.id not in _ENTITIES:
            _ENTITIES[memory.id] = extract_entities(memory.content)
    return _ENTITIES


def _key(memory: EpisodicMemory) -> tuple[datetime, str]:
    """The order memories are linked in: a link goes from the later to the earlier."""
    return (memory.timestamp, str(memory.id))


def link_memories(
    ctx: Clients,
    memory_ids: Sequence[uuid.UUID],
    *,
    deadline: float | None = None,
    transient_fallback: bool = False,
) -> dict[str, Any]:
    """Links of new memories to older ones: shared entities, close neighbours of the same
    task (vector score >= 0.75), and causal edges proposed by the LLM port (offline rules
    when it answers badly). One candidate read per tenant and batch; a memory is marked
    ``linked_at`` in the transaction that writes its links, so a replay skips it.

    With a model, each memory costs a causal proposal (and a confirmation per correction
    found) of seconds on a CPU; past ``deadline`` (``time.monotonic()``) no further memory is
    started and ``stopped_early`` says so: the rest stay unlinked for the next message, and the
    task never reaches its time limit (a link task killed there is not retried, and its
    memories would wait for the relay).

    ``transient_fallback`` (the task's last attempt): a model that times out or is down gets
    the offline rules' causal proposals instead of failing the task for good, counted in
    ``llm_fallback`` and logged with the error's kind, so the memories are linked, not left."""
    with ctx.pool.connection() as conn:
        rows = fetch_rows(conn, memory_ids)
        linked = {
            r[0]
            for r in conn.execute(
                "SELECT id FROM memories WHERE id = ANY(%s) AND linked_at IS NOT NULL",
                (list(rows),),
            ).fetchall()
        }
    todo = [
        rows[i]
        for i in dict.fromkeys(memory_ids)
        if i in rows and i not in linked and rows[i]["status"] == "stored" and rows[i]["level"] == 0
    ]
    stats: dict[str, Any] = {"linked": 0, "links": 0}
    if not todo:
        return stats
    # Similarity links need vectors of the current model: none while a re-embed run is
    # building them (entity and causal links do not need them).
    collection = dense_search_target(ctx, EPISODIC)
    vectors = ctx.embedder.embed([row["content"] for row in todo])
    for row, vector in zip(todo, vectors, strict=True):
        if deadline is not None and stats["linked"] and time.monotonic() > deadline:
            stats["stopped_early"] = True
            break
        memory = row_to_memory(row)
        # Only older memories, and always the same ones: the window that precedes this
        # memory by (timestamp, id), however far the writes have got since. An undirected
        # link is stored once, from the later memory.
        with ctx.pool.connection() as conn:
            older = older_memories(conn, memory.tenant_id, before=memory, limit=LINK_CANDIDATES)
        hits = (
            ctx.vectors.search(
                collection,
                vector,
                tenant_id=memory.tenant_id,
                task_id=memory.task_id,
                limit=LINK_NEIGHBOURS,
            )
            if collection is not None
            else []
        )
        with ctx.pool.connection() as conn:
            hit_rows = fetch_rows(conn, [h.id for h in hits if h.id != memory.id])
        # Neighbours written later are left to link to this one when their turn comes, so
        # what a memory is linked to does not depend on when its link pass ran.
        neighbours = [
            Neighbour(memory=neighbour, score=h.score)
            for h in hits
            if h.id in hit_rows
            and hit_rows[h.id]["status"] == "stored"
            and _key(neighbour := row_to_memory(hit_rows[h.id])) < _key(memory)
        ]
        links = entity_links(memory, older, entities=_entities_of([memory, *older]))
        links += similar_links(memory, neighbours)
        # Causes are looked for in the window only: which vector neighbours come back depends
        # on what the index held when this pass ran (newer rows crowd the top 10), and a
        # causal edge must not (tests/integration/test_causal_chains.py).
        candidates = [c for c in older if c.id != memory.id]
        if candidates:
            llm = ctx.llm_for(memory.tenant_id)
            try:
                batch, _, _ = ask_with_fallback(
                    lambda: llm.propose_causal(memory, candidates),  # noqa: B023
                    lambda: propose_causal_offline(memory, candidates),  # noqa: B023
                    llm.name,
                )
            except TransientLLMError as exc:
                if not transient_fallback:
                    raise
                log.warning(
                    "causal proposals for memory %s: %s on the last attempt; offline rules used",
                    memory.id,
                    type(exc).__name__,
                )
                stats["llm_fallback"] = stats.get("llm_fallback", 0) + 1
                batch = propose_causal_offline(memory, candidates)
            links += causal_links(memory, candidates, batch)
        unique = {(link.src_id, link.dst_id, link.kind): link for link in reversed(links)}
        with ctx.pool.connection() as conn:
            stats["links"] += insert_links(conn, memory.tenant_id, memory.id, list(unique.values()))
        stats["linked"] += 1
        # A later preference or decision that contradicts an older one supersedes it on
        # precise evidence, or both stay as a conflict (pipelines.own.contradict); with a
        # model configured the model confirms each proposal first.
        live = [c for c in older if c.status == MemoryStatus.STORED]
        found = contradicted(memory, live)
        if found and ctx.settings.llm_is_remote:
            found = confirm(ctx.llm_for(memory.tenant_id), memory, live, found)
        if found:
            with ctx.pool.connection() as conn:
                applied = apply_supersessions(conn, found)
            stats["superseded"] = stats.get("superseded", 0) + applied["superseded"]
            stats["conflicts"] = stats.get("conflicts", 0) + applied["conflicts"]
            count_automatic_corrections("superseded", applied["superseded"])
            count_automatic_corrections("conflict", applied["conflicts"])
    if stats.get("superseded"):
        publish_quietly(TaskName.SETTLE_OWNERSHIP)
    return stats


# Memories linked per message: ~4 ms each in process, so a batch holds the store owner's
# single slot for about 0.1 s and a waiting write or context() is served soon after.
LINK_BATCH = 32


def link_unlinked(ctx: Clients, *, transient_fallback: bool = False) -> dict[str, Any]:
    """Link the oldest stored memories not linked yet, one small batch; ``more`` says go on.

    Linking yields to writes: while write jobs are due it does nothing, and the drain that
    empties the backlog publishes it again (the relay is the safety net). A batch stops after
    ``sweep_deadline_s`` (a model's calls) and goes on in the next message."""
    with ctx.pool.connection() as conn:
        if count_due_jobs(conn, kind=WRITE_JOB, grace_s=0.0):
            return {"linked": 0, "links": 0, "deferred": True, "more": False}
        ids = unlinked_ids(conn, older_than_s=0.0, limit=LINK_BATCH)
    deadline = time.monotonic() + ctx.settings.sweep_deadline_s
    stats = link_memories(ctx, ids, deadline=deadline, transient_fallback=transient_fallback)
    stats["more"] = len(ids) == LINK_BATCH or bool(stats.get("stopped_early"))
    return stats
