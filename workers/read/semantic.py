"""The read path's semantic knowledge: the tenant's live semantic memories (what nightly
consolidation made of the episodes), recalled for a ``context()`` query and listed for
``MemoryClient.knowledge``.

Both read PostgreSQL, not the vector index's semantic collection: consolidation writes its
rows without indexing them (the collection catches up at the next reconciliation, and holds
a row's status as it was then), so the index would miss the newest knowledge and keep
serving retired rows; and a search of it would be one more turn on the embedded engine,
which holds the GIL while it searches. In PostgreSQL the recall is one more statement on the
request's pipelined connection (:class:`KnowledgeRecall`), sent after the keyword and
temporal searches and read after the fusion: no round trip of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg_pool import ConnectionPool

from pipelines.cognition.knowledge import KnowledgeKind
from pipelines.errors import InvalidInput
from pipelines.read.recall import KnowledgeView, RecallScope, knowledge_needles
from pipelines.read.request import QUERY_MAX_BYTES
from pipelines.read.retrieve import knowledge_coverage
from pipelines.records import check_enum, check_id, check_text
from workers.read.sql import PostgresRecall

# The statuses of knowledge in use: the semantic collection's live statuses
# (workers.index.targets); a retired row was rolled back and is never recalled.
LIVE_STATUSES = ("active", "needs_confirmation")

_COLUMNS = """
    s.id::text AS id, s.kind, s.content, s.confidence, s.conditions, s.scope, s.status,
    s.source_ids::text[] AS sources, s.updated_at
"""

# The tenant's live rows holding any of the needles (``knowledge_needles``, as one
# case-insensitive alternation), the most confident first. semantic_memories_tenant_idx
# (tenant_id, status) yields the tenant's rows and one regular expression is tried on each:
# for 200 rows as cheap as reading 32 of them (~0.5 ms here), where counting the needles
# each row holds (a LIKE per needle and row) cost 2-6 ms for a Chinese query's bigrams.
MATCH_SQL = f"""
    SELECT {_COLUMNS}
    FROM semantic_memories s
    WHERE s.tenant_id = %(tenant)s AND s.status = ANY(%(statuses)s)
      AND (s.content ~* %(needles)s OR s.conditions ~* %(needles)s)
      {{kind}}
    ORDER BY s.confidence DESC, s.updated_at DESC, s.id
    LIMIT %(limit)s
"""

LIST_SQL = f"""
    SELECT {_COLUMNS}
    FROM semantic_memories s
    WHERE s.tenant_id = %(tenant)s AND s.status = ANY(%(statuses)s)
      {{kind}}
    ORDER BY s.confidence DESC, s.updated_at DESC, s.id
    LIMIT %(limit)s
"""

# Two texts rather than ``(%(kind)s IS NULL OR s.kind = %(kind)s)``, as the episodes' scope
# (workers.read.sql): a prepared statement's generic plan cannot use an OR on a parameter.
KIND_SQL = "AND s.kind = %(kind)s"


def _with_kind(sql: str, kind: str | None) -> str:
    return sql.replace("{kind}", KIND_SQL if kind is not None else "")


def needles_regex(needles: Sequence[str]) -> str:
    """The needles as one alternation for ``~*``, each matched literally: in PostgreSQL's
    regular expressions a backslash before a character that is not a letter or a digit
    makes it that character (``snake_case`` stays ``snake\\_case``, ``c++`` ``c\\+\\+``)."""
    return "|".join(
        "".join(ch if ch.isalnum() else "\\" + ch for ch in needle) for needle in needles
    )


def _answer(rows: Sequence[Sequence[Any]]) -> list[KnowledgeView]:
    """Rows of ``MATCH_SQL`` or ``LIST_SQL`` (``_COLUMNS``, in order) as views, built
    without validation: PostgreSQL typed every value, and the schema's CHECK holds the
    confidence in [0, 1] (a few µs a row saved on the read path)."""
    return [
        KnowledgeView.model_construct(
            id=key,
            kind=kind,
            content=content,
            confidence=float(confidence),
            conditions=conditions,
            scope=scope,
            status=status,
            sources=tuple(sources or ()),
            updated_at=updated_at,
        )
        for key, kind, content, confidence, conditions, scope, status, sources, updated_at in rows
    ]


class KnowledgeRecall(PostgresRecall):
    """The request's PostgreSQL recalls with the tenant's semantic knowledge besides: its
    search goes on the same pipelined connection as the keyword and temporal ones."""

    @staticmethod
    def _knowledge_query(
        text: str, scope: RecallScope, limit: int
    ) -> tuple[tuple[Any, ...], str, dict[str, Any]] | None:
        needles = knowledge_needles(text)
        if not needles:
            return None
        key = ("knowledge", scope.tenant_id, tuple(needles), limit)
        params = {
            "tenant": scope.tenant_id,
            "statuses": list(LIVE_STATUSES),
            "needles": needles_regex(needles),
            "limit": limit,
        }
        return key, _with_kind(MATCH_SQL, None), params

    def queue_knowledge(self, text: str, scope: RecallScope, limit: int) -> None:
        """Send ``search_knowledge``'s query now; the call itself reads its answer later."""
        query = self._knowledge_query(text, scope, limit)
        if query is not None:
            self._queue(*query, _answer)

    def search_knowledge(self, text: str, scope: RecallScope, limit: int) -> list[KnowledgeView]:
        query = self._knowledge_query(text, scope, limit)
        if query is None:
            return []
        key, sql, params = query

        def run() -> list[KnowledgeView]:
            with self._connection() as conn:
                return _answer(conn.execute(sql, params).fetchall())

        views: list[KnowledgeView] = self._memo.get(key, self._take(key, run))
        return list(views)


