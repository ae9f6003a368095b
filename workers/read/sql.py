"""The read path's PostgreSQL side: full-text, temporal and literal recalls, row fetches and
version chains, pipelined on one connection per request.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Hashable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import ExitStack, contextmanager
from datetime import datetime
from functools import lru_cache
from typing import Any, Generic, TypeVar

from psycopg import Connection
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from pipelines.read.recall import (
    ConflictingStatement,
    MemoryVersion,
    MemoryView,
    RecallHit,
    RecallScope,
)
from pipelines.read.rewrite import extract_keywords
from pipelines.read.sparse import feedback_terms
from pipelines.records import Level, MemoryType
from pipelines.text.code import looks_like_code, split_identifier
from pipelines.text.words import has_han, raw_tokens

# PostgreSQL's text search configuration: English stemming, like the pipeline's analyzer. Han
# runs reach it as their bigrams on both sides (migration 0005 and ``tsquery_of``); it leaves
# them as they are.
TS_CONFIG = "english"

# The scope in SQL. Two texts rather than ``(%(task)s IS NULL OR m.task_id = %(task)s)``: a
# prepared statement's generic plan cannot use an index for an OR on a parameter, and psycopg
# prepares a statement after its fifth execution.
TASK_SCOPE_SQL = "m.tenant_id = %(tenant)s AND m.task_id = %(task)s"
TENANT_SCOPE_SQL = "m.tenant_id = %(tenant)s"

# ``search_tsv`` is memories_search_vector(content): to_tsvector(TS_CONFIG, content) with its
# Han runs as bigrams, kept for stored rows (migrations 0004 and 0005);
# memories_search_idx (GIN over tenant_id, task_id, search_tsv) yields the task's matching
# rows in one index scan, and only those are ranked.
SPARSE_SQL = f"""
    SELECT m.id::text, m.content, ts_rank(m.search_tsv, q.query) AS s
    FROM to_tsquery('{TS_CONFIG}', %(q)s) AS q(query), memories m
    WHERE {{scope}} AND m.status = 'stored' AND m.search_tsv @@ q.query
    ORDER BY s DESC, m.id
    LIMIT %(limit)s
"""

# The last days of the task through memories_scope_ts_idx (tenant_id, task_id, ts DESC): the
# newest RECENT_SCAN of the window, in index order, and only those ranked. Ranking the whole
# window made the leg grow with the task: at 1M memories (25k per task, ~5,900 in a week)
# it read and ranked every one of them, p50/p95 81.5/147.6 ms a call; the newest 500 take
# 4.5/5.6 ms there (`memharness bench store-legs`, docs/benchmarks.md). A window holding
# fewer rows than that is ranked whole.
RECENT_SCAN = 500
TEMPORAL_RANKED_SQL = f"""
    SELECT r.id::text, ts_rank(r.search_tsv, q.query) AS s
    FROM to_tsquery('{TS_CONFIG}', %(q)s) AS q(query), (
        SELECT m.id, m.ts, m.search_tsv FROM memories m
        WHERE {{scope}} AND m.status = 'stored' AND m.ts >= %(since)s
        ORDER BY m.ts DESC, m.id
        LIMIT %(scan)s
    ) AS r
    ORDER BY s DESC, r.ts DESC, r.id
    LIMIT %(limit)s
"""

TEMPORAL_NEWEST_SQL = """
    SELECT m.id::text, 0.0::real AS s
    FROM memories m
    WHERE {scope} AND m.status = 'stored' AND m.ts >= %(since)s
    ORDER BY m.ts DESC, m.id
    LIMIT %(limit)s
"""

# The rows by primary key first (OFFSET 0 keeps the subquery from being flattened), then the
# scope: left to itself the planner ANDs the pkey bitmap with a scan of the whole task's
# entries in memories_search_idx (1.8 ms for 100 ids at 100k rows, against 0.4 ms).
FETCH_SQL = """
    SELECT m.id::text AS id, m.content, m.ts, m.type, m.importance, m.decay_factor, m.level,
           m.task_id, m.session_id, m.summary
    FROM (
        SELECT id, tenant_id, task_id, status, content, ts, type, importance, decay_factor,
               level, session_id, summary
        FROM memories WHERE id = ANY(%(ids)s::uuid[]) OFFSET 0
    ) AS m
    WHERE {scope} AND m.status = 'stored'
