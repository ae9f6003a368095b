"""Context partitions, their token budgets, and the eviction score used inside each one.

A context is laid out in partitions, each with its own budget. Fixed partitions (system,
task context, working variables) always get their configured size: they hold what the agent
must not lose. The rest of the caller's budget is shared by the elastic partitions in
proportion to their configured sizes, shifted by the attention focus. A partition that
overflows compresses or evicts its own items; nothing is ever cut globally.

A budget below the layout's total (128k by default) is laid out with the layout scaled to it
(``fit_layout``): every partition, fixed ones included, shrinks in proportion, none below its
minimum (``PARTITION_MIN_TOKENS``), so that a 16k or a 32k model gets the same shape of context
as a 128k one. The smallest context served is ``MIN_CONTEXT_TOKENS``; the total and every
larger budget are laid out exactly as configured.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field, model_validator

from pipelines.errors import InvalidInput
from pipelines.records import MemoryType
from pipelines.write.filter import tier1_filter

# DeepSeek-V4's tokenizer declares model_max_length = 1,048,576; no context can be larger.
MAX_BUDGET_TOKENS = 1_048_576

# A focus may grow or shrink an elastic partition by at most this factor either way: enough
# to move tens of thousands of tokens, never enough to starve a partition.
MAX_FOCUS_SHIFT = 2.0


class Partition(StrEnum):
    SYSTEM = "system"
    TASK_CONTEXT = "task_context"
    RETRIEVED_MEMORY = "retrieved_memory"
    RECENT_INTERACTIONS = "recent_interactions"
    WORKING_VARIABLES = "working_variables"
    SCRATCH = "scratch"


class PartitionSpec(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: Partition
    budget_tokens: int = Field(gt=0, le=MAX_BUDGET_TOKENS)
    fixed: bool
    # The least an elastic partition is given whatever the focus's shifts (a scaled layout's
    # minimum; 0 for a configured layout, whose elastic partitions get at least one token).
    floor_tokens: int = Field(0, ge=0, le=MAX_BUDGET_TOKENS)

    @model_validator(mode="after")
    def _floor_fits(self) -> PartitionSpec:
        if self.floor_tokens > self.budget_tokens:
            raise ValueError(
                f"{self.name.value}: floor_tokens {self.floor_tokens} exceeds budget_tokens "
                f"{self.budget_tokens}"
            )
        return self


class PartitionLayout(BaseModel):
    """The configured partitions; every partition appears exactly once, in render order."""

    model_config = ConfigDict(frozen=True)

    specs: tuple[PartitionSpec, ...]

    @model_validator(mode="after")
    def _complete(self) -> PartitionLayout:
        names = [spec.name for spec in self.specs]
        if sorted(names) != sorted(Partition):
            raise ValueError(
                f"a layout names every partition once: got {names}, "
                f"expected {[p.value for p in Partition]}"
            )
        if not any(not spec.fixed for spec in self.specs):
            raise ValueError("a layout needs at least one elastic partition")
        return self

    def spec(self, name: Partition) -> PartitionSpec:
        return next(spec for spec in self.specs if spec.name is name)

    @property
    def fixed_tokens(self) -> int:
        return sum(spec.budget_tokens for spec in self.specs if spec.fixed)

    @property
    def default_total_tokens(self) -> int:
        return sum(spec.budget_tokens for spec in self.specs)

    @property
    def minimum_tokens(self) -> int:
        """The smallest budget ``allocate_budgets`` lays out with this very layout: the fixed
        partitions and each elastic one's floor (at least one token)."""
        return self.fixed_tokens + sum(
            max(1, spec.floor_tokens) for spec in self.specs if not spec.fixed
        )


# The defaults: 128k in all, DeepSeek's usual window.
DEFAULT_LAYOUT = PartitionLayout(
    specs=(
        PartitionSpec(name=Partition.SYSTEM, budget_tokens=4_000, fixed=True),
        PartitionSpec(name=Partition.TASK_CONTEXT, budget_tokens=8_000, fixed=True),
        PartitionSpec(name=Partition.RETRIEVED_MEMORY, budget_tokens=32_000, fixed=False),
        PartitionSpec(name=Partition.RECENT_INTERACTIONS, budget_tokens=64_000, fixed=False),
        PartitionSpec(name=Partition.WORKING_VARIABLES, budget_tokens=12_000, fixed=True),
        PartitionSpec(name=Partition.SCRATCH, budget_tokens=8_000, fixed=False),
    )
)


