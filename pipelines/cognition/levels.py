"""The level policy of hierarchical compression.

L0 raw (about a day) → L1 fine summary (1–7 days, about 10:1) → L2 phase summary (1–4 weeks,
about 50:1) → L3 task summary at task completion (about 200:1) → L4 semantic knowledge (made
by :mod:`pipelines.cognition.consolidate`). The ratio is always against the raw words the
summary covers. The level a memory should sit at follows its age *and* its reads: age is
divided by ``1 + ln(1 + access_count)`` (the factor the forgetting curve uses), so an
often-retrieved memory stays fine (:func:`target_level`). A retry after a rollback aims at
half the previous ratio (:meth:`LevelPolicy.ratio`).
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

from pipelines.records import Level

DAY_S = 86_400.0


class LevelPolicy(BaseModel):
    """Age bands of the levels and their target ratios (the design's defaults)."""

    model_config = ConfigDict(frozen=True)

    l0_max_age_s: float = Field(1 * DAY_S, gt=0)
    l1_max_age_s: float = Field(7 * DAY_S, gt=0)
    ratio_l1: float = Field(10.0, ge=1)
    ratio_l2: float = Field(50.0, ge=1)
    ratio_l3: float = Field(200.0, ge=1)
    # One L1 summary covers at most a day of one session and this many raw words, so an L1
    # row stays a readable paragraph (~200 words at 10:1).
    l1_group_max_words: int = Field(2000, ge=1)
    l1_group_span_s: float = Field(1 * DAY_S, gt=0)
    # One L2 summary covers one phase of a task: at most a week of L1 rows.
    l2_group_span_s: float = Field(7 * DAY_S, gt=0)

    def ratio(self, level: Level, version: int = 1) -> float:
        """The target ratio of a level; each retry after a rollback halves it (never < 1)."""
        if level == Level.L1:
            ratio = self.ratio_l1
        elif level == Level.L2:
            ratio = self.ratio_l2
        elif level == Level.L3:
            ratio = self.ratio_l3
        else:
            raise ValueError(f"no compression ratio for L{int(level)}")
        halvings = max(1, version) - 1
        return max(1.0, float(ratio) / float(2**halvings))


DEFAULT_LEVELS = LevelPolicy()


def effective_age_s(age_s: float, access_count: int) -> float:
    """Age slowed by reads, with the forgetting curve's access factor."""
    if access_count < 0:
        raise ValueError(f"access_count must be >= 0, got {access_count}")
    return max(0.0, age_s) / (1.0 + math.log1p(access_count))


def target_level(age_s: float, access_count: int, policy: LevelPolicy = DEFAULT_LEVELS) -> Level:
    """The finest level allowed for a memory of this age and reads; L3 only at task end."""
    age = effective_age_s(age_s, access_count)
    if age < policy.l0_max_age_s:
        return Level.L0
    if age < policy.l1_max_age_s:
        return Level.L1
    return Level.L2
