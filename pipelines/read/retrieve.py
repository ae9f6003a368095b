"""The retrieval pipeline: rewrite → recall in parallel → fuse → rerank cascade → priority.

1. Three query variants (``pipelines.rewrite``).
2. Recall: dense top-50 and keyword top-50 for each variant, temporal recall of the last
   7 days top-20, and for a question in code's terms the code vectors' top-50 first; every
   recaller is scoped by tenant and task (``RecallScope``).
3. Weighted reciprocal-rank fusion (weights from the focus and the variant), dedupe by id and
   by normalised content.
4. Rerank cascade: a cheap local reranker over the top 50 (dense similarity and keyword
   score combined convexly, fused rank, idf-weighted keyword coverage, entity match, a date
   the question names; then the support of each candidate's session), then the task-aware
   LLM reranker (phase and
   focus in its prompt; offline: rules) over an adaptive depth: 10 when the local scores are
   concentrated at the head, 30 when they are dispersed, 20 otherwise.
5. Priority = α·relevance + β·recency + γ·importance + δ·retention, α from the focus, β from
   the task phase, γ from the memory type, δ from the decay model.
6. The tenant's semantic knowledge matching the literal query (one more search, sent after
   the others) is weighed on the same priority (``rank_knowledge``): relevance is the share
   of the query it says, importance its confidence; it does not decay.

Recallers, the store and the reranker are ports; a worker binds them to Qdrant, PostgreSQL
and the LLM, the benchmark to in-process indexes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from concurrent.futures import Executor
from datetime import datetime
from time import perf_counter

from pydantic import BaseModel, ConfigDict, Field

from pipelines.read.budget import age_hours
from pipelines.read.config import DEFAULT_CONFIG, RetrievalConfig
from pipelines.read.focus import FocusDirective
from pipelines.read.recall import (
    KNOWLEDGE_RECALL_LIMIT,
    Candidate,
    KnowledgeView,
    Recallers,
    RecallScope,
    best_sparse_scores,
    fetch_candidates,
    fuse,
    knowledge_terms,
    recall_all,
)
from pipelines.read.rerank import (
    PHASE_RECENCY_WEIGHT,
    TYPE_IMPORTANCE_WEIGHT,
    RerankLLM,
    adaptive_depth,
    llm_rerank,
    local_rerank,
    prioritize,
    query_dates,
    term_set,
)
from pipelines.read.rewrite import VARIANT_WEIGHTS, QueryVariants, rewrite_query
from pipelines.records import TaskPhase

# The knowledge one context holds at most: the rerank's concentrated depth. Knowledge is
# dense (one line stands for the episodes it came from), and a few lines of it are what an
# agent needs of it for one step; the partition's budget may keep fewer.
KNOWLEDGE_RESULT_LIMIT = 10


class KnowledgeCandidate(BaseModel):
    """A semantic memory recalled for the query, weighed like an episode: ``relevance`` is
    the share of the query it says, ``priority`` the episodes' formula on it."""

    model_config = ConfigDict(frozen=True)

    knowledge: KnowledgeView
    relevance: float = Field(ge=0.0, le=1.0)
    priority: float


def knowledge_coverage(
    query: str, knowledge: Sequence[KnowledgeView], others: Sequence[str] = ()
) -> list[float]:
    """How much of the query each knowledge row says, in [0, 1]: the idf-weighted share of
    the query's terms it holds (the local reranker's keyword coverage), idf over the rows
    and ``others`` (the episodes recalled with them).

    Only terms some text of that pool holds count in the share: a term nothing holds tells
    no text apart, and a Han bigram across a word boundary (``报应`` of ``周报应该``) is
    such a term; left in, such bigrams would sink every row of a Chinese query.
    """
    docs = [term_set(view.match_text()) for view in knowledge]
    pool = docs + [term_set(text) for text in others]
    n = len(pool)
    idf: dict[str, float] = {}
    for term in knowledge_terms(query):
        df = sum(1 for doc in pool if term in doc)
        if df:
            idf[term] = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
    total = sum(idf.values())
    if not total:
        return [0.0 for _ in docs]
    return [sum(weight for term, weight in idf.items() if term in doc) / total for doc in docs]


