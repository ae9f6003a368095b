"""The read path: ``pipelines.assemble.build_context`` with its ports bound to the stores.

- dense recall: the vector index (``VectorIndex.search``, tenant and task in the filter);
- sparse recall: PostgreSQL full-text search over the stored ``search_tsv`` (migration 0004)
  against an OR of the query's keywords, ranked by ``ts_rank``, tenant and task in the WHERE
  clause, which one GIN index on (tenant_id, task_id, search_tsv) answers;
- temporal recall: PostgreSQL, the task's memories of the last 7 days, the most relevant of
  them first (``ts_rank``, then the newest);
- the store: memories and their compressed versions (the write-time summary, then the
  summary rows of higher levels whose ``parent_ids`` reach the memory, when that column
  exists), read back inside the same scope;
- the window: the Redis working-memory pool (``workers.working_memory``);
- the LLM: focus, rewrite and rerank from the LLM port when it is remote; offline, the
  pipelines' own rules (which see more than the port's: the local scores, the BM25 feedback).

Why full-text search in PostgreSQL rather than an in-process BM25 index: it has no state to
keep coherent with the store (a BM25 index per tenant and task would have to be rebuilt in the
owner after every restart and fed by every write, compression and eviction), it works the
same with one owner process or many server-mode workers, and the scope sits in the same WHERE
clause as everything else. With the stored tsvector and its scoped GIN index a search
costs in the task's matching rows (2.3 ms at 100k memories, where computing ``to_tsvector``
for every row of the task took 62 ms); the pseudo-relevance feedback (RM3) takes its terms
from the 50 rows the search returns, in the search's own ranking, with the pipeline's
analyzer.

Access bumps leave the read path: the caller publishes ``memory.maintenance.touch_memories``
with the ids the context delivered; nothing here writes to PostgreSQL.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import uuid
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, Generic, TypeVar

from psycopg import Connection
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from config import Settings
from pipelines.assemble import (
    AssembledContext,
    ContextItem,
    ContextRequest,
    ContextSources,
    WorkingVariable,
    build_context,
    check_context_request,
)
from pipelines.budget import Partition, PartitionLayout, layout_from_budgets
from pipelines.embedding_context import fusion_weights, query_context_text
from pipelines.focus import decide_focus
from pipelines.ports import LLM, ContextFusion, Embedder, VectorIndex
from pipelines.records import InvalidInput, Level, MemoryType, check_id, check_text
from pipelines.retrieve import MemoryVersion, MemoryView, RecallHit, RecallPorts, RecallScope
from pipelines.rewrite import extract_keywords
from pipelines.sparse import feedback_terms
from pipelines.tokens import TokenCounter
from workers.index_service import EPISODIC, dense_search_target
from workers.working_memory import WorkingMemoryPool

log = logging.getLogger(__name__)

# What the caller may hand over besides the query. Items are also capped in bytes by
# content_max_bytes; the partitions' budgets then decide what fits.
MAX_SOURCE_ITEMS = 500

# PostgreSQL's text search configuration: English stemming, like the pipeline's analyzer.
TS_CONFIG = "english"

# The scope in SQL. Two texts rather than ``(%(task)s IS NULL OR m.task_id = %(task)s)``: a
# prepared statement's generic plan cannot use an index for an OR on a parameter, and psycopg
# prepares a statement after its fifth execution.
TASK_SCOPE_SQL = "m.tenant_id = %(tenant)s AND m.task_id = %(task)s"
TENANT_SCOPE_SQL = "m.tenant_id = %(tenant)s"

# ``search_tsv`` is to_tsvector(TS_CONFIG, content), kept for stored rows (migration 0004);
# memories_search_idx (GIN over tenant_id, task_id, search_tsv) yields the task's matching
# rows in one index scan, and only those are ranked.
SPARSE_SQL = f"""
    SELECT m.id::text, m.content, ts_rank(m.search_tsv, q.query) AS s
    FROM to_tsquery('{TS_CONFIG}', %(q)s) AS q(query), memories m
    WHERE {{scope}} AND m.status = 'stored' AND m.search_tsv @@ q.query
    ORDER BY s DESC, m.id
    LIMIT %(limit)s
