"""The read path: ``pipelines.assemble.build_context`` with its ports bound to the stores.

- dense recall: the vector index (``VectorIndex.search``, tenant and task in the filter);
- sparse recall: PostgreSQL full-text search computed in the query (``to_tsvector`` against an
  OR of the query's keywords, ranked by ``ts_rank``), tenant and task in the WHERE clause;
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
clause as everything else. Its cost is a ``to_tsvector`` per scanned row of the task (the
``(tenant_id, task_id, ts)`` index narrows the scan to the task); the pipeline's BM25 is still
used for the pseudo-relevance feedback over the 50 rows the search returns.

Access bumps leave the read path: the caller publishes ``memory.maintenance.touch_memories``
with the ids the context delivered; nothing here writes to PostgreSQL.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
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
from pipelines.ports import LLM, Embedder, VectorIndex
from pipelines.records import InvalidInput, Level, MemoryType, check_id, check_text
from pipelines.retrieve import MemoryVersion, MemoryView, RecallHit, RecallPorts, RecallScope
from pipelines.rewrite import extract_keywords
from pipelines.sparse import BM25Index
from pipelines.tokens import TokenCounter
from workers.working_memory import WorkingMemoryPool

log = logging.getLogger(__name__)

# What the caller may hand over besides the query. Items are also capped in bytes by
# content_max_bytes; the partitions' budgets then decide what fits.
MAX_SOURCE_ITEMS = 500

# PostgreSQL's text search configuration: English stemming, like the pipeline's analyzer.
TS_CONFIG = "english"

SCOPE_SQL = "m.tenant_id = %(tenant)s AND (%(task)s::text IS NULL OR m.task_id = %(task)s)"

# Each row's tsvector is computed once (a LATERAL that OFFSET 0 keeps from being inlined)
# for both the match and the rank. Without
# an expression index (it would need a migration) the scan covers the task's stored rows,
# which the (tenant_id, task_id, ts) index narrows to.
SPARSE_SQL = f"""
    SELECT m.id, m.content, ts_rank(v.doc, q.query) AS s
    FROM to_tsquery('{TS_CONFIG}', %(q)s) AS q(query),
         memories m,
         LATERAL (SELECT to_tsvector('{TS_CONFIG}', m.content) AS doc OFFSET 0) AS v
    WHERE {SCOPE_SQL} AND m.status = 'stored' AND v.doc @@ q.query
    ORDER BY s DESC, m.id
    LIMIT %(limit)s
"""

TEMPORAL_RANKED_SQL = f"""
    SELECT m.id, ts_rank(to_tsvector('{TS_CONFIG}', m.content), q.query) AS s
    FROM to_tsquery('{TS_CONFIG}', %(q)s) AS q(query), memories m
    WHERE {SCOPE_SQL} AND m.status = 'stored' AND m.ts >= %(since)s
    ORDER BY s DESC, m.ts DESC, m.id
    LIMIT %(limit)s
"""

TEMPORAL_NEWEST_SQL = f"""
    SELECT m.id, 0.0::real AS s
    FROM memories m
    WHERE {SCOPE_SQL} AND m.status = 'stored' AND m.ts >= %(since)s
    ORDER BY m.ts DESC, m.id
    LIMIT %(limit)s
"""

FETCH_SQL = f"""
    SELECT m.id, m.content, m.ts, m.type, m.importance, m.decay_factor, m.level, m.task_id,
           m.session_id, m.summary
    FROM memories m
    WHERE m.id = ANY(%(ids)s::uuid[]) AND {SCOPE_SQL} AND m.status = 'stored'
"""

# Summary rows (migration 0003) point at what they cover with parent_ids; an L2 summary
# covers L1 summaries, so the chain is followed upwards from each memory.
VERSIONS_SQL = """
    WITH RECURSIVE chain AS (
        SELECT s.id, s.level, s.content, origin
        FROM unnest(%(ids)s::uuid[]) AS origin
        JOIN memories s ON s.parent_ids @> ARRAY[origin]
        WHERE s.tenant_id = %(tenant)s AND s.level >= 1 AND s.status = 'stored'
        UNION
        SELECT s.id, s.level, s.content, c.origin
        FROM chain c
        JOIN memories s ON s.parent_ids @> ARRAY[c.id]
        WHERE s.tenant_id = %(tenant)s AND s.level > c.level AND s.status = 'stored'
    )
    SELECT origin, level, content FROM chain ORDER BY origin, level
"""

HAS_PARENT_IDS_SQL = """
    SELECT 1 FROM information_schema.columns
    WHERE table_schema = current_schema() AND table_name = 'memories'
      AND column_name = 'parent_ids'
"""


def tsquery_of(text: str) -> str:
    """An OR of the query's keywords for ``to_tsquery``, each quoted ('' when none).

    ``plainto_tsquery`` would AND them, and a question rarely shares every word with its
    answer; PostgreSQL stems each quoted keyword itself.
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


