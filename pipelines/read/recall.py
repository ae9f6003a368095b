"""Recall, the first stage of the read path: candidates for a query.

Dense, keyword and temporal recallers each return ranked ids for each query variant, inside
the request's scope (tenant and task, never filtered afterwards); weighted reciprocal-rank
fusion merges the lists, and the candidates' rows are read once, deduplicated by id and by
normalised content. The recallers and the store are ports (:class:`Recallers`): a worker binds
them to the vector index and PostgreSQL, the benchmark to in-process indexes.

Beside the episodes, the tenant's semantic knowledge (what consolidation made of them) is
recalled by a text match of the query's terms (:class:`KnowledgeRecaller`,
``knowledge_needles``): its rows are few, so they are matched loosely in the store and
weighed with the episodes afterwards (``pipelines.read.retrieve.rank_knowledge``).
"""

from __future__ import annotations

import math
import re
import threading
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import NamedTuple, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from pipelines.read.config import DEFAULT_CONFIG, RRF_K, RetrievalConfig
from pipelines.read.rewrite import VARIANT_WEIGHTS, QueryVariants
from pipelines.records import Level, MemoryType
from pipelines.text.analyzer import analyze
from pipelines.text.code import looks_like_code
from pipelines.text.memo import memo_texts
from pipelines.text.words import content_tokens, has_han


class MemoryVersion(BaseModel):
    """A compressed form of a memory: its L1 summary, its L2 phase summary, ..."""

    model_config = ConfigDict(frozen=True)

    level: Level
    content: str = Field(min_length=1)


class ConflictingStatement(BaseModel):
    """A live memory that may disagree with the one it is attached to (both were kept:
    ``pipelines.own.contradict``); the context shows the two side by side with their dates."""

    model_config = ConfigDict(frozen=True)

    id: str
    content: str
    timestamp: datetime


# How many conflicting statements one item shows: the newest; a memory in many conflicts is
# rare (each needs the rule's signs), and each shown costs its own tokens.
CONFLICTS_SHOWN = 2


def conflict_note(conflicts: Sequence[ConflictingStatement]) -> str:
    """The statements that may disagree with an item, with their dates, to follow its text:
    both were kept, and the agent sees which was said when."""
    if not conflicts:
        return ""
    newest = sorted(conflicts, key=lambda c: (c.timestamp, c.id), reverse=True)[:CONFLICTS_SHOWN]
    shown = "; ".join(f"[{c.timestamp:%Y-%m-%d}] {c.content}" for c in newest)
    return f" (conflicts with, both kept: {shown})"


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
    conflicts: tuple[ConflictingStatement, ...] = ()


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
    sparse: float | None = None
    sources: tuple[str, ...] = ()
    local: float = 0.0
    rerank: float = 0.0
    relevance: float = 0.0
    priority: float = 0.0


@runtime_checkable
class DenseRecaller(Protocol):
    def search_dense(self, text: str, scope: RecallScope, limit: int) -> list[RecallHit]: ...

    def similarity(self, text: str, ids: Sequence[str], scope: RecallScope) -> dict[str, float]:
        """Cosine of ``text`` with stored memories (those recalled by other means)."""
        ...


@runtime_checkable
class CodeRecaller(Protocol):
    """The code side of the dual encoder: code memories by their code vector."""

    def search_code(self, text: str, scope: RecallScope, limit: int) -> list[RecallHit]:
        """Code memories nearest ``text`` read as code (``pipelines.text.code``)."""
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


# -- semantic knowledge ----------------------------------------------------------------------

# How a kind of knowledge counts where the read path weighs a memory by its type (density in
# a partition, the importance weight of the priority): a preference is one; a convention, an
# owner and a stack are standing decisions; a mistake is a lesson learned from an outcome; a
# pattern says what to do.
KNOWLEDGE_TYPES: dict[str, MemoryType] = {
    "preference": MemoryType.PREFERENCE,
    "convention": MemoryType.DECISION,
    "owner": MemoryType.DECISION,
    "stack": MemoryType.DECISION,
    "mistake": MemoryType.FEEDBACK,
    "pattern": MemoryType.ACTION,
}


class KnowledgeView(BaseModel):
    """A live semantic memory: knowledge consolidated from episodes, with how sure the
    consolidation is of it (``confidence``), when it applies (``conditions``), the episodes
    it came from and its status (``active``, or ``needs_confirmation`` when it contradicts
    what was known)."""

    model_config = ConfigDict(frozen=True)

    id: str
    kind: str | None = None
    content: str = Field(min_length=1)
    confidence: float = Field(ge=0.0, le=1.0)
    conditions: str | None = None
    scope: str = "tenant"
    status: str = "active"
    sources: tuple[str, ...] = ()  # the ids of the episodes it was consolidated from
    updated_at: datetime

    @property
    def type(self) -> MemoryType | None:
        return KNOWLEDGE_TYPES.get(self.kind or "")

    def match_text(self) -> str:
        """What a query is matched against: the statement and when it applies."""
        return f"{self.content}\n{self.conditions}" if self.conditions else self.content


