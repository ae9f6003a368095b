"""The retrieval pipeline: rewrite → recall in parallel → fuse → rerank cascade → priority.

1. Three query variants (``pipelines.rewrite``).
2. Recall: dense top-50 and keyword top-50 for each variant, temporal recall of the last
   7 days top-20; every recaller is scoped by tenant and task (``RecallScope``).
3. Weighted reciprocal-rank fusion (weights from the focus and the variant), dedupe by id and
   by normalised content.
4. Rerank cascade: a cheap local reranker over the top 50 (fused rank, dense similarity,
   idf-weighted keyword coverage, entity match), then the task-aware LLM reranker (phase and
   focus in its prompt; offline: rules) over an adaptive depth: 10 when the local scores are
   concentrated at the head, 30 when they are dispersed, 20 otherwise.
5. Priority = α·relevance + β·recency + γ·importance + δ·retention, α from the focus, β from
   the task phase, γ from the memory type, δ from the decay model.

Recallers, the store and the reranker are ports; a worker binds them to Qdrant, PostgreSQL
and the LLM, the benchmark to in-process indexes.
"""

from __future__ import annotations

import math
import re
import threading
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache, partial
from typing import NamedTuple, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from pipelines.budget import age_hours, holds_identifiers
from pipelines.focus import FocusDirective, InfoKind, TaskPhase
from pipelines.ports import MalformedLLMOutput
from pipelines.records import Level, MemoryType
from pipelines.rewrite import VARIANT_WEIGHTS, QueryVariants, rewrite_query
from pipelines.sparse import analyze
from pipelines.text import memo_texts
from pipelines.write_filter import guess_type

# Cormack, Clarke and Büttcher (2009): k = 60 makes RRF robust across very different lists.
RRF_K = 60


class RetrievalConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    dense_limit: int = Field(50, ge=1, le=1000)
    sparse_limit: int = Field(50, ge=1, le=1000)
    temporal_limit: int = Field(20, ge=0, le=1000)
    temporal_window_hours: float = Field(7 * 24, gt=0)
    rrf_k: int = Field(RRF_K, ge=1)
    local_rerank_limit: int = Field(50, ge=1, le=1000)
    depth_concentrated: int = Field(10, ge=1)
    depth_default: int = Field(20, ge=1)
    depth_dispersed: int = Field(30, ge=1)
    # Share of the top-50's score mass (above the 50th score) held by the top 10: above the
    # first bound the head is clear (10 suffice), below the second it is flat (look at 30).
    concentrated_share: float = Field(0.5, gt=0.0, lt=1.0)
    dispersed_share: float = Field(0.3, gt=0.0, lt=1.0)
    # Local scores live in [0, 1]; a top-50 spanning less than this is flat whatever its shape.
    flat_spread: float = Field(0.05, ge=0.0)
    recency_scale_hours: float = Field(48.0, gt=0)
    # The decay model's weight of retention in the priority.
    retention_weight: float = Field(0.05, ge=0.0, le=1.0)
    result_limit: int = Field(50, ge=1, le=1000)


DEFAULT_CONFIG = RetrievalConfig()

# β: how much a phase cares that a memory is fresh.
PHASE_RECENCY_WEIGHT: dict[TaskPhase | None, float] = {
    None: 0.05,
    TaskPhase.PLANNING: 0.03,
    TaskPhase.EXECUTION: 0.12,
    TaskPhase.DEBUGGING: 0.2,
    TaskPhase.REVIEW: 0.05,
    TaskPhase.REFLECTION: 0.02,
}

# γ: how much a memory's importance counts, by its type (decisions and preferences are the
# memories an agent is blamed for forgetting).
TYPE_IMPORTANCE_WEIGHT: dict[MemoryType | None, float] = {
    MemoryType.DECISION: 0.08,
    MemoryType.PREFERENCE: 0.08,
    MemoryType.STATUS_CHANGE: 0.06,
    MemoryType.FEEDBACK: 0.06,
    MemoryType.ACTION: 0.04,
    MemoryType.OBSERVATION: 0.04,
    None: 0.04,
}

# Local reranker weights: fusion carries most of the evidence; the similarity and the two
# lexical features break its rank ties with what RRF throws away (magnitudes, coverage).
LOCAL_WEIGHTS: dict[str, float] = {"fused": 0.35, "dense": 0.30, "coverage": 0.20, "entity": 0.15}
# The most the offline LLM rules may add to a local score (a real LLM's score is blended 50/50).
OFFLINE_RERANK_BOOST = 0.2