def layout_from_budgets(
    budgets: Mapping[str, int], fixed: Mapping[str, bool] | None = None
) -> PartitionLayout:
    """A layout from configuration (``{"retrieved_memory": 48000, ...}``); unnamed ones keep
    their defaults. Raises InvalidInput naming the partition on a bad entry."""
    known = {p.value for p in Partition}
    for key in [*budgets, *(fixed or {})]:
        if key not in known:
            raise InvalidInput("partitions", f"unknown partition {key!r}; known: {sorted(known)}")
    specs = []
    for spec in DEFAULT_LAYOUT.specs:
        size = budgets.get(spec.name.value, spec.budget_tokens)
        if (
            isinstance(size, bool)
            or not isinstance(size, int)
            or not 0 < size <= (MAX_BUDGET_TOKENS)
        ):
            raise InvalidInput(
                f"partitions.{spec.name.value}",
                f"must be an integer number of tokens in 1..{MAX_BUDGET_TOKENS}, got {size!r}",
                limit=f"{MAX_BUDGET_TOKENS} tokens",
            )
        is_fixed = (fixed or {}).get(spec.name.value, spec.fixed)
        specs.append(PartitionSpec(name=spec.name, budget_tokens=size, fixed=bool(is_fixed)))
    try:
        return PartitionLayout(specs=tuple(specs))
    except ValueError as exc:
        raise InvalidInput("partitions", str(exc)) from None


def _check_budget_value(budget_tokens: object) -> int:
    """An integer no larger than the largest context; InvalidInput names budget_tokens."""
    if isinstance(budget_tokens, bool) or not isinstance(budget_tokens, int):
        raise InvalidInput(
            "budget_tokens", f"must be an integer, got {type(budget_tokens).__name__}"
        )
    if budget_tokens > MAX_BUDGET_TOKENS:
        raise InvalidInput(
            "budget_tokens",
            f"is {budget_tokens}; the largest context is {MAX_BUDGET_TOKENS} tokens",
            limit=f"<= {MAX_BUDGET_TOKENS} tokens",
        )
    return budget_tokens


def check_budget(budget_tokens: object, layout: PartitionLayout) -> int:
    """A budget this very layout can be laid out with (its fixed partitions at their size).
    A context call checks ``check_context_budget`` instead, which scales the layout."""
    budget_tokens = _check_budget_value(budget_tokens)
    elastic = sum(1 for spec in layout.specs if not spec.fixed)
    minimum = layout.minimum_tokens
    if budget_tokens < minimum:
        floors = sum(max(1, spec.floor_tokens) for spec in layout.specs if not spec.fixed)
        needs = (
            "needs at least one"
            if floors == elastic
            else f"needs its floor ({floors} tokens in all)"
        )
        raise InvalidInput(
            "budget_tokens",
            f"is {budget_tokens}; the fixed partitions alone take {layout.fixed_tokens} tokens "
            f"and each of the {elastic} elastic partitions {needs}",
            limit=f">= {minimum} tokens",
        )
    return budget_tokens


# -- budgets below the layout's total --------------------------------------------------------

# The smallest context served: the smallest window models still ship with (4,096 tokens, the
# first chat models'), and about twice the partitions' minimums below, so that some of the
# budget is still shared in proportion at the floor.
MIN_CONTEXT_TOKENS = 4_000

# The least each partition keeps when the layout is scaled down; the reasons are sizes
# measured with the DeepSeek-V4 tokenizer on the two-week project histories of the tests
# (a memory line with its timestamp: mean 28 tokens in English, 32 in Chinese; p90 38 / 46).
PARTITION_MIN_TOKENS: dict[Partition, int] = {
    # A role and about ten one-line rules (a rule line is 20-30 tokens). A system prompt
    # longer than its partition is refused (InvalidInput "system"), never cut.
    Partition.SYSTEM: 256,
    # The task's goal and acceptance criteria: its items are must_keep, cut to fit rather
    # than dropped, so this is what survives of a long goal.
    Partition.TASK_CONTEXT: 256,
    # The rerank's concentrated depth (10 memories) at the p90 line (46 tokens), with room
    # for a few knowledge lines beside them.
    Partition.RETRIEVED_MEMORY: 600,
    # The window's 20 verbatim turns at the mean line (32 tokens) and the section header:
    # below it the turn being answered crowds out the turns that explain it.
    Partition.RECENT_INTERACTIONS: 800,
    # A handful of "key = value" lines (about 15 tokens each).
    Partition.WORKING_VARIABLES: 128,
    # One or two notes.
    Partition.SCRATCH: 64,
}
assert sum(PARTITION_MIN_TOKENS.values()) <= MIN_CONTEXT_TOKENS