@runtime_checkable
class KnowledgeRecaller(Protocol):
    def search_knowledge(self, text: str, scope: RecallScope, limit: int) -> list[KnowledgeView]:
        """The tenant's live semantic memories whose content or conditions hold one of
        ``knowledge_needles(text)`` (case-insensitively), at most ``limit``, the most
        confident first. The task is not a scope of knowledge: it was consolidated across
        the tenant's tasks."""
        ...


@memo_texts(maxsize=4_096)
def knowledge_terms(text: str) -> tuple[str, ...]:
    """The query's side of the knowledge match: the analyzer's terms of ``text``, each once,
    in order (the terms the keyword recall and the local reranker use), without the Han
    bigrams that straddle a function word or are one (``报应`` and ``什么`` of
    ``周报应该用什么格式``): ``pipelines.text.words`` cuts its bigrams there."""
    terms = tuple(dict.fromkeys(analyze(text)))
    if not has_han(text):
        return terms
    kept = set(content_tokens(text))
    terms = tuple(term for term in terms if not has_han(term) or term in kept)
    # A lone Han character (用 between 应该 and 什么) is in half the knowledge: a term only
    # when the text has nothing longer.
    longer = tuple(term for term in terms if not (len(term) == 1 and has_han(term)))
    return longer or terms


# A Latin term this long or longer is looked for in the store without its last letter, so
# that its other forms match too: the analyzer's term is not always a prefix of them
# ("summary", the term of "summaries", is not a prefix of it). The match is a prefilter,
# weighed with whole terms afterwards (``pipelines.read.retrieve.knowledge_coverage``).
PREFIX_FROM_CHARS = 5


def knowledge_needles(text: str) -> list[str]:
    """What the store looks for, case-insensitively, in the knowledge's content and
    conditions: ``knowledge_terms(text)``, long Latin ones without their last letter.
    Loose on purpose: a tenant's knowledge is a few hundred rows, weighed afterwards. A
    lone Han character is looked for only when the text has nothing else (alone it is in
    half the knowledge)."""
    terms = knowledge_terms(text)
    longer = [term for term in terms if len(term) > 1]
    needles = [
        term[:-1] if len(term) >= PREFIX_FROM_CHARS and term.isascii() else term
        for term in longer or terms
    ]
    return list(dict.fromkeys(needles))


@dataclass(frozen=True)
class Recallers:
    """What one request recalls from: the recallers of its scope, the store that reads the
    candidates' rows (a worker binds them per request, the benchmark to in-process indexes),
    and the tenant's semantic knowledge when there is a store of it."""

    dense: DenseRecaller
    sparse: SparseRecaller
    temporal: TemporalRecaller | None
    store: MemoryStore
    knowledge: KnowledgeRecaller | None = None


# The semantic rows one query reads: a tenant's knowledge matching a query is a handful of
# rows (a preference is promoted only once it recurs), and the store's loose match adds a
# few more (a stem or a bigram inside another word); 32 short rows stay one small answer.
# When more match, the most confident are weighed: ranking every match by the terms it
# holds cost PostgreSQL ~2 ms for 200 Chinese rows, the rows themselves ~0.5 ms.
KNOWLEDGE_RECALL_LIMIT = 32


def queue_knowledge(text: str, scope: RecallScope, recallers: Recallers) -> None:
    """Send the knowledge search ahead when its recaller can queue it (``queue_knowledge``,
    on the request's pipelined connection); ``search_knowledge`` reads the answer later."""
    queue = getattr(recallers.knowledge, "queue_knowledge", None)
    if queue is not None:
        queue(text, scope, KNOWLEDGE_RECALL_LIMIT)


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
    recallers: Recallers,
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
    jobs = _store_jobs([("literal", literal)], scope, recallers, config, temporal=False)
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
    recallers: Recallers,
    config: RetrievalConfig,
    *,
    temporal: bool = True,
) -> list[_Job]:
    """The store's recalls: each named text's keyword search, then (with ``temporal``) the
    temporal one of the literal text. One builder for ``start_recall`` and ``recall_all``:
    a search started early is answered once only if both ask it the same way."""
    queue_sparse = getattr(recallers.sparse, "queue_sparse", None)
    jobs = [
        _Job(
            "sparse",
            name,
            partial(recallers.sparse.search_sparse, text, scope, config.sparse_limit),
            partial(queue_sparse, text, scope, config.sparse_limit) if queue_sparse else None,
        )
        for name, text in named
    ]
    literal = dict(named).get("literal")
    if (
        temporal
        and recallers.temporal is not None
        and config.temporal_limit
        and literal is not None
    ):
        since = scope.now - timedelta(hours=config.temporal_window_hours)
        args = (literal, scope, since, config.temporal_limit)
        queue_recent = getattr(recallers.temporal, "queue_recent", None)
        jobs.append(
            _Job(
                "temporal",
                "literal",
                partial(recallers.temporal.search_recent, *args),
                partial(queue_recent, *args) if queue_recent else None,
            )
        )
    return jobs


