"""Filling one partition of the context within its budget, and the items it is filled with.

A partition that overflows compresses its lowest-scored items first (a memory's
higher-level version replaces its original: L0 -> L1 -> L2 ...), then evicts the
lowest-scored ones (``pipelines.read.budget.eviction_score``). Split from
:mod:`pipelines.read.assemble`, which lays out the partitions and gathers their items.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field

from pipelines.read.budget import Partition, age_hours, density_of, eviction_score
from pipelines.read.rerank import term_set
from pipelines.read.tokens import (
    TokenCounter,
    count_many,
    is_additive_after_newline,
    starts_non_space,
    truncate_to_tokens,
)
from pipelines.records import MemoryType
from pipelines.text.analyzer import analyze
from pipelines.text.identifiers import holds_identifiers
from pipelines.text.memo import memo_texts

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


def render_partition(name: Partition, lines: Sequence[str]) -> str:
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
    next compressed version, sweep after sweep while any is left; a version is taken only
    when it is cheaper than what the item shows and no other item shows it already (a
    session summary stands in for a long turn, never for a short one, and once). Then it
    evicts from the lowest score up, first the items whose compressed version another item
    shows, then the rest (``must_keep`` items last, and those are truncated rather than
    dropped when they alone overflow). ``used_tokens`` is the real count of the rendered text: the
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
    # What each kept item shows, counted only when something must give way (most fits
    # never overflow); a version line's count is taken once, not again every sweep.
    shown = Counter(item.text for item in items) if order else Counter()
    version_costs: dict[tuple[int, int], int] = {}

    def shown_text(i: int) -> str:
        return items[i].text if version[i] == 0 else items[i].versions[version[i] - 1]

    def next_version(i: int) -> tuple[int, int] | None:
        """The next compressed version worth taking, with its line's count: one that costs
        fewer tokens than what the item shows now and whose text no other item shows (a
        session summary covering a short turn is longer than the turn, and two turns it
        covers would show it twice); None when no version is, and the item is left to
        eviction."""
        for v in range(version[i] + 1, len(items[i].versions) + 1):
            if shown[items[i].versions[v - 1]] > 0:
                continue
            if (i, v) not in version_costs:
                version_costs[i, v] = counter.count(items[i].line(v) + "\n")
            if version_costs[i, v] < costs[i]:
                return v, version_costs[i, v]
        return None

    while total() > budget_tokens:  # 1: compress, lowest score first, one level a sweep
        progressed = False
        for i in order:
            if total() <= budget_tokens:
                break
            if kept[i] and version[i] < len(items[i].versions):
                taken = next_version(i)
                if taken is None:
                    continue
                shown[shown_text(i)] -= 1
                version[i], costs[i] = taken
                shown[shown_text(i)] += 1
                texts[i] = items[i].line(version[i])
                progressed = True
        if not progressed:
            break

    def covered(i: int) -> bool:  # another kept item shows one of this item's versions
        mine = shown_text(i)
        return any(shown[v] > 0 for v in items[i].versions if v != mine)

    # 2: evict, lowest score first (must_keep items sort last); first the items whose
    # compressed version another item already shows, then the rest
    for pass_covered in (True, False):
        for i in order:
            if total() <= budget_tokens:
                break
            if kept[i] and not items[i].must_keep and (covered(i) or not pass_covered):
                kept[i] = False
                shown[shown_text(i)] -= 1
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
        text = render_partition(name, lines)
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