def context_floor_tokens(layout: PartitionLayout) -> int:
    """The smallest budget a context call is served with: ``MIN_CONTEXT_TOKENS``, or the
    layout's own total when it was configured smaller than that."""
    return min(MIN_CONTEXT_TOKENS, layout.default_total_tokens)


def _minimum_of(spec: PartitionSpec) -> int:
    """A partition's minimum in a scaled layout (never more than its configured size)."""
    return min(PARTITION_MIN_TOKENS[spec.name], spec.budget_tokens)


def _shares_with_floors(
    total: int, sizes: Mapping[Partition, int], floors: Mapping[Partition, int]
) -> dict[Partition, int]:
    """``total`` split in proportion to ``sizes``, none below its floor, adding up exactly.

    The partitions whose proportional share falls under their floor are pinned there and
    the others share what is left, again in proportion, until none falls under (water
    filling); integer shares by the largest remainder, ties by name. Needs ``total`` at
    least the sum of the floors: then some partition is always left to share the rest.
    """
    pinned: dict[Partition, int] = {}
    while True:
        free = {name: size for name, size in sizes.items() if name not in pinned}
        room = total - sum(pinned.values())
        weight = sum(free.values())
        exact = {name: room * size / weight for name, size in free.items()}
        under = [name for name, value in exact.items() if value < floors[name]]
        if not under:
            break
        pinned.update((name, floors[name]) for name in under)
    # An integer floor at or below an exact share is at or below its integer part too.
    shares = {name: math.floor(value) for name, value in exact.items()}
    leftover = room - sum(shares.values())
    by_remainder = sorted(exact, key=lambda name: (shares[name] - exact[name], name.value))
    for name in by_remainder[:leftover]:
        shares[name] += 1
    return {**pinned, **shares}


def fit_layout(layout: PartitionLayout, budget_tokens: int) -> PartitionLayout:
    """The layout a context of ``budget_tokens`` is laid out with.

    ``layout`` itself from its total up. Below it, every partition's size is its share of
    the budget in proportion to its configured size, none below its minimum: fixed ones
    stay fixed at that share, elastic ones share the rest by it (shifted by the focus, each
    kept at its minimum). Raises InvalidInput naming budget_tokens and the floor below
    ``context_floor_tokens``.
    """
    budget_tokens = _check_budget_value(budget_tokens)
    total = layout.default_total_tokens
    if budget_tokens >= total:
        return layout
    floor = context_floor_tokens(layout)
    if budget_tokens < floor:
        minimums = ", ".join(f"{spec.name.value} {_minimum_of(spec)}" for spec in layout.specs)
        raise InvalidInput(
            "budget_tokens",
            f"is {budget_tokens}; the smallest context is {floor} tokens (below it the "
            f"partitions' minimums, {minimums}, leave nothing to lay out in proportion)",
            limit=f">= {floor} tokens",
        )
    return _scaled_layout(layout, budget_tokens)


@lru_cache(maxsize=1_024)
def _scaled_layout(layout: PartitionLayout, budget_tokens: int) -> PartitionLayout:
    """``fit_layout``'s scaled layout, memoised (about 60 µs to build, and asked for by the
    call's check and again by its assembly, with the few budgets an agent uses)."""
    minimums = {spec.name: _minimum_of(spec) for spec in layout.specs}
    shares = _shares_with_floors(
        budget_tokens, {spec.name: spec.budget_tokens for spec in layout.specs}, minimums
    )
    return PartitionLayout(
        specs=tuple(
            PartitionSpec(
                name=spec.name,
                budget_tokens=shares[spec.name],
                fixed=spec.fixed,
                floor_tokens=0 if spec.fixed else minimums[spec.name],
            )
            for spec in layout.specs
        )
    )


