"""What the memory inspector reads beyond the API's calls: the links around one memory (a
small graph, a couple of hops out) and the tenant's conflicts and automatic corrections.
Read-only and tenant-scoped in every WHERE clause, like every other read."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from psycopg_pool import ConnectionPool
from pydantic import BaseModel, ConfigDict

from pipelines.cognition.link import LinkKind, MemoryLink
from workers.own.correct import AUTOMATIC_ACTOR

# A graph a person can follow on one screen: past this many nodes it turns into a hairball.
NEIGHBOURHOOD_MAX_NODES = 24


LINKS_TOUCHING = (
    "SELECT src_id, dst_id, kind, weight, reason FROM memory_links "
    "WHERE (src_id = ANY(%s) OR dst_id = ANY(%s)) AND tenant_id = %s"
)


class GraphNode(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: uuid.UUID
    content: str
    status: str
    level: int
    hops: int


class Neighbourhood(BaseModel):
    """``nodes[0]`` is the memory asked about; ``links`` join nodes of the list only."""

    model_config = ConfigDict(frozen=True)

    nodes: tuple[GraphNode, ...]
    links: tuple[MemoryLink, ...]


def memory_neighbourhood(
    pool: ConnectionPool, tenant_id: str, memory_id: uuid.UUID, *, max_hops: int = 2
) -> Neighbourhood:
    """The memories linked to ``memory_id`` (entity, similar, causal), hop by hop, at most
    ``NEIGHBOURHOOD_MAX_NODES`` of them, nearest and heaviest first."""
    hops = {memory_id: 0}
    links: dict[tuple[uuid.UUID, uuid.UUID, str], MemoryLink] = {}
    frontier = [memory_id]
    with pool.connection() as conn:
        for hop in range(1, max_hops + 1):
            if not frontier:
                break
            rows = conn.execute(LINKS_TOUCHING, (frontier, frontier, tenant_id)).fetchall()
            found = sorted(
                (
                    MemoryLink(src_id=r[0], dst_id=r[1], kind=LinkKind(r[2]),
                               weight=min(1.0, r[3]), reason=r[4] or "")
                    for r in rows
                ),
                key=lambda link: -link.weight,
            )  # fmt: skip
            frontier = []
            for link in found:
                for end in (link.src_id, link.dst_id):
                    if end not in hops and len(hops) < NEIGHBOURHOOD_MAX_NODES:
                        hops[end] = hop
                        frontier.append(end)
                if link.src_id in hops and link.dst_id in hops:
                    links[(link.src_id, link.dst_id, link.kind.value)] = link
        rows = conn.execute(
            "SELECT id, content, status, level FROM memories WHERE id = ANY(%s) AND tenant_id = %s",
            (list(hops), tenant_id),
        ).fetchall()
    found_rows = {r[0]: r for r in rows}
    nodes = [
        GraphNode(
            id=node,
            content=found_rows[node][1],
            status=found_rows[node][2],
            level=found_rows[node][3],
            hops=hop,
        )
        for node, hop in sorted(hops.items(), key=lambda kv: kv[1])
        if node in found_rows
    ]
    known = {n.id for n in nodes}
    return Neighbourhood(
        nodes=tuple(nodes),
        links=tuple(
            link for link in links.values() if link.src_id in known and link.dst_id in known
        ),
    )


class PairView(BaseModel):
    """Two memories the background compared: a recorded conflict (both kept) or an
    automatic supersession (``older`` marked corrected by ``newer``), with what each says."""

    model_config = ConfigDict(frozen=True)

    kind: str  # "conflict" or "supersession"
    older_id: uuid.UUID
    newer_id: uuid.UUID
    older_content: str
    newer_content: str
    older_ts: datetime
    newer_ts: datetime
    status: str  # conflict: open, kept, resolved; supersession: applied or undone
    reason: str
    actor: str
    at: datetime
    undoable: bool


CONFLICTS = """
SELECT c.older_id, c.newer_id, o.content, n.content, o.ts, n.ts, c.status, c.reason, c.actor,
       c.updated_at
FROM memory_conflicts c
JOIN memories o ON o.id = c.older_id AND o.tenant_id = c.tenant_id
JOIN memories n ON n.id = c.newer_id AND n.tenant_id = c.tenant_id
WHERE c.tenant_id = %s
ORDER BY c.updated_at DESC LIMIT %s
"""

# The supersessions the automatic path made; undoable while the older one is still corrected
# by the same newer one (an undo clears ``corrected_by``).
SUPERSESSIONS = """
SELECT e.memory_id, e.related_id, o.content, n.content, o.ts, n.ts,
       (o.status = 'corrected' AND o.corrected_by = e.related_id) AS live, e.reason, e.actor,
       e.at
FROM memory_events e
JOIN memories o ON o.id = e.memory_id AND o.tenant_id = e.tenant_id
JOIN memories n ON n.id = e.related_id AND n.tenant_id = e.tenant_id
WHERE e.tenant_id = %s AND e.event = 'superseded' AND e.actor = %s
ORDER BY e.at DESC LIMIT %s
"""


def conflicts_and_supersessions(
    pool: ConnectionPool, tenant_id: str, *, limit: int = 100
) -> list[PairView]:
    """The tenant's conflicts and automatic corrections, newest first (at most ``limit`` of
    each). A supersession another pair settled since (an undo) lists as ``undone``."""
    with pool.connection() as conn:
        conflicts = conn.execute(CONFLICTS, (tenant_id, limit)).fetchall()
        supersessions = conn.execute(SUPERSESSIONS, (tenant_id, AUTOMATIC_ACTOR, limit)).fetchall()
    pairs = [_pair("conflict", r, status=r[6], undoable=False) for r in conflicts]
    pairs += [
        _pair("supersession", r, status="applied" if r[6] else "undone", undoable=bool(r[6]))
        for r in supersessions
    ]
    return sorted(pairs, key=lambda p: p.at, reverse=True)


def _pair(kind: str, row: tuple[Any, ...], *, status: str, undoable: bool) -> PairView:
    return PairView(
        kind=kind,
        older_id=row[0],
        newer_id=row[1],
        older_content=row[2],
        newer_content=row[3],
        older_ts=row[4],
        newer_ts=row[5],
        status=status,
        reason=row[7] or "",
        actor=row[8] or "",
        at=row[9],
        undoable=undoable,
    )
