"""Budgeted assembly of the context an agent reads before each reasoning step.

``build_context`` is what ``MemoryClient.context`` runs once its ports are bound: decide the
focus, split the budget into partitions, retrieve, and fill each partition within its own
budget. A partition that overflows compresses its lowest-scored items first (a memory's
higher-level version replaces its original: L0 → L1 → L2 ...), then evicts the lowest-scored
ones (``pipelines.read.budget.eviction_score``). Nothing is ever cut across partitions. A
budget below the layout's total is laid out with the layout scaled to it
(``pipelines.read.budget.fit_layout``).

The retrieved-memory partition holds the episodes and the tenant's semantic knowledge in one
ranking (their priority): a knowledge line says so in its text (``[knowledge: preference,
confidence 0.86, when: ...]``) and in its item (``PlacedItem.knowledge``), so an agent and a
trace tell it from an episode.

Every count reported is the real tokenizer's count of the rendered text: BPE may merge
across the joins between lines and partitions, so the rendered text is counted again as a
whole, unless the counter is ``additive_after_newline`` (DeepSeek-V4's is) and every line
starts with a non-space character. Then the sum of the cached line counts is that count
exactly, and encoding every token a second and third time (about 1 µs a token, most of an
assembly's time) is skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from datetime import datetime
from functools import lru_cache
from time import perf_counter

from pydantic import BaseModel, ConfigDict, Field

from pipelines.errors import InvalidInput
from pipelines.read.budget import (
    DEFAULT_LAYOUT,
    Partition,
    PartitionLayout,
    age_hours,
    allocate_budgets,
    density_of,
    eviction_score,
    fit_layout,
)
from pipelines.read.config import DEFAULT_CONFIG, RetrievalConfig
from pipelines.read.focus import (
    FocusDirective,
    FocusLLM,
    decide_focus,
)
from pipelines.read.recall import (
    Candidate,
    Recallers,
    RecallScope,
    conflict_note,
    start_recall,
)
from pipelines.read.request import ContextRequest
from pipelines.read.rerank import RerankLLM, term_set
from pipelines.read.retrieve import KnowledgeCandidate, RetrievalResult, retrieve
from pipelines.read.rewrite import RewriteLLM, rewrite_query
from pipelines.read.tokens import (
    TokenCounter,
    count_many,
    is_additive_after_newline,
    starts_non_space,
    truncate_to_tokens,
)
from pipelines.read.window import Turn, TurnSummary
from pipelines.records import MemoryType
from pipelines.text.analyzer import analyze
from pipelines.text.identifiers import holds_identifiers
from pipelines.text.memo import memo_texts

# A summary holds what the window kept of decisions and state: denser than a raw turn.
SUMMARY_DENSITY_TYPE = MemoryType.STATUS_CHANGE

TITLES: dict[Partition, str] = {
    Partition.SYSTEM: "System",
    Partition.TASK_CONTEXT: "Task context",
    Partition.RETRIEVED_MEMORY: "Retrieved memory",
    Partition.RECENT_INTERACTIONS: "Recent interactions",
    Partition.WORKING_VARIABLES: "Working variables",
    Partition.SCRATCH: "Scratch",
}


class KnowledgeMark(BaseModel):
    """What makes an item semantic knowledge rather than an episode: its kind, how sure
    consolidation is of it, when it applies, and whether it awaits confirmation."""

    model_config = ConfigDict(frozen=True)

    kind: str | None = None
    confidence: float = Field(ge=0.0, le=1.0)
    conditions: str | None = None
    status: str = "active"


class ContextItem(BaseModel):
    """One entry of a partition. ``versions`` are compressed forms, least compressed first;
    ``knowledge`` marks a semantic memory."""

    model_config = ConfigDict(frozen=True)

    id: str
    text: str = Field(min_length=1)
    prefix: str = ""
    timestamp: datetime | None = None
    type: MemoryType | None = None
    relevance: float | None = Field(None, ge=0.0, le=1.0)
    versions: tuple[str, ...] = ()
    must_keep: bool = False
    knowledge: KnowledgeMark | None = None

    def line(self, version: int) -> str:
        text = self.text if version == 0 else self.versions[version - 1]
        return f"{self.prefix}{text}"


class PlacedItem(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    version: int  # 0 the original, n the n-th compressed version
    truncated: bool = False
    tokens: int
    knowledge: KnowledgeMark | None = None  # set on semantic knowledge, None on the rest


class PartitionContent(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: Partition
    budget_tokens: int
    used_tokens: int
    text: str
    items: tuple[PlacedItem, ...]
    compressed_ids: tuple[str, ...]
    evicted_ids: tuple[str, ...]


@lru_cache(maxsize=1_024)
def _focus_term_set(focus_terms: tuple[str, ...]) -> frozenset[str]:
    return frozenset(term for word in focus_terms for term in analyze(word))


def focus_relevance(text: str, focus_terms: Sequence[str]) -> float:
    """Share of the focus's terms the text holds (0.5 when the focus names none)."""
    wanted = _focus_term_set(tuple(focus_terms))
    if not wanted:
        return 0.5
    return len(wanted.intersection(term_set(text))) / len(wanted)