"""

# A summary stands in for its sources only when it saves room: while every source is still
# stored and together they are less than STAND_IN_MIN_RATIO times its length, the sources
# are the better evidence at about the same cost, and a read that returned the summary too
# would spend a context's budget twice on the same turns (the Chinese system-quality run:
# summaries 1.22x their sources took 900 of the retrieved partition's 1,236 tokens). Once
# a source is evicted (decay keeps the summary that covers it), the summary is read again.
STAND_IN_MIN_RATIO = 1.5
FETCH_WITH_SOURCES_SQL = (
    FETCH_SQL.replace(
        "level, session_id, summary\n",
        "level, session_id, summary, parent_ids\n",
    )
    + f"""      AND NOT (
        m.level >= 1 AND coalesce(cardinality(m.parent_ids), 0) > 0
        AND (SELECT count(*) = cardinality(m.parent_ids)
                    AND sum(length(p.content)) < {STAND_IN_MIN_RATIO} * length(m.content)
             FROM memories p WHERE p.id = ANY(m.parent_ids) AND p.status = 'stored')
      )
"""
)

# Summary rows (migration 0003) point at what they cover with parent_ids; an L2 summary
# covers L1 summaries, so the chain is followed upwards from each memory. Both steps probe
# memories_parent_ids_idx (GIN over parent_ids of stored summary rows, migration 0004): the
# first with the whole id list at once, then once per summary found.
VERSIONS_SQL = """
    WITH RECURSIVE chain AS (
        SELECT s.id, s.level, s.content, origin
        FROM memories s, unnest(s.parent_ids) AS origin
        WHERE s.parent_ids && %(ids)s::uuid[] AND origin = ANY(%(ids)s::uuid[])
          AND s.tenant_id = %(tenant)s AND s.level >= 1 AND s.status = 'stored'
        UNION
        SELECT s.id, s.level, s.content, c.origin
        FROM chain c
        JOIN memories s ON s.parent_ids @> ARRAY[c.id]
        WHERE s.tenant_id = %(tenant)s AND s.level > c.level AND s.level >= 1
          AND s.status = 'stored'
    )
    SELECT origin::text AS origin, level, content FROM chain ORDER BY origin, level
"""


# The live memories each fetched one is in an open conflict with (migration 0011), both
# directions; probes memory_conflicts' primary key (older_id, ...) and its newer_id index.
CONFLICTS_SQL = """
    SELECT c.origin::text AS origin, o.id::text AS id, o.content, o.ts
    FROM (
        SELECT older_id AS origin, newer_id AS other FROM memory_conflicts
        WHERE older_id = ANY(%(ids)s::uuid[]) AND tenant_id = %(tenant)s AND status = 'open'
        UNION ALL
        SELECT newer_id, older_id FROM memory_conflicts
        WHERE newer_id = ANY(%(ids)s::uuid[]) AND tenant_id = %(tenant)s AND status = 'open'
    ) AS c
    JOIN memories o ON o.id = c.other AND o.status = 'stored'
"""


def scoped(sql: str, scope: RecallScope) -> str:
    """``sql`` with its ``{scope}`` filled for a task scope or a tenant-wide one."""
    return sql.replace("{scope}", TASK_SCOPE_SQL if scope.task_id is not None else TENANT_SCOPE_SQL)


HAS_PARENT_IDS_SQL = """
    SELECT 1 FROM information_schema.columns
    WHERE table_schema = current_schema() AND table_name = 'memories'
      AND column_name = 'parent_ids'