"""

# The last days of the task through memories_scope_ts_idx (tenant_id, task_id, ts DESC).
TEMPORAL_RANKED_SQL = f"""
    SELECT m.id::text, ts_rank(m.search_tsv, q.query) AS s
    FROM to_tsquery('{TS_CONFIG}', %(q)s) AS q(query), memories m
    WHERE {{scope}} AND m.status = 'stored' AND m.ts >= %(since)s
    ORDER BY s DESC, m.ts DESC, m.id
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


def scoped(sql: str, scope: RecallScope) -> str:
    """``sql`` with its ``{scope}`` filled for a task scope or a tenant-wide one."""
    return sql.replace("{scope}", TASK_SCOPE_SQL if scope.task_id is not None else TENANT_SCOPE_SQL)


HAS_PARENT_IDS_SQL = """
    SELECT 1 FROM information_schema.columns
    WHERE table_schema = current_schema() AND table_name = 'memories'
      AND column_name = 'parent_ids'
"""


@lru_cache(maxsize=4_096)
def tsquery_of(text: str) -> str:
    """An OR of the query's keywords for ``to_tsquery``, each quoted ('' when none).

    ``plainto_tsquery`` would AND them, and a question rarely shares every word with its
    answer; PostgreSQL stems each quoted keyword itself. Memoised: every recaller of a
    request asks for the same few texts.
    """
    terms = []
    for word in extract_keywords(text)[:64]:
        cleaned = word.replace("\\", " ").replace("'", " ").replace(":", " ").strip()
        if cleaned:
            terms.append("'" + cleaned + "'")
    return " | ".join(terms)


def layout_of(settings: Settings) -> PartitionLayout:
    return layout_from_budgets(
        {
            Partition.SYSTEM.value: settings.context_system_tokens,
            Partition.TASK_CONTEXT.value: settings.context_task_tokens,
            Partition.RETRIEVED_MEMORY.value: settings.context_retrieved_tokens,
            Partition.RECENT_INTERACTIONS.value: settings.context_recent_tokens,
            Partition.WORKING_VARIABLES.value: settings.context_variables_tokens,
            Partition.SCRATCH.value: settings.context_scratch_tokens,
        }
    )


def _scope_params(scope: RecallScope) -> dict[str, Any]:
    return {"tenant": scope.tenant_id, "task": scope.task_id}


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _Memo(Generic[K, V]):
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
        self._memo: _Memo[tuple[Any, ...], Any] = _Memo()
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
        params = {**_scope_params(scope), "q": query, "since": since, "limit": limit}
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
        with (
            self._connection() as conn,
            conn.cursor(row_factory=dict_row) as cur,
            conn.cursor(row_factory=dict_row) as vcur,
        ):
            # One round trip for both statements (pipeline mode); the versions of ids the
            # first one drops are never looked up (views are built from its rows).
            with conn.pipeline():
                cur.execute(scoped(FETCH_SQL, scope), params)
                if self._versions_from_rows:
                    vcur.execute(VERSIONS_SQL, {"tenant": scope.tenant_id, "ids": list(ids)})
            rows = cur.fetchall()
            if self._versions_from_rows:
                for row in vcur.fetchall():
                    versions.setdefault(str(row["origin"]), []).append(
                        MemoryVersion(level=Level(int(row["level"])), content=row["content"])
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
            )
            views.append(view)
        return views