def _score(item: ContextItem, now: datetime, focus_terms: Sequence[str]) -> float:
    relevance = (
        item.relevance if item.relevance is not None else focus_relevance(item.text, focus_terms)
    )
    age = age_hours(item.timestamp, now) if item.timestamp is not None else 0.0
    density, has_identifiers = _text_features(item.text, item.type)
    return eviction_score(
        relevance=relevance,
        density=density,
        age_hours=age,
        has_identifiers=has_identifiers,
    )


@memo_texts(maxsize=16_384)
def _text_features(text: str, memory_type: MemoryType | None) -> tuple[float, bool]:
    """A text's density and whether it holds identifiers, memoised: every fit of a
    partition scores its items again, and the same memories come back step after step."""
    return density_of(text, memory_type), holds_identifiers(text)


def _eviction_order(
    items: Sequence[ContextItem], now: datetime, focus_terms: Sequence[str]
) -> list[int]:
    scores = [_score(item, now, focus_terms) for item in items]
    return sorted(range(len(items)), key=lambda i: (items[i].must_keep, scores[i], i))


def _render(name: Partition, lines: Sequence[str]) -> str:
    if not lines:
        return ""
    return "\n".join([f"## {TITLES[name]}", *lines]) + "\n"


def fit_partition(
    name: Partition,
    items: Sequence[ContextItem],
    budget_tokens: int,
    counter: TokenCounter,
    *,
    now: datetime,
    focus_terms: Sequence[str] = (),
) -> PartitionContent:
    """Fill one partition within ``budget_tokens``, keeping the items' order.

    Overflow first walks the items from the lowest eviction score up, replacing each by its
    next compressed version, sweep after sweep while any is left; then it evicts from the
    lowest score up (``must_keep`` items last, and those are truncated rather than dropped
    when they alone overflow). ``used_tokens`` is the real count of the rendered text: the
    header's and the lines' counts added up when the counter is additive after a newline and
    every line starts with a non-space character (the render ends each line with one), else
    the rendered text counted as a whole.
    """
    if budget_tokens < 0:
        raise ValueError(f"budget_tokens must be >= 0, got {budget_tokens}")
    version = [0] * len(items)
    texts = [item.line(0) for item in items]
    kept = [True] * len(items)
    truncated = [False] * len(items)
    header = counter.count(f"## {TITLES[name]}\n")

    def cost(i: int) -> int:
        return counter.count(texts[i] + "\n")

    costs = count_many(counter, [text + "\n" for text in texts])

    def total() -> int:
        live = [c for c, k in zip(costs, kept, strict=True) if k]
        return header + sum(live) if live else 0

    # Eviction order, scored only when something must give way: must_keep last, then the
    # lowest score first, then the earlier item first.
    order = _eviction_order(items, now, focus_terms) if total() > budget_tokens else []
    while total() > budget_tokens:  # 1: compress, lowest score first, one level a sweep
        progressed = False
        for i in order:
            if total() <= budget_tokens:
                break
            if kept[i] and version[i] < len(items[i].versions):
                version[i] += 1
                texts[i] = items[i].line(version[i])
                costs[i] = cost(i)
                progressed = True
        if not progressed:
            break
    for i in order:  # 2: evict, lowest score first (must_keep items sort last)
        if total() <= budget_tokens:
            break
        if not items[i].must_keep:
            kept[i] = False
    for i in order:  # 3: a must_keep item that alone overflows is cut, not dropped
        if total() <= budget_tokens:
            break
        if kept[i]:
            others = total() - costs[i]
            room = budget_tokens - (others if others > 0 else header) - 1
            cut = truncate_to_tokens(counter, texts[i], room) if room > 0 else ""
            if cut:
                texts[i], truncated[i] = cut, True
                costs[i] = cost(i)
            if not cut or total() > budget_tokens:
                kept[i] = False
    additive = is_additive_after_newline(counter)
    while True:  # 4: the real count of the rendered text decides
        lines = [texts[i] for i in range(len(items)) if kept[i]]
        text = _render(name, lines)
        if additive and all(starts_non_space(line) for line in lines):
            used = total()  # the header and each line with its newline: the exact count
        else:
            used = counter.count(text) if text else 0
        if used <= budget_tokens:
            break
        order = order or _eviction_order(items, now, focus_terms)
        kept[next(i for i in order if kept[i])] = False
    placed = tuple(
        PlacedItem(
            id=items[i].id,
            version=version[i],
            truncated=truncated[i],
            tokens=costs[i],
            knowledge=items[i].knowledge,
        )
        for i in range(len(items))
        if kept[i]
    )
    return PartitionContent(
        name=name,
        budget_tokens=budget_tokens,
        used_tokens=used,
        text=text,
        items=placed,
        compressed_ids=tuple(items[i].id for i in range(len(items)) if kept[i] and version[i]),
        evicted_ids=tuple(items[i].id for i in range(len(items)) if not kept[i]),
    )