def rank_knowledge(
    knowledge: Sequence[KnowledgeView],
    query: str,
    episodes: Sequence[Candidate],
    focus: FocusDirective,
    phase: TaskPhase | None,
    now: datetime,
    config: RetrievalConfig = DEFAULT_CONFIG,
    limit: int = KNOWLEDGE_RESULT_LIMIT,
) -> list[KnowledgeCandidate]:
    """The knowledge that says some of the query, best first, on the episodes' priority:
    α·relevance + β·recency + γ·confidence + δ, with the episodes' α (focus), β (phase) and
    γ (the type the kind counts as); recency is that of its last confirmation, and its
    retention is whole (knowledge does not decay; a retired row is not recalled at all).

    Relevance is absolute (the share of the query said) where an episode's is scaled to
    its pool (the best one gets 1): a row saying all that was asked stands with the best
    episode, one saying a little of it well below."""
    coverage = knowledge_coverage(query, knowledge, [c.memory.content for c in episodes])
    alpha = focus.alpha()
    beta = PHASE_RECENCY_WEIGHT[phase]
    delta = config.retention_weight
    ranked = []
    for view, relevance in zip(knowledge, coverage, strict=True):
        if relevance <= 0.0:
            continue  # the store's loose match only: no whole term of the query
        recency = math.exp(-age_hours(view.updated_at, now) / config.recency_scale_hours)
        gamma = TYPE_IMPORTANCE_WEIGHT[view.type]
        priority = alpha * relevance + beta * recency + gamma * view.confidence + delta
        ranked.append(
            KnowledgeCandidate(knowledge=view, relevance=min(1.0, relevance), priority=priority)
        )
    ranked.sort(key=lambda c: (-c.priority, c.knowledge.id))
    return ranked[:limit]


class RetrievalResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    candidates: tuple[Candidate, ...]
    variants: QueryVariants
    focus: FocusDirective
    depth: int
    reranker: str
    recalled: dict[str, int]
    knowledge: tuple[KnowledgeCandidate, ...] = ()


def retrieve(
    query: str,
    scope: RecallScope,
    recallers: Recallers,
    focus: FocusDirective,
    *,
    phase: TaskPhase | None = None,
    variants: QueryVariants | None = None,
    reranker: RerankLLM | None = None,
    config: RetrievalConfig = DEFAULT_CONFIG,
    executor: Executor | None = None,
    timings: dict[str, float] | None = None,
) -> RetrievalResult:
    """The whole read-side ranking for one (already validated) query. ``timings``, when
    given, gets the seconds of the recall and rerank stages (for the metrics)."""
    if variants is None:
        variants = rewrite_query(
            query,
            phase=phase.value if phase else None,
            focus=[item.kind.value for item in focus.kinds],
            related=lambda text: recallers.sparse.related_terms(text, scope, 8),
        )
    # The candidates' rows are read once the lists are fused, not as the lists come in:
    # reading the first-ranked ids early (in the pool, while the vector search ran) read
    # twice the rows the candidates need, and measured call by call against reading after
    # the fusion it cost ~2 ms at 10k memories and ~4 ms at 100k (docs/decisions.md).
    started = perf_counter()
    lists = recall_all(variants, scope, recallers, config, executor)
    weights = focus.fusion_weights()
    fused = fuse(
        lists,
        {
            "dense": weights.dense,
            "sparse": weights.sparse,
            "temporal": weights.temporal,
            "code": weights.dense * config.code_weight,
        },
        VARIANT_WEIGHTS,
        config.rrf_k,
    )
    candidates = fetch_candidates(fused, scope, recallers.store, config.local_rerank_limit)
    missing = [c.memory.id for c in candidates if c.dense is None]
    if missing:
        similarity = recallers.dense.similarity(variants.literal, missing, scope)
        candidates = [
            c
            if c.dense is not None
            else c.model_copy(update={"dense": similarity.get(c.memory.id)})
            for c in candidates
        ]
    reranked = perf_counter()
    local = local_rerank(
        candidates, variants, query_dates(query, scope.now), config, best_sparse_scores(lists)
    )
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
    if timings is not None:
        timings["recall"] = reranked - started
        timings["rerank"] = perf_counter() - reranked
    recalled: dict[str, int] = {}
    for recall in lists:
        recalled[recall.source] = recalled.get(recall.source, 0) + len(recall.hits)
    results = tuple(ranked[: config.result_limit])
    knowledge: list[KnowledgeCandidate] = []
    if recallers.knowledge is not None:
        # For the question as asked (recall_all sent it with the variants' searches).
        literal = variants.literal
        views = recallers.knowledge.search_knowledge(literal, scope, KNOWLEDGE_RECALL_LIMIT)
        recalled["knowledge"] = len(views)
        knowledge = rank_knowledge(views, literal, results, focus, phase, scope.now, config)
    return RetrievalResult(
        candidates=results,
        variants=variants,
        focus=focus,
        depth=depth,
        reranker=source,
        recalled=recalled,
        knowledge=tuple(knowledge),
    )
