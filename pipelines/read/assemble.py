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
from time import perf_counter

from pydantic import BaseModel, ConfigDict, Field

from pipelines.errors import InvalidInput
from pipelines.read.budget import (
    DEFAULT_LAYOUT,
    Partition,
    PartitionLayout,
    allocate_budgets,
    fit_layout,
)
from pipelines.read.config import DEFAULT_CONFIG, RetrievalConfig
from pipelines.read.fill import (
    TITLES,
    ContextItem,
    KnowledgeMark,
    PartitionContent,
    PlacedItem,
    fit_partition,
    focus_relevance,
    render_partition,
)
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
from pipelines.read.rerank import RerankLLM
from pipelines.read.retrieve import KnowledgeCandidate, RetrievalResult, retrieve
from pipelines.read.rewrite import RewriteLLM, rewrite_query
from pipelines.read.tokens import (
    TokenCounter,
    is_additive_after_newline,
    starts_non_space,
)
from pipelines.read.window import Turn, TurnSummary
from pipelines.records import MemoryType

# A summary holds what the window kept of decisions and state: denser than a raw turn.
SUMMARY_DENSITY_TYPE = MemoryType.STATUS_CHANGE


__all__ = [
    "TITLES",
    "AssembledContext",
    "ContextItem",
    "ContextSources",
    "KnowledgeMark",
    "PartitionContent",
    "PlacedItem",
    "WorkingVariable",
    "assemble_context",
    "build_context",
    "fit_partition",
    "focus_relevance",
]


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
    system_text = (
        render_partition(Partition.SYSTEM, [sources.system]) if sources.system.strip() else ""
    )
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