class WorkingVariable(BaseModel):
    model_config = ConfigDict(frozen=True)

    key: str = Field(min_length=1)
    value: str
    updated_at: datetime | None = None


class ContextSources(BaseModel):
    """What the caller holds besides long-term memory: the system prompt, the task's own
    context, the window of the session, the working variables and the scratch pad."""

    model_config = ConfigDict(frozen=True)

    system: str = ""
    task_context: tuple[ContextItem, ...] = ()
    summaries: tuple[TurnSummary, ...] = ()
    turns: tuple[Turn, ...] = ()
    variables: tuple[WorkingVariable, ...] = ()
    scratch: tuple[ContextItem, ...] = ()


class AssembledContext(BaseModel):
    model_config = ConfigDict(frozen=True)

    task_id: str
    budget_tokens: int
    total_tokens: int
    text: str
    tokenizer: str
    partitions: tuple[PartitionContent, ...]
    focus: FocusDirective
    retrieval: RetrievalResult | None = None
    # The vector index was known to miss stored memories (being restored from PostgreSQL):
    # dense recall saw part of them, keyword and temporal recall all of them.
    degraded: bool = False

    def partition(self, name: Partition) -> PartitionContent:
        return next(p for p in self.partitions if p.name is name)


# Knowledge items' ids: apart from the memories' (an access bump counts memories only).
KNOWLEDGE_ID_PREFIX = "knowledge:"


def knowledge_prefix(mark: KnowledgeMark) -> str:
    """``[knowledge: preference, confidence 0.86, when: for reviews] ``: what the line is,
    how sure, and when it applies, before the statement."""
    parts = [mark.kind or "fact", f"confidence {mark.confidence:.2f}"]
    if mark.status != "active":
        parts.append("unconfirmed")  # it contradicts what was known: stored, not trusted yet
    if mark.conditions:
        parts.append(f"when: {' '.join(mark.conditions.split())}")
    return f"[knowledge: {', '.join(parts)}] "


def knowledge_item(candidate: KnowledgeCandidate) -> ContextItem:
    view = candidate.knowledge
    mark = KnowledgeMark(
        kind=view.kind,
        confidence=view.confidence,
        conditions=view.conditions,
        status=view.status,
    )
    return ContextItem(
        id=f"{KNOWLEDGE_ID_PREFIX}{view.id}",
        text=view.content,
        prefix=knowledge_prefix(mark),
        timestamp=view.updated_at,
        type=view.type,
        relevance=candidate.relevance,
        knowledge=mark,
    )