# -- the listing ----------------------------------------------------------------------------

# The most rows one listing returns: a tenant's knowledge is hundreds of rows, not millions.
KNOWLEDGE_LIST_MAX = 500
# A listing with a query reads at most this many matching rows, then weighs them: the
# store's match is loose and ordered by confidence, so the best are picked here.
LIST_SCAN_ROWS = 4 * KNOWLEDGE_LIST_MAX


@dataclass(frozen=True)
class KnowledgeQuery:
    """A checked ``MemoryClient.knowledge`` call."""

    tenant_id: str
    kind: KnowledgeKind | None
    query: str | None
    limit: int


def check_knowledge_call(
    *, tenant_id: object, kind: object = None, query: object = None, limit: object = 50
) -> KnowledgeQuery:
    """Every argument of ``MemoryClient.knowledge``; InvalidInput names the field and the
    limit."""
    tenant = check_id("tenant_id", tenant_id)
    assert tenant is not None
    checked_kind = None if kind is None else check_enum("kind", kind, KnowledgeKind)
    text = None if query is None else " ".join(check_text("query", query, QUERY_MAX_BYTES).split())
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise InvalidInput("limit", f"must be an integer, got {type(limit).__name__}")
    if not 1 <= limit <= KNOWLEDGE_LIST_MAX:
        raise InvalidInput(
            "limit",
            f"must be between 1 and {KNOWLEDGE_LIST_MAX}, got {limit}",
            f"{KNOWLEDGE_LIST_MAX}",
        )
    return KnowledgeQuery(tenant_id=tenant, kind=checked_kind, query=text, limit=limit)


def list_knowledge(pool: ConnectionPool, call: KnowledgeQuery) -> list[KnowledgeView]:
    """The tenant's live semantic memories: the most confident first, or with a query the
    ones saying most of it first (``knowledge_coverage``; rows saying none of its whole
    terms are left out)."""
    kind = call.kind.value if call.kind is not None else None
    params: dict[str, Any] = {
        "tenant": call.tenant_id,
        "statuses": list(LIVE_STATUSES),
        "kind": kind,
    }
    if call.query is None:
        sql = _with_kind(LIST_SQL, kind)
        params["limit"] = call.limit
    else:
        needles = knowledge_needles(call.query)
        if not needles:
            return []
        sql = _with_kind(MATCH_SQL, kind)
        params.update(needles=needles_regex(needles), limit=LIST_SCAN_ROWS)
    with pool.connection() as conn:
        rows = conn.execute(sql, params).fetchall()
    views = _answer(rows)
    if call.query is None:
        return views
    coverage = knowledge_coverage(call.query, views)
    ranked = sorted(
        ((share, view) for share, view in zip(coverage, views, strict=True) if share > 0.0),
        key=lambda pair: (-pair[0], -pair[1].confidence, pair[1].id),
    )
    return [view for _, view in ranked[: call.limit]]