class VectorRecall:
    """Dense recall through the vector port; each query text is embedded once.

    With ``fusion`` (the step's phase and focus as a context string, and the phase's
    weights; ``pipelines.embedding_context``) every search fuses the content vector with the
    context vector; the context string is embedded with the first query texts.
    """

    def __init__(
        self,
        vectors: VectorIndex,
        embedder: Embedder,
        collection: str | None,
        vector_lock: threading.Lock,
        fusion: tuple[str, tuple[float, float]] | None = None,
    ) -> None:
        self._vectors = vectors
        self._embedder = embedder
        self._collection = collection
        self._vector_lock = vector_lock
        self._fusion = fusion
        self._memo: _Memo[tuple[Any, ...], list[RecallHit]] = _Memo()
        self._cache: dict[str, list[float]] = {}
        self._cache_lock = threading.Lock()

    def _embed(self, texts: Sequence[str]) -> list[list[float]]:
        """The vectors of ``texts``, the ones not seen yet embedded in one call."""
        with self._cache_lock:
            missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if missing:
            vectors = self._embedder.embed(missing)
            with self._cache_lock:
                self._cache.update(zip(missing, vectors, strict=True))
        with self._cache_lock:
            return [self._cache[text] for text in texts]

    def _context_fusion(self) -> ContextFusion | None:
        if self._fusion is None:
            return None
        context, (content_weight, context_weight) = self._fusion
        return ContextFusion(
            context=self._embed([context])[0],
            content_weight=content_weight,
            context_weight=context_weight,
        )

    def search_dense(self, text: str, scope: RecallScope, limit: int) -> list[RecallHit]:
        return self.search_dense_many([text], scope, limit)[0]

    def search_dense_many(
        self, texts: Sequence[str], scope: RecallScope, limit: int
    ) -> list[list[RecallHit]]:
        """``search_dense`` of each text, the ones not searched yet in one batch: the
        embedder gets one call for all of them and the engine one planned batch."""
        collection = self._collection
        if collection is None:
            # A re-embed run is building the current model's vectors: a score against the
            # old ones would mix versions, so dense recall sits out until the alias switch.
            return [[] for _ in texts]
        unique = list(dict.fromkeys(texts))
        futures = self._memo.claim([(scope.tenant_id, scope.task_id, t, limit) for t in unique])
        owned = [text for text, (_, owner) in zip(unique, futures, strict=True) if owner]
        if owned:
            try:
                prefix = [self._fusion[0]] if self._fusion is not None else []
                vectors = self._embed(prefix + owned)[len(prefix) :]
                fusion = self._context_fusion()
                # The embedded engine is one shard per collection: searches take turns on
                # it while the PostgreSQL recallers run in parallel.
                with self._vector_lock:
                    answers = self._vectors.search_many(
                        collection,
                        vectors,
                        tenant_id=scope.tenant_id,
                        task_id=scope.task_id,
                        limit=limit,
                        fusion=fusion,
                        with_payload=False,
                    )
            except Exception as exc:
                for future, owner in futures:
                    if owner:
                        future.set_exception(exc)
                raise
            results = iter(answers)
            for future, owner in futures:
                if owner:
                    hits = next(results)
                    future.set_result([RecallHit(id=str(h.id), score=h.score) for h in hits])
        by_text = {text: future.result() for text, (future, _) in zip(unique, futures, strict=True)}
        return [list(by_text[text]) for text in texts]

    def similarity(self, text: str, ids: Sequence[str], scope: RecallScope) -> dict[str, float]:
        """The cosine of ``text`` with the stored content vectors of ``ids``: one search
        restricted to those points, scope included (a point not indexed yet has none)."""
        collection = self._collection
        if collection is None or not ids:
            return {}
        points = [uuid.UUID(key) for key in dict.fromkeys(ids)]
        vector = self._embed([text])[0]
        with self._vector_lock:
            hits = self._vectors.search(
                collection,
                vector,
                tenant_id=scope.tenant_id,
                task_id=scope.task_id,
                limit=len(points),
                with_payload=False,
                ids=points,
            )
        return {str(hit.id): float(hit.score) for hit in hits if math.isfinite(hit.score)}


@dataclass
class ReadStores:
    """What a process binds the read path to: built once per process, shared by requests."""

    settings: Settings
    pool: ConnectionPool
    vectors: VectorIndex
    embedder: Embedder
    llm: LLM
    counter: TokenCounter
    working_memory: WorkingMemoryPool
    collection: str
    vector_lock: threading.Lock = field(default_factory=threading.Lock)
    _has_parent_ids: bool | None = None

    @property
    def layout(self) -> PartitionLayout:
        return layout_of(self.settings)

    def versions_from_rows(self) -> bool:
        if self._has_parent_ids is None:
            with self.pool.connection() as conn:
                self._has_parent_ids = conn.execute(HAS_PARENT_IDS_SQL).fetchone() is not None
        return self._has_parent_ids


# -- the request --------------------------------------------------------------------------