def memory_items(
    candidates: Sequence[Candidate], knowledge: Sequence[KnowledgeCandidate] = ()
) -> list[ContextItem]:
    """Retrieved memories as items, in priority order, with their compressed versions; the
    knowledge merged in by its priority (each list keeps its order; a tie: the episode)."""
    episodes = []
    for candidate in candidates:
        memory = candidate.memory
        note = conflict_note(memory.conflicts)
        versions = tuple(v.content + note for v in sorted(memory.versions, key=lambda v: v.level))
        episodes.append(
            ContextItem(
                id=memory.id,
                text=memory.content + note,
                prefix=f"[{memory.timestamp:%Y-%m-%d %H:%M}] ",
                timestamp=memory.timestamp,
                type=memory.type,
                relevance=min(1.0, max(0.0, candidate.relevance)),
                versions=versions,
            )
        )
    items: list[ContextItem] = []
    next_episode = 0
    for known in knowledge:
        while next_episode < len(episodes) and candidates[next_episode].priority >= known.priority:
            items.append(episodes[next_episode])
            next_episode += 1
        items.append(knowledge_item(known))
    return items + episodes[next_episode:]


def window_items(summaries: Sequence[TurnSummary], turns: Sequence[Turn]) -> list[ContextItem]:
    items = [
        ContextItem(
            id=s.id,
            text=s.content,
            prefix=f"(summary of {s.turn_count} turns) ",
            timestamp=s.timestamp,
            type=SUMMARY_DENSITY_TYPE,
        )
        for s in summaries
    ]
    for index, turn in enumerate(turns):
        items.append(
            ContextItem(
                id=turn.id,
                text=turn.line(),
                timestamp=turn.timestamp,
                type=turn.type,
                must_keep=index == len(turns) - 1,  # the turn being answered
            )
        )
    return items


def variable_items(variables: Sequence[WorkingVariable]) -> list[ContextItem]:
    return [
        ContextItem(id=f"var:{v.key}", text=f"{v.key} = {v.value}", timestamp=v.updated_at)
        for v in variables
    ]


def _count_whole(parts: Sequence[PartitionContent], text: str, counter: TokenCounter) -> int:
    """The real count of ``text``, the concatenation of ``parts``' texts.

    Each part's ``used_tokens`` is the real count of its text, and a rendered partition ends
    with a newline and starts with "## ", so with a counter additive after a newline the sum
    of the parts is the count of the whole; otherwise the whole is counted.
    """
    if is_additive_after_newline(counter) and all(
        part.text.endswith("\n") and starts_non_space(part.text) for part in parts if part.text
    ):
        return sum(part.used_tokens for part in parts)
    return counter.count(text) if text else 0


def assemble_context(
    request: ContextRequest,
    sources: ContextSources,
    *,
    counter: TokenCounter,
    focus: FocusDirective,
    now: datetime,
    retrieval: RetrievalResult | None = None,
    layout: PartitionLayout = DEFAULT_LAYOUT,
) -> AssembledContext:
    """Fill every partition within its budget; the whole never exceeds the request's.

    ``layout`` is the one the budget is laid out with, as it is: ``build_context`` passes
    ``fit_layout(layout, budget)``, the configured layout scaled to a budget below its total.
    """
    budgets = allocate_budgets(layout, request.budget_tokens, focus.partition_shifts())
    system_text = _render(Partition.SYSTEM, [sources.system]) if sources.system.strip() else ""
    system_tokens = counter.count(system_text) if system_text else 0
    if system_tokens > budgets[Partition.SYSTEM]:
        raise InvalidInput(
            "system",
            f"is {system_tokens} tokens with its header; the system partition holds "
            f"{budgets[Partition.SYSTEM]}",
            limit=f"{budgets[Partition.SYSTEM]} tokens",
        )
    terms = focus.terms
    candidates = retrieval.candidates if retrieval is not None else ()
    knowledge = retrieval.knowledge if retrieval is not None else ()
    plan_items: dict[Partition, list[ContextItem]] = {
        Partition.TASK_CONTEXT: list(sources.task_context),
        Partition.RETRIEVED_MEMORY: memory_items(candidates, knowledge),
        Partition.RECENT_INTERACTIONS: window_items(sources.summaries, sources.turns),
        Partition.WORKING_VARIABLES: variable_items(sources.variables),
        Partition.SCRATCH: list(sources.scratch),
    }
    contents: dict[Partition, PartitionContent] = {
        Partition.SYSTEM: PartitionContent(
            name=Partition.SYSTEM,
            budget_tokens=budgets[Partition.SYSTEM],
            used_tokens=system_tokens,
            text=system_text,
            items=(PlacedItem(id="system", version=0, tokens=system_tokens),)
            if system_text
            else (),
            compressed_ids=(),
            evicted_ids=(),
        )
    }
    for name, items in plan_items.items():
        contents[name] = fit_partition(
            name, items, budgets[name], counter, now=now, focus_terms=terms
        )
    ordered = [contents[spec.name] for spec in layout.specs]
    text = "".join(p.text for p in ordered)
    total = _count_whole(ordered, text, counter)
    while total > request.budget_tokens:
        # The joins merged into more tokens than the parts (never with an additive counter,
        # whose whole is the sum of parts that each fit): shrink the fullest partition that
        # has items to give (never the system prompt).
        name = max(
            (p for p in ordered if p.items and p.name is not Partition.SYSTEM),
            key=lambda p: p.used_tokens,
        ).name
        shrunk = max(0, contents[name].used_tokens - (total - request.budget_tokens) - 1)
        contents[name] = fit_partition(
            name, plan_items[name], shrunk, counter, now=now, focus_terms=terms
        ).model_copy(update={"budget_tokens": budgets[name]})
        ordered = [contents[spec.name] for spec in layout.specs]
        text = "".join(p.text for p in ordered)
        total = _count_whole(ordered, text, counter)
    return AssembledContext(
        task_id=request.task_id,
        budget_tokens=request.budget_tokens,
        total_tokens=total,
        text=text,
        tokenizer=counter.name,
        partitions=tuple(ordered),
        focus=focus,
        retrieval=retrieval,
    )