"""


# Whether the schema has ``parent_ids`` (migration 0003), asked once per pool.
_HAS_PARENT_IDS: dict[int, bool] = {}


def versions_from_rows(pool: ConnectionPool) -> bool:
    """Whether version chains can be read from the rows (a schema from before summaries
    had none)."""
    key = id(pool)
    if key not in _HAS_PARENT_IDS:
        with pool.connection() as conn:
            _HAS_PARENT_IDS[key] = conn.execute(HAS_PARENT_IDS_SQL).fetchone() is not None
    return _HAS_PARENT_IDS[key]


# A name only code has: snake_case or lowerCamelCase (PascalCase is also how products and
# people are spelled: PostgreSQL, LeBron, YouTube stay whole).
_CODE_NAME_RE = re.compile(r"[A-Za-z0-9]_[A-Za-z0-9]|^[a-z][a-z0-9]*[A-Z]")


@lru_cache(maxsize=4_096)
def tsquery_of(text: str) -> str:
    """An OR of the query's keywords for ``to_tsquery``, each quoted ('' when none).

    A question that looks like code also asks for the words of each identifier it names.
    ``plainto_tsquery`` would AND them, and a question rarely shares every word with its
    answer; PostgreSQL stems each quoted keyword itself. A Chinese keyword asks for its
    bigrams, the units its memories are indexed by (``pipelines.text.words.raw_tokens``, as
    migration 0005 segments them), each once. Memoised: every recaller of a request asks for
    the same few texts.
    """
    terms = []
    bigrams: set[str] = set()
    # A question in code's terms names identifiers (fetchUserById) that the index holds in
    # other spellings (fetch_user_by_id is indexed as its words): ask for their words too.
    code = looks_like_code(text)
    for word in extract_keywords(text)[:64]:
        if has_han(word):
            for term in raw_tokens(word):
                if term not in bigrams:
                    bigrams.add(term)
                    terms.append(_quoted(term))
            continue
        terms.append(_quoted(word))
        parts = split_identifier(word) if code and _CODE_NAME_RE.search(word) else []
        if len(parts) > 1:
            for part in parts:
                if part not in bigrams and part.lower() != word.lower():
                    bigrams.add(part)
                    terms.append(_quoted(part))
    return " | ".join(term for term in terms if term)


def _quoted(word: str) -> str:
    """A keyword as one quoted ``to_tsquery`` operand ('' when nothing is left of it)."""
    cleaned = word.replace("\\", " ").replace("'", " ").replace(":", " ").strip()
    return "'" + cleaned + "'" if cleaned else ""


def _scope_params(scope: RecallScope) -> dict[str, Any]:
    return {"tenant": scope.tenant_id, "task": scope.task_id}


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Memo(Generic[K, V]):
    """Answers by key, each computed once per request: a second caller (the keyword
    feedback and the literal variant's recall, or two variants with the same keywords, on
    two recall threads at once) waits for the first one's answer, or its exception, instead
    of asking the store again."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._futures: dict[K, Future[V]] = {}

    def claim(self, keys: Sequence[K]) -> list[tuple[Future[V], bool]]:
        """The future of each key and whether the caller owns it (must set its result or
        exception); ``get`` for callers that answer several keys at once."""
        with self._lock:
            out = []
            for key in keys:
                future = self._futures.get(key)
                if future is None:
                    future = self._futures[key] = Future()
                    out.append((future, True))
                else:
                    out.append((future, False))
            return out

    def has(self, key: K) -> bool:
        with self._lock:
            return key in self._futures

    def get(self, key: K, compute: Callable[[], V]) -> V:
        [(future, owner)] = self.claim([key])
        if owner:
            try:
                future.set_result(compute())
            except Exception as exc:
                future.set_exception(exc)
        return future.result()


def _sparse_answer(rows: list[Any]) -> list[tuple[str, str, float]]:
    return [(row[0], row[1], float(row[2])) for row in rows]


def _recent_answer(rows: list[Any]) -> list[RecallHit]:
    return [RecallHit(id=row[0], score=float(row[1])) for row in rows]