@dataclass(frozen=True)
class ContextCall:
    """A validated ``context`` call: the request plus what the caller holds."""

    tenant_id: str
    session_id: str | None
    request: ContextRequest
    system: str
    task_context: tuple[str, ...]
    variables: tuple[tuple[str, str], ...]
    scratch: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """The task's kwargs: scalars and lists only (the wire format is JSON)."""
        request = self.request
        focus: str | list[str] | None
        if request.focus is None or isinstance(request.focus, str):
            focus = request.focus
        else:
            focus = [kind.value for kind in request.focus]
        return {
            "tenant_id": self.tenant_id,
            "task_id": request.task_id,
            "query": request.query,
            "budget_tokens": request.budget_tokens,
            "phase": request.phase.value if request.phase else None,
            "focus": focus,
            "session_id": self.session_id,
            "system": self.system,
            "task_context": list(self.task_context),
            "variables": dict(self.variables),
            "scratch": list(self.scratch),
        }


def _check_items(name: str, value: object, max_bytes: int) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise InvalidInput(name, f"must be a list of texts, got {type(value).__name__}")
    if len(value) > MAX_SOURCE_ITEMS:
        raise InvalidInput(
            name, f"has {len(value)} items; at most {MAX_SOURCE_ITEMS}", f"{MAX_SOURCE_ITEMS}"
        )
    return tuple(
        check_text(f"{name}[{index}]", item, max_bytes) for index, item in enumerate(value)
    )


def _check_variables(value: object, max_bytes: int) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise InvalidInput("variables", f"must be a mapping, got {type(value).__name__}")
    if len(value) > MAX_SOURCE_ITEMS:
        raise InvalidInput(
            "variables",
            f"has {len(value)} entries; at most {MAX_SOURCE_ITEMS}",
            f"{MAX_SOURCE_ITEMS}",
        )
    out = []
    for key, raw in value.items():
        if not isinstance(key, str) or not key.strip():
            raise InvalidInput("variables", f"keys must be non-empty strings, got {key!r}")
        try:
            text = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)
        except (TypeError, ValueError):
            raise InvalidInput(
                f"variables.{key}", f"is not JSON serialisable ({type(raw).__name__})"
            ) from None
        if len(text.encode("utf-8", "replace")) > max_bytes:
            raise InvalidInput(f"variables.{key}", f"exceeds {max_bytes} bytes", f"{max_bytes}")
        out.append((key, text))
    return tuple(out)


def check_context_call(
    *,
    tenant_id: object,
    task_id: object,
    query: object,
    budget_tokens: object,
    phase: object = None,
    focus: object = None,
    session_id: object = None,
    system: object = "",
    task_context: object = None,
    variables: object = None,
    scratch: object = None,
    counter: TokenCounter,
    layout: PartitionLayout,
    content_max_bytes: int,
) -> ContextCall:
    """Every argument of ``MemoryClient.context``; InvalidInput names the field and limit."""
    tenant = check_id("tenant_id", tenant_id)
    session = check_id("session_id", session_id, required=False)
    request = check_context_request(
        task_id, query, budget_tokens, phase, focus, counter=counter, layout=layout
    )
    if system is None:
        system = ""
    if not isinstance(system, str):
        raise InvalidInput("system", f"must be text, got {type(system).__name__}")
    assert tenant is not None
    return ContextCall(
        tenant_id=tenant,
        session_id=session,
        request=request,
        system=system,
        task_context=_check_items("task_context", task_context, content_max_bytes),
        variables=_check_variables(variables, content_max_bytes),
        scratch=_check_items("scratch", scratch, content_max_bytes),
    )