def build_context(
    request: ContextRequest,
    sources: ContextSources | Callable[[], ContextSources],
    *,
    scope: RecallScope,
    recallers: Recallers,
    counter: TokenCounter,
    focus_llm: FocusLLM | None = None,
    focus: FocusDirective | None = None,
    rewrite_llm: RewriteLLM | None = None,
    rerank_llm: RerankLLM | None = None,
    layout: PartitionLayout = DEFAULT_LAYOUT,
    config: RetrievalConfig = DEFAULT_CONFIG,
    executor: Executor | None = None,
    timings: dict[str, float] | None = None,
) -> AssembledContext:
    """Focus → retrieval → assembly for one validated request (what ``context`` runs).
    ``focus``, when given, is the request's directive already decided by the caller (with
    ``focus_llm``): it is not asked again. ``sources`` may be a call that gathers them: it
    is made once the literal query's recalls are on their way, so that the store searches
    while the caller reads its own stores (the working-memory window). ``layout`` is the
    configured one: a budget below its total gets it scaled (``fit_layout``). ``timings``,
    when given, gets each stage's seconds (rewrite, recall, rerank, assemble)."""
    layout = fit_layout(layout, request.budget_tokens)
    if focus is None:
        focus = decide_focus(request.query, phase=request.phase, focus=request.focus, llm=focus_llm)
    if rewrite_llm is None:
        # The rules' literal variant is the query with its spacing folded (a model's may not
        # be): its recalls can start before the rewrite is done.
        start_recall(" ".join(request.query.split()), scope, recallers, config, executor)
    if not isinstance(sources, ContextSources):
        sources = sources()
    started = perf_counter()
    variants = rewrite_query(
        request.query,
        llm=rewrite_llm,
        phase=request.phase.value if request.phase else None,
        focus=[item.kind.value for item in focus.kinds],
        related=lambda text: recallers.sparse.related_terms(text, scope, 8),
    )
    rewritten = perf_counter()
    retrieval = retrieve(
        request.query,
        scope,
        recallers,
        focus,
        phase=request.phase,
        variants=variants,
        reranker=rerank_llm,
        config=config,
        executor=executor,
        timings=timings,
    )
    assembling = perf_counter()
    context = assemble_context(
        request,
        sources,
        counter=counter,
        focus=focus,
        now=scope.now,
        retrieval=retrieval,
        layout=layout,
    )
    if timings is not None:
        timings["rewrite"] = rewritten - started
        timings["assemble"] = perf_counter() - assembling
    return context


def budgets_for(
    request: ContextRequest, focus: FocusDirective, layout: PartitionLayout = DEFAULT_LAYOUT
) -> Mapping[Partition, int]:
    """The partition budgets a request would get (for stats and the CLI)."""
    fitted = fit_layout(layout, request.budget_tokens)
    return allocate_budgets(fitted, request.budget_tokens, focus.partition_shifts())
