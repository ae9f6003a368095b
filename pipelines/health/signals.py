"""Figures the metrics are made of, computed without I/O: cheap enough for every context()."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence


def mean_rank_shift(fused_in_final_order: Sequence[float]) -> float | None:
    """How far the rerank moved the list: the mean of |final rank - fused rank| over the
    results, where the fused rank is a result's place when ordered by its fusion score (ties
    keep the final order, so an unmoved list shifts 0). None for an empty list."""
    n = len(fused_in_final_order)
    if n == 0:
        return None
    by_fusion = sorted(range(n), key=lambda i: -fused_in_final_order[i])
    return sum(abs(final - fused) for fused, final in enumerate(by_fusion)) / n


def utilisation(used_tokens: int, budget_tokens: int) -> float | None:
    """used / budget of one partition; None when the partition had no budget."""
    if budget_tokens <= 0:
        return None
    return used_tokens / budget_tokens


_WORD = re.compile(r"[A-Za-z_][A-Za-z_]+")
# A reason's class: its first words (numbers and quoted values dropped), or the exception
# type before a colon. Three words tell "LLM unavailable after" from "LLM refused the".
REASON_WORDS = 3
REASON_MAX_CHARS = 48


def reason_class(reason: str | None) -> str:
    """A short, bounded label for a dead letter's reason (cardinality stays small)."""
    if not reason:
        return "unknown"
    head = re.split(r"[:;]", reason, maxsplit=1)[0].strip()
    if head and " " not in head and head[:1].isupper():
        return head[:REASON_MAX_CHARS]  # an exception type: "OperationalError"
    words = _WORD.findall(head)[:REASON_WORDS]
    return ("_".join(w.lower() for w in words) or "unknown")[:REASON_MAX_CHARS]


def drift_ratio(points: int, rows: int) -> float:
    """|points - rows| / max(1, rows): how far the index is from PostgreSQL."""
    return abs(points - rows) / max(1, rows)


def percentile(values: Iterable[float], q: float) -> float | None:
    """The nearest-rank q-quantile (0 < q <= 1); None for no values."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[min(len(ordered), rank) - 1]


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """Prometheus' histogram_quantile over cumulative (upper bound, count) buckets, sorted
    by bound and ending with +Inf; None without observations."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (
                count - lower_count
            )
        lower_bound, lower_count = bound, count
    return lower_bound
