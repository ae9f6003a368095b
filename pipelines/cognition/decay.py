"""The forgetting curve: how much of a memory is still retained, and what a sweep does about it.

Retention follows an exponential forgetting curve, R = exp(-t / S), where

* ``t`` is the time since the memory was last reinforced: its last access, or its timestamp
  when it was never read (a review resets the curve, as in spaced repetition);
* ``S``, the stability, is ``base × (1 + 4 × importance) × (1 + ln(1 + access_count))``, with
  ``base`` three days by default. Importance stretches the curve linearly (a memory of
  importance 1 lasts five times longer than one of importance 0); accesses stretch it
  logarithmically, so the hundredth read counts for less than the first.

What a sweep does with a memory (:func:`decide_decay`), first rule that applies:

1. **evict** when R < 0.05 and importance < 0.5, *and* what it said is redundant: a kept
   summary covers it (``covered``), or it carries no fact at all (an acknowledgement, chatter;
   ``carries_fact`` false). The memory is logged and removed from the index;
2. **compress** when R < 0.05 otherwise: a faded memory that states something no kept summary
   holds, or an important one, is never evicted by the curve; it is a candidate for the next
   level of the compression ladder instead (at L3 and above, where nothing is left to
   compress, it is kept). Low retention alone never deletes a fact;
3. **promote** L0 → L1 when R < 0.3 and it was not read in the last day; above L0 the same
   rule applies, and the level policy of :mod:`pipelines.compress` must also say the memory
   is old enough for the next level (often-read memories stay fine);
4. otherwise **keep**, and store R as the row's ``decay_factor``.

Pure: the clock is an argument, nothing is read or written here.
"""

from __future__ import annotations

import math
import uuid
from datetime import datetime, timedelta
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from pipelines.records import EpisodicMemory, Level

DAY_S = 86_400.0


class DecayPolicy(BaseModel):
    """The numbers of the forgetting curve and of the sweep's rules (the design's defaults)."""

    model_config = ConfigDict(frozen=True)

    base_stability_s: float = Field(3 * DAY_S, gt=0)
    importance_weight: float = Field(4.0, ge=0)
    evict_below_retention: float = Field(0.05, gt=0, lt=1)
    evict_below_importance: float = Field(0.5, ge=0, le=1)
    promote_below_retention: float = Field(0.3, gt=0, lt=1)
    promote_idle_s: float = Field(DAY_S, ge=0)


DEFAULT_POLICY = DecayPolicy()


class DecayAction(StrEnum):
    KEEP = "keep"
    PROMOTE = "promote"
    COMPRESS = "compress"
    EVICT = "evict"


class DecayDecision(BaseModel):
    """What a sweep does with one memory, and why; the worker logs it as it is."""

    model_config = ConfigDict(frozen=True)

    memory_id: uuid.UUID
    action: DecayAction
    retention: float = Field(ge=0.0, le=1.0)
    stability_s: float
    elapsed_s: float
    level: Level
    target_level: Level | None = None
    reason: str


def stability_s(
    importance: float, access_count: int, policy: DecayPolicy = DEFAULT_POLICY
) -> float:
    """S = base × (1 + w × importance) × (1 + ln(1 + access_count))."""
    if not 0.0 <= importance <= 1.0:
        raise ValueError(f"importance must be in [0, 1], got {importance}")
    if access_count < 0:
        raise ValueError(f"access_count must be >= 0, got {access_count}")
    return (
        policy.base_stability_s
        * (1.0 + policy.importance_weight * importance)
        * (1.0 + math.log1p(access_count))
    )


def retention(
    elapsed_s: float,
    importance: float,
    access_count: int,
    policy: DecayPolicy = DEFAULT_POLICY,
) -> float:
    """R = exp(-t / S); a clock that runs backwards (t < 0) counts as no time at all."""
    return math.exp(-max(0.0, elapsed_s) / stability_s(importance, access_count, policy))


def last_reinforced_at(memory: EpisodicMemory) -> datetime:
    if memory.last_accessed_at is not None and memory.last_accessed_at > memory.timestamp:
        return memory.last_accessed_at
    return memory.timestamp


def memory_retention(
    memory: EpisodicMemory, now: datetime, policy: DecayPolicy = DEFAULT_POLICY
) -> float:
    elapsed = (now - last_reinforced_at(memory)).total_seconds()
    return retention(elapsed, memory.importance, memory.access_count, policy)


def idle_s(memory: EpisodicMemory, now: datetime) -> float:
    """Seconds since the last read; a never-read memory has been idle since it was written."""
    return max(0.0, (now - last_reinforced_at(memory)).total_seconds())


