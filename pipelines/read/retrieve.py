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

from concurrent.futures import Executor

from pydantic import BaseModel, ConfigDict

from pipelines.read.config import DEFAULT_CONFIG, RetrievalConfig
from pipelines.read.focus import FocusDirective
from pipelines.read.recall import (
    Candidate,
    Recallers,
    RecallScope,
    fetch_candidates,
    fuse,
    recall_all,
)
from pipelines.read.rerank import RerankLLM, adaptive_depth, llm_rerank, local_rerank, prioritize
from pipelines.read.rewrite import VARIANT_WEIGHTS, QueryVariants, rewrite_query
from pipelines.records import TaskPhase


class RetrievalResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    candidates: tuple[Candidate, ...]
    variants: QueryVariants
    focus: FocusDirective
    depth: int
    reranker: str
    recalled: dict[str, int]


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
) -> RetrievalResult:
    """The whole read-side ranking for one (already validated) query."""
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
    lists = recall_all(variants, scope, recallers, config, executor)
    weights = focus.fusion_weights()
    fused = fuse(
        lists,
        {"dense": weights.dense, "sparse": weights.sparse, "temporal": weights.temporal},
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
