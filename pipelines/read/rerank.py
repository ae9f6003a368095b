"""The rerank cascade and the priority of each candidate.

A cheap local reranker over the top 50 (fused rank, dense similarity, keyword score,
idf-weighted keyword coverage, entity match, a date the question names; then support from
the candidate's session), then the task-aware LLM reranker (phase and focus in its prompt;
offline: rules) over an adaptive depth: 10 when the local scores are concentrated at the
head, 30 when they are dispersed, 20 otherwise. Priority = α·relevance + β·recency +
γ·importance + δ·retention, α from the focus, β from the task phase, γ from the memory type,
δ from the decay model.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from datetime import date, datetime, timedelta
from functools import lru_cache
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from pipelines.errors import MalformedLLMOutput
from pipelines.read.budget import age_hours
from pipelines.read.config import DEFAULT_CONFIG, RetrievalConfig
from pipelines.read.focus import FocusDirective, InfoKind
from pipelines.read.recall import Candidate, MemoryView
from pipelines.read.rewrite import QueryVariants
from pipelines.records import MemoryType, TaskPhase
from pipelines.text.analyzer import analyze
from pipelines.text.cues import guess_type
from pipelines.text.dates import DateSpan, find_dates
from pipelines.text.identifiers import holds_identifiers
from pipelines.text.memo import memo_texts
from pipelines.text.words import HAN

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

# Local reranker weights: a convex combination of the dense and keyword scores, each scaled
# to [0, 1] over the candidates, carries most of the evidence (it beats reciprocal-rank
# fusion, which throws the magnitudes away: Bruch, Gai and Ingber, "An Analysis of Fusion
# Functions for Hybrid Retrieval", 2023); the fused rank, coverage and entities break ties.
# Chosen on half of the LoCoMo dev conversations (conv-26, -30, -41) among a few rounded
# settings and checked on the other half (docs/decisions.md, "Rerank, second round"): the
# convex pair alone, against the fused rank alone, was +0.07 recall@10 on either half.
LOCAL_WEIGHTS: dict[str, float] = {
    "fused": 0.10,
    "dense": 0.40,
    "sparse": 0.30,
    "coverage": 0.10,
    "entity": 0.10,
}
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


class RerankItem(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    content: str
    timestamp: datetime
    type: MemoryType | None


@runtime_checkable
class RerankLLM(Protocol):
    """What the task-aware rerank asks of the LLM port.

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


def _minmax(values: Sequence[float]) -> list[float]:
    if not values:
        return []
    low, high = min(values), max(values)
    if high - low <= 1e-12:
        return [0.5 for _ in values]
    return [(value - low) / (high - low) for value in values]


# A word character other than a Han one: Chinese has no spaces, so a Han neighbour is a
# boundary (张工 in 由张工负责, JWT in JWT迁移) while a Latin one is not (art in party).
_NOT_HAN_WORD = f"[^\\W{HAN}]"


def _mentions(entity: str, text: str) -> bool:
    pattern = f"(?<!{_NOT_HAN_WORD})" + re.escape(entity.casefold()) + f"(?!{_NOT_HAN_WORD})"
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


@lru_cache(maxsize=1_024)
def _query_dates(query: str, today: date) -> DateSpan | None:
    spans = [span for _, _, span in find_dates(query, today)]
    if not spans:
        return None
    return DateSpan(min(s.start for s in spans), max(s.end for s in spans))


def query_dates(query: str, now: datetime) -> DateSpan | None:
    """The days a question names, from the first to the last ("between August 11 and
    August 15 2023", "3月5日", "last week" relative to ``now``), or None."""
    return _query_dates(query, now.date())


def date_match(memory: MemoryView, span: DateSpan, slack_days: int) -> bool:
    """Was ``memory`` stored in ``span``: from the day before it (time zones) to
    ``slack_days`` after it (what happened on a day is told afterwards)."""
    day = memory.timestamp.date()
    return span.start - timedelta(days=1) <= day <= span.end + timedelta(days=slack_days)


def session_support(
    scores: Sequence[float], sessions: Sequence[str | None], share: float, top: int
) -> list[float]:
    """Each candidate's local score mixed with its session's: ``(1 - share)·own + share·
    mean of the best ``top`` local scores of its session among the candidates`` (itself
    included). A memory the others of its session back up rises above an isolated one
    with the same score; candidates without a session count as one session each."""
    if not share:
        return list(scores)
    by_session: dict[str, list[float]] = {}
    for score, key in zip(scores, sessions, strict=True):
        if key is not None:
            by_session.setdefault(key, []).append(score)
    support = {
        key: sum(sorted(values, reverse=True)[:top]) / top for key, values in by_session.items()
    }
    return [
        (1.0 - share) * score + share * (support[key] if key is not None else score / top)
        for score, key in zip(scores, sessions, strict=True)
    ]


def local_rerank(
    candidates: Sequence[Candidate],
    variants: QueryVariants,
    dates: DateSpan | None = None,
    config: RetrievalConfig = DEFAULT_CONFIG,
    sparse_scores: Mapping[str, float] | None = None,
) -> list[Candidate]:
    """The cheap reranker: no model, a weighted sum of five features in [0, 1], the date
    match when the question names ``dates``, then the support of each one's session.
    ``sparse_scores`` are the keyword scores by id (``best_sparse_scores``); without them,
    the candidates' own ``sparse``."""
    if not candidates:
        return []
    fused_max = max(c.fused for c in candidates) or 1.0
    dense_values = [c.dense for c in candidates if c.dense is not None]
    floor = min(dense_values) if dense_values else 0.0
    dense = _minmax([c.dense if c.dense is not None else floor for c in candidates])
    keyword = [
        sparse_scores.get(c.memory.id) if sparse_scores is not None else c.sparse
        for c in candidates
    ]
    # A candidate no keyword list holds has no keyword score: the lowest there is.
    sparse = _minmax([score if score is not None else 0.0 for score in keyword])
    query_terms = _query_terms(tuple(variants.keywords))
    doc_terms = [term_set(c.memory.content) for c in candidates]
    coverage = keyword_coverage(query_terms, doc_terms)
    entities = variants.entities
    scores = []
    for index, candidate in enumerate(candidates):
        entity = (
            sum(_mentions(e, candidate.memory.content) for e in entities) / len(entities)
            if entities
            else 0.0
        )
        score = (
            LOCAL_WEIGHTS["fused"] * candidate.fused / fused_max
            + LOCAL_WEIGHTS["dense"] * dense[index]
            + LOCAL_WEIGHTS["sparse"] * sparse[index]
            + LOCAL_WEIGHTS["coverage"] * coverage[index]
            + LOCAL_WEIGHTS["entity"] * entity
        )
        if dates is not None and date_match(candidate.memory, dates, config.date_slack_days):
            score += config.date_match_weight
        scores.append(score)
    sessions = [c.memory.session_id for c in candidates]
    scores = session_support(scores, sessions, config.session_support, config.session_support_top)
    # One copy per candidate (a pydantic copy is ~10 µs; the read path makes 50 a call).
    scored = [
        c.model_copy(update={"local": score, "rerank": score, "sparse": kw})
        for c, score, kw in zip(candidates, scores, keyword, strict=True)
    ]
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