class PostgresRecall:
    """Sparse and temporal recall and the memory store, over one request's scope.

    One instance serves one request: identical searches of its recallers are asked once.
    """

    def __init__(self, pool: ConnectionPool, *, versions_from_rows: bool) -> None:
        self._pool = pool
        self._versions_from_rows = versions_from_rows
        self._memo: Memo[tuple[Any, ...], Any] = Memo()
        # Searches sent ahead (``queue_sparse``, ``queue_recent``) on the request's own
        # connection in pipeline mode: PostgreSQL runs them while this thread goes on, and
        # the first caller of the same search reads the answer.
        self._queued: dict[tuple[Any, ...], Callable[[], Any]] = {}
        self._held: ExitStack | None = None
        self._held_conn: Connection[Any] | None = None
        self._held_lock = threading.RLock()
        # Rows read by this request, and ids found not to be in scope: a second read of the
        # same ids (a caller reading more of a ranking it read part of) asks only for the
        # others, and sees the rows as it first read them.
        # Keyed by scope too: a row read for one scope is never an answer in another.
        self._views: dict[tuple[str, str | None, str], MemoryView] = {}
        self._absent: set[tuple[str, str | None, str]] = set()
        self._views_lock = threading.Lock()

    def __enter__(self) -> PostgresRecall:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Give the request's connection back (answers queued and never read included)."""
        with self._held_lock:
            held, self._held, self._held_conn = self._held, None, None
            self._queued.clear()
        if held is not None:
            held.close()

    def _pipelined(self) -> Connection[Any]:
        """The request's connection in pipeline mode, taken from the pool on first use."""
        with self._held_lock:
            if self._held_conn is None:
                stack = ExitStack()
                try:
                    conn = stack.enter_context(self._pool.connection())
                    stack.enter_context(conn.pipeline())
                except BaseException:
                    stack.close()
                    raise
                self._held, self._held_conn = stack, conn
            return self._held_conn

    @contextmanager
    def _connection(self) -> Iterator[Connection[Any]]:
        """The request's pipelined connection once it has one (its queued answers come in
        order on it), else one from the pool for this statement."""
        with self._held_lock:
            if self._held_conn is not None:
                yield self._held_conn
                return
        with self._pool.connection() as conn:
            yield conn

    def _queue(
        self,
        key: tuple[Any, ...],
        sql: str,
        params: dict[str, Any],
        parse: Callable[[list[Any]], Any],
    ) -> None:
        with self._held_lock:
            if key in self._queued or self._memo.has(key):
                return
            cursor = self._pipelined().cursor()
            cursor.execute(sql, params)
            self._queued[key] = lambda: parse(cursor.fetchall())

    def _take(self, key: tuple[Any, ...], run: Callable[[], Any]) -> Callable[[], Any]:
        with self._held_lock:
            return self._queued.pop(key, run)

    def _sparse_rows(
        self, text: str, scope: RecallScope, limit: int
    ) -> list[tuple[str, str, float]]:
        query = tsquery_of(text)
        if not query:
            return []

        key, sql, params = self._sparse_query(query, scope, limit)

        def run() -> list[tuple[str, str, float]]:
            with self._connection() as conn:
                return _sparse_answer(conn.execute(sql, params).fetchall())

        rows: list[tuple[str, str, float]] = self._memo.get(key, self._take(key, run))
        return rows

    @staticmethod
    def _sparse_query(
        query: str, scope: RecallScope, limit: int
    ) -> tuple[tuple[Any, ...], str, dict[str, Any]]:
        key = ("sparse", scope.tenant_id, scope.task_id, query, limit)
        return key, scoped(SPARSE_SQL, scope), {**_scope_params(scope), "q": query, "limit": limit}

    def queue_sparse(self, text: str, scope: RecallScope, limit: int) -> None:
        """Send ``search_sparse``'s query now; the call itself reads its answer later."""
        query = tsquery_of(text)
        if query:
            self._queue(*self._sparse_query(query, scope, limit), _sparse_answer)

    def search_sparse(self, text: str, scope: RecallScope, limit: int) -> list[RecallHit]:
        return [
            RecallHit(id=key, score=score)
            for key, _, score in self._sparse_rows(text, scope, limit)
        ]

    def related_terms(self, text: str, scope: RecallScope, limit: int) -> list[str]:
        """RM3 feedback over the top keyword hits in PostgreSQL's ranking, with the
        pipeline's analyzer and idf over the 50 hits (``pipelines.sparse.feedback_terms``)."""
        rows = self._sparse_rows(text, scope, 50)
        if len(rows) < 2:
            return []
        ranked = [(content, score) for _, content, score in rows]
        return [term for term, _ in feedback_terms(text, ranked, max_terms=limit)]

    def search_recent(
        self, text: str, scope: RecallScope, since: datetime, limit: int
    ) -> list[RecallHit]:
        key, sql, params = self._recent_query(text, scope, since, limit)

        def run() -> list[RecallHit]:
            with self._connection() as conn:
                return _recent_answer(conn.execute(sql, params).fetchall())

        hits: list[RecallHit] = self._memo.get(key, self._take(key, run))
        return list(hits)

    @staticmethod
    def _recent_query(
        text: str, scope: RecallScope, since: datetime, limit: int
    ) -> tuple[tuple[Any, ...], str, dict[str, Any]]:
        query = tsquery_of(text)
        key = ("recent", scope.tenant_id, scope.task_id, query, since, limit)
        params = {
            **_scope_params(scope),
            "q": query,
            "since": since,
            "limit": limit,
            "scan": max(RECENT_SCAN, limit),
        }
        return key, scoped(TEMPORAL_RANKED_SQL if query else TEMPORAL_NEWEST_SQL, scope), params

    def queue_recent(self, text: str, scope: RecallScope, since: datetime, limit: int) -> None:
        """Send ``search_recent``'s query now; the call itself reads its answer later."""
        self._queue(*self._recent_query(text, scope, since, limit), _recent_answer)

    def fetch(self, ids: Sequence[str], scope: RecallScope) -> list[MemoryView]:
        """The stored memories among ``ids`` inside ``scope``, in no particular order."""
        where = (scope.tenant_id, scope.task_id)
        wanted = [(*where, key) for key in dict.fromkeys(ids)]
        with self._views_lock:
            unread = [k for k in wanted if k not in self._views and k not in self._absent]
        if unread:
            views = self._read([k[2] for k in unread], scope)
            with self._views_lock:
                self._views.update(((*where, view.id), view) for view in views)
                self._absent.update(set(unread) - {(*where, view.id) for view in views})
        with self._views_lock:
            return [self._views[k] for k in wanted if k in self._views]

    def _read(self, ids: Sequence[str], scope: RecallScope) -> list[MemoryView]:
        params = {**_scope_params(scope), "ids": list(ids)}
        versions: dict[str, list[MemoryVersion]] = {}
        conflicts: dict[str, list[ConflictingStatement]] = {}
        with (
            self._connection() as conn,
            conn.cursor(row_factory=dict_row) as cur,
            conn.cursor(row_factory=dict_row) as vcur,
            conn.cursor(row_factory=dict_row) as ccur,
        ):
            # One round trip for the three statements (pipeline mode); the versions and
            # conflicts of ids the first one drops are never used (views are built from its
            # rows).
            with conn.pipeline():
                fetch = FETCH_WITH_SOURCES_SQL if self._versions_from_rows else FETCH_SQL
                cur.execute(scoped(fetch, scope), params)
                if self._versions_from_rows:
                    vcur.execute(VERSIONS_SQL, {"tenant": scope.tenant_id, "ids": list(ids)})
                    ccur.execute(CONFLICTS_SQL, {"tenant": scope.tenant_id, "ids": list(ids)})
            rows = cur.fetchall()
            if self._versions_from_rows:
                for row in vcur.fetchall():
                    versions.setdefault(str(row["origin"]), []).append(
                        MemoryVersion(level=Level(int(row["level"])), content=row["content"])
                    )
                for row in ccur.fetchall():
                    conflicts.setdefault(row["origin"], []).append(
                        ConflictingStatement(
                            id=row["id"], content=row["content"], timestamp=row["ts"]
                        )
                    )
        views = []
        for row in rows:
            key = str(row["id"])
            own: list[MemoryVersion] = []
            summary = (row["summary"] or "").strip()
            if summary and len(summary) < len(row["content"]):
                own.append(MemoryVersion(level=Level.L1, content=summary))
            chain = [v for v in versions.get(key, []) if v.level > row["level"]]
            view = MemoryView(
                id=key,
                content=row["content"],
                timestamp=row["ts"],
                type=MemoryType(row["type"]) if row["type"] else None,
                importance=min(1.0, max(0.0, float(row["importance"]))),
                retention=min(1.0, max(0.0, float(row["decay_factor"]))),
                level=Level(int(row["level"])),
                versions=tuple(own + chain),
                task_id=row["task_id"],
                session_id=row["session_id"],
                conflicts=tuple(conflicts.get(key, ())),
            )
            views.append(view)
        return views