class PostgresRecall:
    """Sparse and temporal recall and the memory store, over one request's scope.

    One instance serves one request: it keeps the rows it has read (the dense recaller's
    ``similarity`` embeds them instead of asking the index for vectors).
    """

    def __init__(self, pool: ConnectionPool, *, versions_from_rows: bool) -> None:
        self._pool = pool
        self._versions_from_rows = versions_from_rows
        self._sparse_cache: dict[tuple[str, int], list[tuple[str, str, float]]] = {}
        self._lock = threading.Lock()
        self.views: dict[str, MemoryView] = {}

    def _sparse_rows(
        self, text: str, scope: RecallScope, limit: int
    ) -> list[tuple[str, str, float]]:
        query = tsquery_of(text)
        if not query:
            return []
        with self._lock:
            cached = self._sparse_cache.get((query, limit))
        if cached is not None:
            return cached
        with self._pool.connection() as conn:
            rows = conn.execute(
                SPARSE_SQL, {**_scope_params(scope), "q": query, "limit": limit}
            ).fetchall()
        result = [(str(row[0]), str(row[1]), float(row[2])) for row in rows]
        with self._lock:
            self._sparse_cache[(query, limit)] = result
        return result

    def search_sparse(self, text: str, scope: RecallScope, limit: int) -> list[RecallHit]:
        return [
            RecallHit(id=key, score=score)
            for key, _, score in self._sparse_rows(text, scope, limit)
        ]

    def related_terms(self, text: str, scope: RecallScope, limit: int) -> list[str]:
        """RM3 feedback over the top keyword hits, with the pipeline's BM25 (analyzer and all)."""
        rows = self._sparse_rows(text, scope, 50)
        if len(rows) < 2:
            return []
        index = BM25Index()
        index.add_many((key, content) for key, content, _ in rows)
        return [term for term, _ in index.expansion_terms(text, max_terms=limit)]

    def search_recent(
        self, text: str, scope: RecallScope, since: datetime, limit: int
    ) -> list[RecallHit]:
        query = tsquery_of(text)
        params = {**_scope_params(scope), "q": query, "since": since, "limit": limit}
        with self._pool.connection() as conn:
            rows = conn.execute(
                TEMPORAL_RANKED_SQL if query else TEMPORAL_NEWEST_SQL, params
            ).fetchall()
        return [RecallHit(id=str(row[0]), score=float(row[1])) for row in rows]

    def fetch(self, ids: Sequence[str], scope: RecallScope) -> list[MemoryView]:
        if not ids:
            return []
        params = {**_scope_params(scope), "ids": list(ids)}
        versions: dict[str, list[MemoryVersion]] = {}
        with self._pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            cur.execute(FETCH_SQL, params)
            rows = cur.fetchall()
            if self._versions_from_rows and rows:
                cur.execute(VERSIONS_SQL, {"tenant": scope.tenant_id, "ids": list(ids)})
                for row in cur.fetchall():
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
        with self._lock:
            self.views.update((view.id, view) for view in views)
        return views


class VectorRecall:
    """Dense recall through the vector port; the query's vectors are embedded once each."""

    def __init__(
        self,
        vectors: VectorIndex,
        embedder: Embedder,
        collection: str,
        store: PostgresRecall,
        vector_lock: threading.Lock,
    ) -> None:
        self._vectors = vectors
        self._embedder = embedder
        self._collection = collection
        self._store = store
        self._vector_lock = vector_lock
        self._cache: dict[str, list[float]] = {}
        self._cache_lock = threading.Lock()

    def _embed(self, text: str) -> list[float]:
        with self._cache_lock:
            cached = self._cache.get(text)
        if cached is None:
            cached = self._embedder.embed([text])[0]
            with self._cache_lock:
                self._cache[text] = cached
        return cached

    def search_dense(self, text: str, scope: RecallScope, limit: int) -> list[RecallHit]:
        vector = self._embed(text)
        # The embedded engine is one shard per collection: searches take turns on it while
        # the PostgreSQL recallers run in parallel.
        with self._vector_lock:
            hits = self._vectors.search(
                self._collection,
                vector,
                tenant_id=scope.tenant_id,
                task_id=scope.task_id,
                limit=limit,
            )
        return [RecallHit(id=str(hit.id), score=float(hit.score)) for hit in hits]

    def similarity(self, text: str, ids: Sequence[str], scope: RecallScope) -> dict[str, float]:
        views = [self._store.views[key] for key in ids if key in self._store.views]
        if not views:
            return {}
        query = np.asarray(self._embed(text), dtype=np.float64)
        vectors = np.asarray(self._embedder.embed([v.content for v in views]), dtype=np.float64)
        norms = np.linalg.norm(vectors, axis=1) * (np.linalg.norm(query) or 1.0)
        cosines = vectors @ query / np.where(norms == 0, 1.0, norms)
        return {
            view.id: float(value)
            for view, value in zip(views, cosines, strict=True)
            if math.isfinite(float(value))
        }


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
    executor: Executor | None = None
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
    window = stores.working_memory.advance(
        call.tenant_id, request.task_id, call.session_id, stores.llm, stores.counter
    )
    sources = ContextSources(
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
    ports = RecallPorts(
        dense=VectorRecall(
            stores.vectors, stores.embedder, stores.collection, store, stores.vector_lock
        ),
        sparse=store,
        temporal=store,
        store=store,
    )
    # Offline, the pipeline's rules see more than the port's would (local scores, feedback).
    remote = stores.llm if stores.settings.llm_is_remote else None
    return build_context(
        request,
        sources,
        scope=scope,
        ports=ports,
        counter=stores.counter,
        focus_llm=remote,
        rewrite_llm=remote,
        rerank_llm=remote,
        layout=stores.layout,
        executor=stores.executor,
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
