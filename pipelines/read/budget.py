"""Context partitions, their token budgets, and the eviction score used inside each one.

A context is laid out in partitions, each with its own budget. Fixed partitions (system,
task context, working variables) always get their configured size: they hold what the agent
must not lose. The rest of the caller's budget is shared by the elastic partitions in
proportion to their configured sizes, shifted by the attention focus. A partition that
overflows compresses or evicts its own items; nothing is ever cut globally.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum

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


def check_budget(budget_tokens: object, layout: PartitionLayout) -> int:
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
    elastic = sum(1 for spec in layout.specs if not spec.fixed)
    minimum = layout.fixed_tokens + elastic
    if budget_tokens < minimum:
        raise InvalidInput(
            "budget_tokens",
            f"is {budget_tokens}; the fixed partitions alone take {layout.fixed_tokens} tokens "
            f"and each of the {elastic} elastic partitions needs at least one",
            limit=f">= {minimum} tokens",
        )
    return budget_tokens


def allocate_budgets(
    layout: PartitionLayout,
    budget_tokens: int,
    shifts: Mapping[Partition, float] | None = None,
) -> dict[Partition, int]:
    """Each partition's budget. Fixed ones get their size; elastic ones share the rest.

    ``shifts`` (from the focus) multiply elastic weights, clamped to [1/MAX_FOCUS_SHIFT,
    MAX_FOCUS_SHIFT]. Integer shares use the largest-remainder method, so the budgets add
    up to exactly ``budget_tokens``; every elastic partition gets at least one token.
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
    for name in [n for n, share in shares.items() if share == 0]:
        # check_budget guaranteed a token for each; take it from the largest share
        richest = max(shares, key=lambda n: (shares[n], n.value))
        shares[richest] -= 1
        shares[name] = 1
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
