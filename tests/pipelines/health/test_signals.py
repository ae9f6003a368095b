from __future__ import annotations

import math

import pytest

from pipelines.health.signals import (
    drift_ratio,
    histogram_quantile,
    mean_rank_shift,
    percentile,
    reason_class,
    utilisation,
)


def test_an_unmoved_list_shifts_nothing_and_a_reversed_one_the_most() -> None:
    assert mean_rank_shift([0.9, 0.5, 0.1]) == 0
    assert mean_rank_shift([0.1, 0.5, 0.9]) == pytest.approx(4 / 3)
    assert mean_rank_shift([]) is None


def test_ties_in_fusion_keep_the_final_order() -> None:
    assert mean_rank_shift([0.5, 0.5, 0.5]) == 0


def test_one_promotion_moves_two_places() -> None:
    # the third by fusion was put first: it moved 2, the two it passed moved 1 each
    assert mean_rank_shift([0.2, 0.9, 0.5]) == pytest.approx(4 / 3)


def test_utilisation_of_a_partition_without_budget_is_none() -> None:
    assert utilisation(50, 200) == 0.25
    assert utilisation(0, 0) is None


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("OperationalError: connection refused", "OperationalError"),
        ("LLM unavailable after 5 attempts: timeout", "llm_unavailable_after"),
        ("gave up after 4 attempts; last error: boom", "gave_up_after"),
        ("embedding failed: ValueError: size", "embedding_failed"),
        ("", "unknown"),
        (None, "unknown"),
        ("12345", "unknown"),
    ],
)
def test_a_dead_letters_reason_becomes_a_short_class(reason: str | None, expected: str) -> None:
    assert reason_class(reason) == expected


def test_drift_is_relative_to_the_rows_and_never_divides_by_zero() -> None:
    assert drift_ratio(90, 100) == 0.1
    assert drift_ratio(3, 0) == 3
    assert drift_ratio(0, 0) == 0


def test_percentile_is_nearest_rank() -> None:
    assert percentile([3, 1, 2, 4], 0.5) == 2
    assert percentile([3, 1, 2, 4], 0.95) == 4
    assert percentile([], 0.5) is None


def test_histogram_quantile_interpolates_inside_a_bucket() -> None:
    buckets = [(0.1, 50.0), (0.5, 90.0), (1.0, 100.0), (math.inf, 100.0)]
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.1)
    assert histogram_quantile(0.95, buckets) == pytest.approx(0.75)
    assert histogram_quantile(0.5, [(math.inf, 0.0)]) is None