def recall_all(
    variants: QueryVariants,
    scope: RecallScope,
    recallers: Recallers,
    config: RetrievalConfig = DEFAULT_CONFIG,
    executor: Executor | None = None,
) -> list[RecallList]:
    """Every recaller on every variant. The store's searches are queued on its connection
    when it can (PostgreSQL runs them while this thread searches the vectors), else run in
    parallel on ``executor`` when one is given; the knowledge search of the literal
    variant is queued after them (its answer is read by ``retrieve``). A dense recaller with
    ``search_dense_many`` gets all the variants in one call, made on this thread while the
    others run."""
    named = list(variants.items())
    jobs = _store_jobs(named, scope, recallers, config)
    futures = _start(jobs, executor)
    # The literal variant's knowledge search goes last on the store's connection: read only
    # after the fusion, it runs while this thread searches the vectors and fuses, and
    # delays none of the searches the fusion waits for (one statement, no round trip).
    queue_knowledge(variants.literal, scope, recallers)
    # A question in code's terms searches the code vectors first (the dual encoder by
    # modality), then the content vectors as every question does; the lists are fused.
    code_hits: list[RecallHit] | None = None
    search_code = getattr(recallers.dense, "search_code", None)
    if search_code is not None and looks_like_code(variants.literal):
        code_hits = search_code(variants.literal, scope, config.dense_limit)
    dense_many: Callable[[Sequence[str], RecallScope, int], list[list[RecallHit]]] | None
    dense_many = getattr(recallers.dense, "search_dense_many", None)
    if dense_many is not None:
        dense_hits = dense_many([text for _, text in named], scope, config.dense_limit)
    else:
        dense_hits = [
            recallers.dense.search_dense(text, scope, config.dense_limit) for _, text in named
        ]
    results = [
        future.result() if future is not None else job.run()
        for job, future in zip(jobs, futures, strict=True)
    ]
    # The code list (a question in code's terms), each variant's dense list, then its
    # sparse one, then the temporal list.
    lists = []
    if code_hits is not None:
        lists.append(RecallList(source="code", variant="literal", hits=tuple(code_hits)))
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


# The lists whose scores are embedding cosines: a candidate's ``dense`` score is its best
# cosine through either encoder (a code memory found by its code vector is judged by it).
DENSE_SOURCES = frozenset({"dense", "code"})


def fuse(
    lists: Sequence[RecallList],
    source_weights: Mapping[str, float],
    variant_weights: Mapping[str, float] = VARIANT_WEIGHTS,
    k: int = RRF_K,
) -> list[tuple[str, float, float | None, tuple[str, ...]]]:
    """Weighted RRF: Σ w_source·w_variant / (k + rank). Returns (id, score, best dense
    score (``DENSE_SOURCES``), sources), best first; ties by id so the order is
    deterministic."""
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
            if recall.source in DENSE_SOURCES:
                dense[hit.id] = max(dense.get(hit.id, -math.inf), hit.score)
    ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    return [(key, score, dense.get(key), tuple(sources[key])) for key, score in ranked]


# The keyword lists whose scores the local reranker compares: the associative variant's
# query is longer (feedback terms added), so its scores run higher and are not comparable.
SPARSE_SCORE_VARIANTS = frozenset({"literal", "intent"})


def best_sparse_scores(lists: Sequence[RecallList]) -> dict[str, float]:
    """Each id's best keyword score (BM25, ts_rank) over the literal and intent lists: the
    magnitude that reciprocal-rank fusion throws away."""
    best: dict[str, float] = {}
    for recall in lists:
        if recall.source != "sparse" or recall.variant not in SPARSE_SCORE_VARIANTS:
            continue
        for hit in recall.hits:
            if hit.score > best.get(hit.id, -math.inf):
                best[hit.id] = hit.score
    return best


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