def check_context_budget(budget_tokens: object, layout: PartitionLayout) -> int:
    """A context call's budget: an integer from ``context_floor_tokens(layout)`` up to the
    largest context. InvalidInput names budget_tokens and the limit."""
    budget = _check_budget_value(budget_tokens)
    fit_layout(layout, budget)
    return budget


def allocate_budgets(
    layout: PartitionLayout,
    budget_tokens: int,
    shifts: Mapping[Partition, float] | None = None,
) -> dict[Partition, int]:
    """Each partition's budget. Fixed ones get their size; elastic ones share the rest.

    ``shifts`` (from the focus) multiply elastic weights, clamped to [1/MAX_FOCUS_SHIFT,
    MAX_FOCUS_SHIFT]. Integer shares use the largest-remainder method, so the budgets add
    up to exactly ``budget_tokens``; every elastic partition gets at least its floor (one
    token in a configured layout, its minimum in a scaled one: ``fit_layout``).
    """
    total = check_budget(budget_tokens, layout)
    budgets: dict[Partition, int] = {}
    weights: dict[Partition, float] = {}
    for spec in layout.specs:
        if spec.fixed:
            budgets[spec.name] = spec.budget_tokens
        else:
            shift = (shifts or {}).get(spec.name, 1.0)
            if not math.isfinite(shift):
                shift = 1.0
            shift = min(MAX_FOCUS_SHIFT, max(1.0 / MAX_FOCUS_SHIFT, shift))
            weights[spec.name] = spec.budget_tokens * shift
    remaining = total - sum(budgets.values())
    weight_sum = sum(weights.values())
    exact = {name: remaining * weight / weight_sum for name, weight in weights.items()}
    shares = {name: math.floor(value) for name, value in exact.items()}
    leftover = remaining - sum(shares.values())
    by_remainder = sorted(exact, key=lambda name: (shares[name] - exact[name], name.value))
    for name in by_remainder[:leftover]:
        shares[name] += 1
    floors = {spec.name: max(1, spec.floor_tokens) for spec in layout.specs if not spec.fixed}
    for name in [n for n, share in shares.items() if share < floors[n]]:
        # check_budget guaranteed each its floor (one token unless the layout was scaled):
        # take it from the share with the most above its own floor
        while shares[name] < floors[name]:
            richest = max(
                (n for n in shares if shares[n] > floors[n]),
                key=lambda n: (shares[n] - floors[n], n.value),
            )
            moved = min(floors[name] - shares[name], shares[richest] - floors[richest])
            shares[richest] -= moved
            shares[name] += moved
    budgets.update(shares)
    return {spec.name: budgets[spec.name] for spec in layout.specs}


# Information density: decisions carry the most per token, acknowledgements nothing.
DENSITY: dict[MemoryType | None, float] = {
    MemoryType.DECISION: 1.0,
    MemoryType.PREFERENCE: 0.9,
    MemoryType.STATUS_CHANGE: 0.8,
    MemoryType.FEEDBACK: 0.7,
    MemoryType.ACTION: 0.6,
    MemoryType.OBSERVATION: 0.5,
    None: 0.5,
}
ACKNOWLEDGEMENT_DENSITY = 0.0

# The weights of the eviction score.
W_RELEVANCE = 0.35
W_DENSITY = 0.30
W_RECENCY = 0.20
W_IDENTIFIERS = 0.15
RECENCY_SCALE_HOURS = 48.0


def density_of(text: str, memory_type: MemoryType | None) -> float:
    if len(text) <= 40 and not tier1_filter(text).keep:
        return ACKNOWLEDGEMENT_DENSITY
    return DENSITY[memory_type]


def age_hours(timestamp: datetime, now: datetime) -> float:
    return max(0.0, (now - timestamp).total_seconds() / 3600.0)


def eviction_score(
    *, relevance: float, density: float, age_hours: float, has_identifiers: bool
) -> float:
    """Higher keeps. 0.35·relevance + 0.30·density + 0.20·exp(−age/48h) + 0.15·identifiers."""
    relevance = min(1.0, max(0.0, relevance))
    density = min(1.0, max(0.0, density))
    recency = math.exp(-max(0.0, age_hours) / RECENCY_SCALE_HOURS)
    return (
        W_RELEVANCE * relevance
        + W_DENSITY * density
        + W_RECENCY * recency
        + (W_IDENTIFIERS if has_identifiers else 0.0)
    )