def decide_decay(
    memory: EpisodicMemory,
    now: datetime,
    *,
    level_ceiling: Level | None = None,
    covered: bool = False,
    carries_fact: bool = True,
    policy: DecayPolicy = DEFAULT_POLICY,
) -> DecayDecision:
    """The sweep's verdict on one memory (rules in the module docstring).

    ``level_ceiling`` is the level the level policy allows for this memory's age and reads
    (:func:`pipelines.compress.target_level`); ``None`` lets the curve alone decide. It gates
    promotions above L0 and the compress-instead-of-evict step. ``covered`` says a kept
    summary of a higher level covers this memory; ``carries_fact`` whether its text states
    anything at all. The defaults (not covered, a fact) never evict: only a caller that knows
    the memory is redundant lets the curve delete it.
    """
    elapsed = (now - last_reinforced_at(memory)).total_seconds()
    s = stability_s(memory.importance, memory.access_count, policy)
    r = math.exp(-max(0.0, elapsed) / s)
    common = {
        "memory_id": memory.id,
        "retention": r,
        "stability_s": s,
        "elapsed_s": elapsed,
        "level": memory.level,
    }
    # L3 task summaries and L4 knowledge are the top of the ladder for episodes.
    next_level = Level(memory.level + 1) if memory.level < Level.L3 else None
    if r < policy.evict_below_retention:
        faded = (
            f"retention {r:.3f} < {policy.evict_below_retention} and importance "
            f"{memory.importance:.2f} < {policy.evict_below_importance}"
        )
        unimportant = memory.importance < policy.evict_below_importance
        if unimportant and (covered or not carries_fact):
            why = "a kept summary covers it" if covered else "it carries no fact"
            return DecayDecision(action=DecayAction.EVICT, reason=f"{faded}; {why}", **common)
        if next_level is not None:
            if unimportant:
                reason = f"{faded}, but no kept summary covers it: compressed, not evicted"
            else:
                reason = (
                    f"retention {r:.3f} < {policy.evict_below_retention} but importance "
                    f"{memory.importance:.2f} >= {policy.evict_below_importance}: compressed, "
                    "not evicted"
                )
            return DecayDecision(
                action=DecayAction.COMPRESS, target_level=next_level, reason=reason, **common
            )
        return DecayDecision(
            action=DecayAction.KEEP,
            reason=(
                f"retention {r:.3f} is low but an L{int(memory.level)} that is important or "
                "that nothing covers is kept"
            ),
            **common,
        )
    idle = idle_s(memory, now)
    if (
        next_level is not None
        and r < policy.promote_below_retention
        and idle >= policy.promote_idle_s
    ):
        allowed = memory.level == Level.L0 or level_ceiling is None or level_ceiling >= next_level
        if allowed:
            return DecayDecision(
                action=DecayAction.PROMOTE,
                target_level=next_level,
                reason=(
                    f"retention {r:.3f} < {policy.promote_below_retention} and idle "
                    f"{idle / 3600:.1f} h >= {policy.promote_idle_s / 3600:.1f} h"
                ),
                **common,
            )
        return DecayDecision(
            action=DecayAction.KEEP,
            reason=(
                f"retention {r:.3f} is low but the level policy keeps it at "
                f"L{int(memory.level)} (read often or not old enough)"
            ),
            **common,
        )
    return DecayDecision(action=DecayAction.KEEP, reason=f"retention {r:.3f}", **common)


class EvictionRecord(BaseModel):
    """The log line of a final eviction: what went, when, and the numbers that decided it."""

    model_config = ConfigDict(frozen=True)

    memory_id: uuid.UUID
    tenant_id: str
    task_id: str
    level: Level
    evicted_at: datetime
    retention: float
    importance: float
    access_count: int
    age_s: float
    reason: str


def eviction_record(
    memory: EpisodicMemory, decision: DecayDecision, now: datetime
) -> EvictionRecord:
    if decision.action is not DecayAction.EVICT or decision.memory_id != memory.id:
        raise ValueError("an eviction record needs this memory's evict decision")
    return EvictionRecord(
        memory_id=memory.id,
        tenant_id=memory.tenant_id,
        task_id=memory.task_id,
        level=memory.level,
        evicted_at=now,
        retention=decision.retention,
        importance=memory.importance,
        access_count=memory.access_count,
        age_s=(now - memory.timestamp).total_seconds(),
        reason=decision.reason,
    )


def time_to_retention_s(
    target: float, importance: float, access_count: int, policy: DecayPolicy = DEFAULT_POLICY
) -> float:
    """How long after its last reinforcement a memory falls to ``target`` retention.

    Lets a scheduler ask only for the rows that can have crossed a threshold since the last
    sweep instead of recomputing every row.
    """
    if not 0.0 < target < 1.0:
        raise ValueError(f"target must be in (0, 1), got {target}")
    return -math.log(target) * stability_s(importance, access_count, policy)


def due_at(memory: EpisodicMemory, target: float, policy: DecayPolicy = DEFAULT_POLICY) -> datetime:
    seconds = time_to_retention_s(target, memory.importance, memory.access_count, policy)
    return last_reinforced_at(memory) + timedelta(seconds=seconds)