@memo_texts(maxsize=16_384)
def term_set(text: str) -> frozenset[str]:
    """The analyzer's terms of ``text`` as a set, memoised: the local and the offline
    rerankers look at the same candidates, and the same memories come back step after step."""
    return frozenset(analyze(text))


@lru_cache(maxsize=1_024)
def _query_terms(keywords: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(term for word in keywords for term in analyze(word))


# -- records ------------------------------------------------------------------------------


class MemoryVersion(BaseModel):
    """A compressed form of a memory: its L1 summary, its L2 phase summary, ..."""

    model_config = ConfigDict(frozen=True)

    level: Level
    content: str = Field(min_length=1)


class MemoryView(BaseModel):
    """What the read path needs of a stored memory."""

    model_config = ConfigDict(frozen=True)

    id: str
    content: str
    timestamp: datetime
    type: MemoryType | None = None
    importance: float = Field(0.5, ge=0.0, le=1.0)
    retention: float = Field(1.0, ge=0.0, le=1.0)
    level: Level = Level.L0
    versions: tuple[MemoryVersion, ...] = ()
    task_id: str | None = None
    session_id: str | None = None


class RecallScope(BaseModel):
    model_config = ConfigDict(frozen=True)

    tenant_id: str
    task_id: str | None = None
    now: datetime


# Recall hits and lists are the pipeline's own records, made by the hundred per call from
# values the recallers already typed: plain named tuples (a third of a pydantic model's
# cost to build; ~0.16 ms a context() call).
class RecallHit(NamedTuple):
    id: str
    score: float


class RecallList(NamedTuple):
    source: str  # dense, sparse, temporal
    variant: str  # literal, intent, associative
    hits: tuple[RecallHit, ...]


class Candidate(BaseModel):
    model_config = ConfigDict(frozen=True)

    memory: MemoryView
    fused: float = 0.0
    dense: float | None = None
    sources: tuple[str, ...] = ()
    local: float = 0.0
    rerank: float = 0.0
    relevance: float = 0.0
    priority: float = 0.0


class RetrievalResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    candidates: tuple[Candidate, ...]
    variants: QueryVariants
    focus: FocusDirective
    depth: int
    reranker: str
    recalled: dict[str, int]


# -- ports --------------------------------------------------------------------------------


@runtime_checkable
class DenseRecaller(Protocol):
    def search_dense(self, text: str, scope: RecallScope, limit: int) -> list[RecallHit]: ...

    def similarity(self, text: str, ids: Sequence[str], scope: RecallScope) -> dict[str, float]:
        """Cosine of ``text`` with stored memories (those recalled by other means)."""
        ...


@runtime_checkable
class SparseRecaller(Protocol):
    def search_sparse(self, text: str, scope: RecallScope, limit: int) -> list[RecallHit]: ...

    def related_terms(self, text: str, scope: RecallScope, limit: int) -> list[str]:
        """Terms co-occurring with ``text`` in the scope (pseudo-relevance feedback)."""
        ...


@runtime_checkable
class TemporalRecaller(Protocol):
    def search_recent(
        self, text: str, scope: RecallScope, since: datetime, limit: int
    ) -> list[RecallHit]:
        """Memories since ``since``, the most relevant to ``text`` first."""
        ...


@runtime_checkable
class MemoryStore(Protocol):
    def fetch(self, ids: Sequence[str], scope: RecallScope) -> list[MemoryView]: ...


class RerankItem(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    content: str
    timestamp: datetime
    type: MemoryType | None


@runtime_checkable
class RerankLLM(Protocol):
    """The LLM port's task-aware reranker (to be added to ``pipelines.ports.LLM``).

    Returns one relevance in [0, 1] per item, in the items' order.
    """

    @property
    def name(self) -> str: ...

    def rerank(
        self,
        query: str,
        items: Sequence[RerankItem],
        *,
        phase: TaskPhase | None,
        focus: FocusDirective,
    ) -> list[float]: ...


@dataclass(frozen=True)
class RecallPorts:
    dense: DenseRecaller
    sparse: SparseRecaller
    temporal: TemporalRecaller | None
    store: MemoryStore


# -- recall and fusion --------------------------------------------------------------------


# How long a caller waits for each job it hands the recall pool to begin (see
# ``submit_started``); past it the caller goes on anyway.
START_WAIT_S = 0.005


def submit_started(
    executor: Executor, jobs: Sequence[Callable[[], list[RecallHit]]]
) -> list[Future[list[RecallHit]]]:
    """Submit ``jobs`` and wait (at most ``START_WAIT_S`` each) until every one has begun.

    The calling thread's next step is often a vector search in an engine that holds the
    GIL for its whole duration: a job that has not begun by then cannot even send its
    query before the search ends, and the pool would overlap nothing. A job that has
    begun runs until it blocks on its store's answer (which releases the GIL), so once
    each has begun their queries are on their way.
    """
    futures = []
    events = []
    for job in jobs:
        began = threading.Event()

        def run(
            job: Callable[[], list[RecallHit]] = job, began: threading.Event = began
        ) -> list[RecallHit]:
            began.set()
            return job()

        futures.append(executor.submit(run))
        events.append(began)
    for began in events:
        began.wait(START_WAIT_S)
    return futures


def start_recall(
    literal: str,
    scope: RecallScope,
    ports: RecallPorts,
    config: RetrievalConfig = DEFAULT_CONFIG,
    executor: Executor | None = None,
) -> None:
    """Start the recall the rewrite waits for: the literal query's keyword search (its
    keyword feedback reads the hits), so that the store answers it while this thread
    decides what else it needs. A recaller that can queue a search (``queue_sparse``)
    sends it now; otherwise it goes to ``executor``. The answer is taken later by the same
    call (recallers answer a repeated search once); a search neither queued nor handed to
    an executor simply runs later.

    The temporal recall waits for ``recall_all``: a reader of one queued answer waits for
    those queued before it, and sent here it made the rewrite wait for it too (100k
    memories: p50 14.6 -> 13.7 ms once it went with the variants' searches)."""
    jobs = _store_jobs([("literal", literal)], scope, ports, config, temporal=False)
    _start(jobs, executor)


class _Job(NamedTuple):
    source: str
    variant: str
    run: Callable[[], list[RecallHit]]
    # Sends the search ahead on the recaller's own connection (None: it cannot).
    queue: Callable[[], None] | None


def _start(jobs: Sequence[_Job], executor: Executor | None) -> list[Future[list[RecallHit]] | None]:
    """Queue the jobs that can be queued, hand the others to ``executor``: each job's
    future, or None where the job's own call reads its answer (queued, or no executor)."""
    for job in jobs:
        if job.queue is not None:
            job.queue()
    if executor is None:
        return [None] * len(jobs)
    pooled = iter(submit_started(executor, [job.run for job in jobs if job.queue is None]))
    return [next(pooled) if job.queue is None else None for job in jobs]


def _store_jobs(
    named: Sequence[tuple[str, str]],
    scope: RecallScope,
    ports: RecallPorts,
    config: RetrievalConfig,
    *,
    temporal: bool = True,
) -> list[_Job]:
    """The store's recalls: each named text's keyword search, then (with ``temporal``) the
    temporal one of the literal text. One builder for ``start_recall`` and ``recall_all``:
    a search started early is answered once only if both ask it the same way."""
    queue_sparse = getattr(ports.sparse, "queue_sparse", None)
    jobs = [
        _Job(
            "sparse",
            name,
            partial(ports.sparse.search_sparse, text, scope, config.sparse_limit),
            partial(queue_sparse, text, scope, config.sparse_limit) if queue_sparse else None,
        )
        for name, text in named
    ]
    literal = dict(named).get("literal")
    if temporal and ports.temporal is not None and config.temporal_limit and literal is not None:
        since = scope.now - timedelta(hours=config.temporal_window_hours)
        args = (literal, scope, since, config.temporal_limit)
        queue_recent = getattr(ports.temporal, "queue_recent", None)
        jobs.append(
            _Job(
                "temporal",
                "literal",
                partial(ports.temporal.search_recent, *args),
                partial(queue_recent, *args) if queue_recent else None,
            )
        )
    return jobs


def recall_all(
    variants: QueryVariants,
    scope: RecallScope,
    ports: RecallPorts,
    config: RetrievalConfig = DEFAULT_CONFIG,
    executor: Executor | None = None,
) -> list[RecallList]:
    """Every recaller on every variant. The store's searches are queued on its connection
    when it can (PostgreSQL runs them while this thread searches the vectors), else run in
    parallel on ``executor`` when one is given. A dense recaller with
    ``search_dense_many`` gets all the variants in one call, made on this thread while the
    others run."""
    named = list(variants.items())
    jobs = _store_jobs(named, scope, ports, config)
    futures = _start(jobs, executor)
    dense_many: Callable[[Sequence[str], RecallScope, int], list[list[RecallHit]]] | None
    dense_many = getattr(ports.dense, "search_dense_many", None)
    if dense_many is not None:
        dense_hits = dense_many([text for _, text in named], scope, config.dense_limit)
    else:
        dense_hits = [
            ports.dense.search_dense(text, scope, config.dense_limit) for _, text in named
        ]
    results = [
        future.result() if future is not None else job.run()
        for job, future in zip(jobs, futures, strict=True)
    ]
    # Each variant's dense list, then its sparse one, then the temporal list.
    lists = []
    for index, (name, _) in enumerate(named):
        lists.append(RecallList(source="dense", variant=name, hits=tuple(dense_hits[index])))
        lists.append(RecallList(source="sparse", variant=name, hits=tuple(results[index])))
    lists += [
        RecallList(source=source, variant=variant, hits=tuple(hits))
        for (source, variant, *_), hits in zip(
            jobs[len(named) :], results[len(named) :], strict=True
        )
    ]
    return lists


def fuse(
    lists: Sequence[RecallList],
    source_weights: Mapping[str, float],
    variant_weights: Mapping[str, float] = VARIANT_WEIGHTS,
    k: int = RRF_K,
) -> list[tuple[str, float, float | None, tuple[str, ...]]]:
    """Weighted RRF: Σ w_source·w_variant / (k + rank). Returns (id, score, best dense
    score, sources), best first; ties by id so the order is deterministic."""
    scores: dict[str, float] = {}
    dense: dict[str, float] = {}
    sources: dict[str, list[str]] = {}
    for recall in lists:
        weight = source_weights.get(recall.source, 0.0) * variant_weights.get(recall.variant, 0.0)
        seen: set[str] = set()
        rank = 0
        for hit in recall.hits:
            if hit.id in seen:
                continue
            seen.add(hit.id)
            rank += 1
            scores[hit.id] = scores.get(hit.id, 0.0) + weight / (k + rank)
            sources.setdefault(hit.id, []).append(f"{recall.source}:{recall.variant}")
            if recall.source == "dense":
                dense[hit.id] = max(dense.get(hit.id, -math.inf), hit.score)
    ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    return [(key, score, dense.get(key), tuple(sources[key])) for key, score in ranked]


@memo_texts(maxsize=16_384)
def content_key(text: str) -> str:
    """Case, width, punctuation and spacing folded: two copies of a turn share a key.
    Memoised: dedupe folds every candidate's text, and memories come back step after step."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(re.sub(r"[^\w\s]", " ", folded).split())


def dedupe(
    fused: Sequence[tuple[str, float, float | None, tuple[str, ...]]],
    views: Mapping[str, MemoryView],
    limit: int | None = None,
) -> list[Candidate]:
    """Candidates in fused order; ids the store no longer has and repeated contents go.
    With ``limit``, the first ``limit`` of them (the walk stops there)."""
    seen: set[str] = set()
    out: list[Candidate] = []
    for key, score, dense, sources in fused:
        if limit is not None and len(out) >= limit:
            break
        view = views.get(key)
        if view is None:
            continue
        folded = content_key(view.content)
        if folded in seen:
            continue
        seen.add(folded)
        out.append(Candidate(memory=view, fused=score, dense=dense, sources=sources))
    return out


def fetch_chunk(limit: int) -> int:
    """How many fused ids one store read takes for ``limit`` candidates: a few more than
    the limit, for ids the store no longer has and repeated contents."""
    return limit + max(8, limit // 5)


def fetch_candidates(
    fused: Sequence[tuple[str, float, float | None, tuple[str, ...]]],
    scope: RecallScope,
    store: MemoryStore,
    limit: int,
) -> list[Candidate]:
    """The first ``limit`` deduplicated candidates, reading the store in fused order a chunk
    at a time (``limit`` ids and a fifth more, then more only while ids were missing or
    repeated): the same candidates as reading every fused id, for a fraction of the rows."""
    ids = [key for key, *_ in fused]
    views: dict[str, MemoryView] = {}
    candidates: list[Candidate] = []
    read = 0
    while read < len(ids):
        chunk = ids[read : read + fetch_chunk(limit)]
        views.update((view.id, view) for view in store.fetch(chunk, scope))
        read += len(chunk)
        candidates = dedupe(fused[:read], views, limit)
        if len(candidates) >= limit:
            break
    return candidates


# -- the cascade --------------------------------------------------------------------------


def _minmax(values: Sequence[float]) -> list[float]:
    if not values:
        return []
    low, high = min(values), max(values)
    if high - low <= 1e-12:
        return [0.5 for _ in values]
    return [(value - low) / (high - low) for value in values]


def _mentions(entity: str, text: str) -> bool:
    pattern = r"(?<!\w)" + re.escape(entity.casefold()) + r"(?!\w)"
    return re.search(pattern, text.casefold()) is not None


def keyword_coverage(query_terms: Sequence[str], docs: Sequence[AbstractSet[str]]) -> list[float]:
    """Idf-weighted share of the query's terms each document holds, idf over ``docs`` only:
    a term every candidate has tells them apart no better than a stopword."""
    terms = list(dict.fromkeys(query_terms))
    if not terms or not docs:
        return [0.0 for _ in docs]
    n = len(docs)
    idf = {}
    for term in terms:
        df = sum(1 for doc in docs if term in doc)
        idf[term] = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
    total = sum(idf.values()) or 1.0
    return [sum(idf[t] for t in terms if t in doc) / total for doc in docs]


def local_rerank(candidates: Sequence[Candidate], variants: QueryVariants) -> list[Candidate]:
    """The cheap reranker: no model, a weighted sum of four features in [0, 1]."""
    if not candidates:
        return []
    fused_max = max(c.fused for c in candidates) or 1.0
    dense_values = [c.dense for c in candidates if c.dense is not None]
    floor = min(dense_values) if dense_values else 0.0
    dense = _minmax([c.dense if c.dense is not None else floor for c in candidates])
    query_terms = _query_terms(tuple(variants.keywords))
    doc_terms = [term_set(c.memory.content) for c in candidates]
    coverage = keyword_coverage(query_terms, doc_terms)
    entities = variants.entities
    scored = []
    for index, candidate in enumerate(candidates):
        entity = (
            sum(_mentions(e, candidate.memory.content) for e in entities) / len(entities)
            if entities
            else 0.0
        )
        score = (
            LOCAL_WEIGHTS["fused"] * candidate.fused / fused_max
            + LOCAL_WEIGHTS["dense"] * dense[index]
            + LOCAL_WEIGHTS["coverage"] * coverage[index]
            + LOCAL_WEIGHTS["entity"] * entity
        )
        scored.append(candidate.model_copy(update={"local": score, "rerank": score}))
    scored.sort(key=lambda c: (-c.local, c.memory.id))
    return scored


def adaptive_depth(scores: Sequence[float], config: RetrievalConfig = DEFAULT_CONFIG) -> int:
    """How many candidates the LLM reranker sees: few when the head stands out, many when
    the scores are flat. Measured by the top 10's share of the mass above the lowest score,
    once the scores span at least ``flat_spread``."""
    if not scores:
        return 0
    ordered = sorted(scores, reverse=True)[: config.local_rerank_limit]
    low = ordered[-1]
    mass = sum(score - low for score in ordered)
    if ordered[0] - low < config.flat_spread:
        depth = config.depth_dispersed  # no head stands out: the share would measure noise
    else:
        share = sum(score - low for score in ordered[:10]) / mass
        if share >= config.concentrated_share:
            depth = config.depth_concentrated
        elif share <= config.dispersed_share:
            depth = config.depth_dispersed
        else:
            depth = config.depth_default
    return min(depth, len(ordered))


_TEMPORAL_EXPRESSION_RE = re.compile(
    r"\b(yesterday|today|tonight|tomorrow|last (?:night|week|weekend|month|year|summer|winter|"
    r"spring|fall|friday|monday|tuesday|wednesday|thursday|saturday|sunday)|next (?:week|"
    r"month|year)|this (?:week|weekend|month|year|morning)|ago|since|recently|"
    r"(?:mon|tues|wednes|thurs|fri|satur|sun)day|"
    r"jan(?:uary)?|feb(?:ruary)?|march|april|may|june|july|aug(?:ust)?|sept?(?:ember)?|"
    r"oct(?:ober)?|nov(?:ember)?|dec(?:ember)?|(?:19|20)\d\d|\d{1,2}[:/]\d{2})\b",
    re.I,
)
_ERROR_RE = re.compile(
    r"\b(error|exception|fail\w*|traceback|crash\w*|bug|broken|timeout|refused|denied)\b", re.I
)
_PROCEDURE_RE = re.compile(
    r"\b(first|then|next|finally|step|run|install|configure|set up|use)\b|^\s*[-*\d]+[.)]?\s",
    re.I | re.M,
)


def kind_match(
    kind: InfoKind,
    memory: MemoryView,
    *,
    coverage: float,
    query_identifiers: Sequence[str],
    now: datetime,
    recency_scale_hours: float,
) -> float:
    """How well one memory serves one kind of information, in [0, 1]."""
    text = memory.content
    memory_type = memory.type or guess_type(text)[0]
    if kind is InfoKind.DECISIONS:
        return 1.0 if memory_type is MemoryType.DECISION else 0.0
    if kind is InfoKind.PREFERENCES:
        return 1.0 if memory_type is MemoryType.PREFERENCE else 0.0
    if kind is InfoKind.STATE:
        return 1.0 if memory_type is MemoryType.STATUS_CHANGE else 0.0
    if kind is InfoKind.IDENTIFIERS:
        if query_identifiers:
            return sum(_mentions(i, text) for i in query_identifiers) / len(query_identifiers)
        return 0.5 if holds_identifiers(text) else 0.0
    if kind is InfoKind.TEMPORAL:
        return 1.0 if _TEMPORAL_EXPRESSION_RE.search(text) else 0.0
    if kind is InfoKind.RECENT_ACTIVITY:
        return math.exp(-age_hours(memory.timestamp, now) / recency_scale_hours)
    if kind is InfoKind.ERRORS:
        return 1.0 if _ERROR_RE.search(text) else 0.0
    if kind is InfoKind.PROCEDURES:
        return 1.0 if _PROCEDURE_RE.search(text) else 0.0
    return coverage  # FACTS: the memory that says most of what was asked about


def offline_rerank(
    candidates: Sequence[Candidate],
    variants: QueryVariants,
    focus: FocusDirective,
    *,
    now: datetime,
    config: RetrievalConfig = DEFAULT_CONFIG,
) -> list[float]:
    """The rules standing in for the task-aware LLM: the local score plus up to
    OFFLINE_RERANK_BOOST for serving the kinds the focus ranks highest."""
    query_terms = _query_terms(tuple(variants.keywords))
    coverage = keyword_coverage(query_terms, [term_set(c.memory.content) for c in candidates])
    identifiers = [e for e in variants.entities if holds_identifiers(e) and not e.istitle()]
    scores = []
    for index, candidate in enumerate(candidates):
        match = sum(
            item.weight
            * kind_match(
                item.kind,
                candidate.memory,
                coverage=coverage[index],
                query_identifiers=identifiers,
                now=now,
                recency_scale_hours=config.recency_scale_hours,
            )
            for item in focus.kinds
        )
        scores.append(candidate.local + OFFLINE_RERANK_BOOST * match)
    return scores


def llm_rerank(
    head: Sequence[Candidate],
    query: str,
    variants: QueryVariants,
    focus: FocusDirective,
    *,
    phase: TaskPhase | None,
    reranker: RerankLLM | None,
    now: datetime,
    config: RetrievalConfig = DEFAULT_CONFIG,
) -> tuple[list[Candidate], str]:
    """The second stage over the head; returns it reordered and who ranked it.

    A real LLM's scores are blended half and half with the local ones (the local score keeps
    a confident LLM from discarding an exact keyword match). A malformed answer gets one
    retry, then the offline rules rank. Transient errors propagate.
    """
    if not head:
        return [], "none"
    scores: list[float] | None = None
    source = "offline"
    if reranker is not None:
        items = [
            RerankItem(
                id=c.memory.id,
                content=c.memory.content,
                timestamp=c.memory.timestamp,
                type=c.memory.type,
            )
            for c in head
        ]
        for _ in range(2):
            try:
                answer = reranker.rerank(query, items, phase=phase, focus=focus)
            except MalformedLLMOutput:
                continue
            if len(answer) != len(head) or not all(
                isinstance(s, int | float) and math.isfinite(s) for s in answer
            ):
                continue
            local = _minmax([c.local for c in head])
            scores = [
                0.5 * lo + 0.5 * min(1.0, max(0.0, float(s)))
                for lo, s in zip(local, answer, strict=True)
            ]
            source = reranker.name
            break
        else:
            source = "offline-fallback"
    if scores is None:
        scores = offline_rerank(head, variants, focus, now=now, config=config)
    ranked = [c.model_copy(update={"rerank": s}) for c, s in zip(head, scores, strict=True)]
    ranked.sort(key=lambda c: (-c.rerank, c.memory.id))
    return ranked, source


def prioritize(
    ranked: Sequence[Candidate],
    depth: int,
    focus: FocusDirective,
    phase: TaskPhase | None,
    now: datetime,
    config: RetrievalConfig = DEFAULT_CONFIG,
) -> list[Candidate]:
    """priority = α·relevance + β·recency + γ·importance + δ·retention, best first.

    Relevance is the cascade's score scaled to [0, 1]; the tail below the reranked head is
    capped at the head's lowest relevance so that skipping the second stage never promotes
    a memory past one that went through it.
    """
    if not ranked:
        return []
    relevance = _minmax([c.rerank for c in ranked])
    if 0 < depth < len(ranked):
        cap = min(relevance[:depth])
        relevance = relevance[:depth] + [min(cap, r) for r in relevance[depth:]]
    alpha = focus.alpha()
    beta = PHASE_RECENCY_WEIGHT[phase]
    delta = config.retention_weight
    out = []
    for candidate, rel in zip(ranked, relevance, strict=True):
        memory = candidate.memory
        recency = math.exp(-age_hours(memory.timestamp, now) / config.recency_scale_hours)
        gamma = TYPE_IMPORTANCE_WEIGHT[memory.type]
        priority = (
            alpha * rel + beta * recency + gamma * memory.importance + delta * (memory.retention)
        )
        out.append(candidate.model_copy(update={"relevance": rel, "priority": priority}))
    out.sort(key=lambda c: (-c.priority, c.memory.id))
    return out


def retrieve(
    query: str,
    scope: RecallScope,
    ports: RecallPorts,
    focus: FocusDirective,
    *,
    phase: TaskPhase | None = None,
    variants: QueryVariants | None = None,
    reranker: RerankLLM | None = None,
    config: RetrievalConfig = DEFAULT_CONFIG,
    executor: Executor | None = None,
) -> RetrievalResult:
    """The whole read-side ranking for one (already validated) query."""
    if variants is None:
        variants = rewrite_query(
            query,
            phase=phase.value if phase else None,
            focus=[item.kind.value for item in focus.kinds],
            related=lambda text: ports.sparse.related_terms(text, scope, 8),
        )
    # The candidates' rows are read once the lists are fused, not as the lists come in:
    # reading the first-ranked ids early (in the pool, while the vector search ran) read
    # twice the rows the candidates need, and measured call by call against reading after
    # the fusion it cost ~2 ms at 10k memories and ~4 ms at 100k (docs/decisions.md).
    lists = recall_all(variants, scope, ports, config, executor)
    weights = focus.fusion_weights()
    fused = fuse(
        lists,
        {"dense": weights.dense, "sparse": weights.sparse, "temporal": weights.temporal},
        VARIANT_WEIGHTS,
        config.rrf_k,
    )
    candidates = fetch_candidates(fused, scope, ports.store, config.local_rerank_limit)
    missing = [c.memory.id for c in candidates if c.dense is None]
    if missing:
        similarity = ports.dense.similarity(variants.literal, missing, scope)
        candidates = [
            c
            if c.dense is not None
            else c.model_copy(update={"dense": similarity.get(c.memory.id)})
            for c in candidates
        ]
    local = local_rerank(candidates, variants)
    depth = adaptive_depth([c.local for c in local], config)
    head, source = llm_rerank(
        local[:depth],
        query,
        variants,
        focus,
        phase=phase,
        reranker=reranker,
        now=scope.now,
        config=config,
    )
    ranked = prioritize(head + local[depth:], depth, focus, phase, scope.now, config)
    recalled: dict[str, int] = {}
    for recall in lists:
        recalled[recall.source] = recalled.get(recall.source, 0) + len(recall.hits)
    return RetrievalResult(
        candidates=tuple(ranked[: config.result_limit]),
        variants=variants,
        focus=focus,
        depth=depth,
        reranker=source,
        recalled=recalled,
    )