def assemble_for(
    stores: ReadStores,
    call: ContextCall,
    *,
    now: datetime | None = None,
) -> AssembledContext:
    """Run ``build_context`` for one validated call against the bound stores."""
    now = now or datetime.now(UTC)
    request = call.request

    def sources() -> ContextSources:
        # Called by build_context once PostgreSQL has the literal query's recalls: Redis
        # answers the window's reads meanwhile.
        window = stores.working_memory.advance(
            call.tenant_id, request.task_id, call.session_id, stores.llm, stores.counter
        )
        return ContextSources(
            system=call.system,
            task_context=tuple(
                ContextItem(id=f"task:{index}", text=text, must_keep=True)
                for index, text in enumerate(call.task_context)
            ),
            summaries=window.summaries,
            turns=window.turns,
            variables=tuple(WorkingVariable(key=key, value=value) for key, value in call.variables),
            scratch=tuple(
                ContextItem(id=f"scratch:{index}", text=text, timestamp=now)
                for index, text in enumerate(call.scratch)
            ),
        )

    scope = RecallScope(tenant_id=call.tenant_id, task_id=request.task_id, now=now)
    store = PostgresRecall(stores.pool, versions_from_rows=stores.versions_from_rows())
    # Offline, the pipeline's rules see more than the port's would (local scores, feedback).
    remote = stores.llm if stores.settings.llm_is_remote else None
    # The dense search fuses in the step's context (phase and focus), so the focus is decided
    # here first and handed to build_context (one decision, one LLM call).
    focus = decide_focus(request.query, phase=request.phase, focus=request.focus, llm=remote)
    dense = VectorRecall(
        stores.vectors,
        stores.embedder,
        stores.collection if dense_search_target(stores, EPISODIC) is not None else None,
        stores.vector_lock,
        fusion=(
            query_context_text(request.phase, [item.kind.value for item in focus.kinds]),
            fusion_weights(request.phase),
        ),
    )
    ports = RecallPorts(dense=dense, sparse=store, temporal=store, store=store)
    with store:
        return build_context(
            request,
            sources,
            scope=scope,
            ports=ports,
            counter=stores.counter,
            focus_llm=remote,
            focus=focus,
            rewrite_llm=remote,
            rerank_llm=remote,
            layout=stores.layout,
        )


def delivered_memory_ids(context: AssembledContext) -> list[str]:
    """The memories the context actually holds (what an access bump should count)."""
    return [item.id for item in context.partition(Partition.RETRIEVED_MEMORY).items]


def context_answer(
    stores: ReadStores,
    kwargs: Mapping[str, Any],
    publish_touch: Callable[[str, list[str], datetime], None],
) -> dict[str, Any]:
    """The ``memory.recall.context`` task's body: JSON in, JSON out.

    A bad argument comes back as ``{"error": {...}}`` (the client raises InvalidInput with
    the same field and limit); anything else raises and the task fails.
    """
    try:
        call = check_context_call(
            **kwargs,
            counter=stores.counter,
            layout=stores.layout,
            content_max_bytes=stores.settings.content_max_bytes,
        )
        now = datetime.now(UTC)
        context = assemble_for(stores, call, now=now)
    except InvalidInput as exc:
        return {"error": {"field": exc.field, "message": str(exc), "limit": exc.limit}}
    except TypeError as exc:  # an unknown or missing keyword
        return {"error": {"field": "arguments", "message": str(exc), "limit": None}}
    ids = delivered_memory_ids(context)
    if ids:
        try:
            publish_touch(call.tenant_id, ids, now)
        except Exception as exc:  # a lost bump must not lose the answer
            log.warning("access bump of %s memories not published: %s", len(ids), exc)
    return {"context": context.model_dump(mode="json")}


# -- access bumps, off the read path ------------------------------------------------------

# A replay of the same bump finds last_accessed_at already equal to its time and changes
# nothing; a bump delivered late (after a newer one) still counts and never moves the time
# backwards. Only a replay that arrives after a newer bump counts twice.
TOUCH_SQL = """
    UPDATE memories
    SET access_count = access_count + 1,
        last_accessed_at = GREATEST(last_accessed_at, %(at)s)
    WHERE id = ANY(%(ids)s::uuid[]) AND tenant_id = %(tenant)s
      AND last_accessed_at IS DISTINCT FROM %(at)s
"""


def touch_memories(
    pool: ConnectionPool, tenant_id: str, memory_ids: Sequence[str], accessed_at: datetime
) -> int:
    """Count one access of each memory at ``accessed_at``; returns the rows bumped."""
    if not memory_ids:
        return 0
    with pool.connection() as conn:
        cursor = conn.execute(
            TOUCH_SQL, {"ids": list(memory_ids), "tenant": tenant_id, "at": accessed_at}
        )
        return cursor.rowcount
