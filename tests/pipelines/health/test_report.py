from __future__ import annotations

from pipelines.health.report import (
    CompressionFigures,
    HealthReport,
    RetrievalFigures,
    StorageFigures,
    judge_compression,
    judge_retrieval,
    judge_storage,
)


def test_storage_fails_on_drift_beyond_the_line_or_an_uncountable_index() -> None:
    ok = judge_storage(StorageFigures(None, None, {"episodic": (98, 100)}), drift_max=0.05)
    assert ok.healthy
    drifted = judge_storage(StorageFigures(None, None, {"episodic": (30, 100)}), 0.05)
    assert not drifted.healthy
    assert drifted.checks[-1].value == 0.7
    uncounted = judge_storage(StorageFigures(None, None, None, "owner did not answer"), 0.05)
    assert not uncounted.healthy
    down = judge_storage(StorageFigures("refused", None, {}), 0.05)
    assert not down.healthy


def test_retrieval_fails_below_the_golden_line_or_on_slow_search() -> None:
    base = {"golden_age_s": 10.0, "vector_p95_s": 0.02, "rerank_p95_s": None}
    good = RetrievalFigures(golden={"a": 0.9, "b": None}, **base)
    assert judge_retrieval(good, 0.8, 0.5, 3600).healthy
    bad = RetrievalFigures(golden={"a": 0.9, "b": 0.5}, **base)
    assert not judge_retrieval(bad, 0.8, 0.5, 3600).healthy
    slow = RetrievalFigures(golden={}, golden_age_s=None, vector_p95_s=0.9, rerank_p95_s=None)
    assert not judge_retrieval(slow, 0.8, 0.5, 3600).healthy
    stale = RetrievalFigures(
        golden={"a": 1.0}, golden_age_s=7200, vector_p95_s=None, rerank_p95_s=None
    )
    assert not judge_retrieval(stale, 0.8, 0.5, 3600).healthy


def test_compression_needs_a_recent_run_only_when_there_is_something_to_compress() -> None:
    assert judge_compression(CompressionFigures(None, 10, None), 7200, 0.6).healthy
    assert not judge_compression(CompressionFigures(None, 5000, None), 7200, 0.6).healthy
    assert judge_compression(CompressionFigures(60.0, 5000, 0.9), 7200, 0.6).healthy
    assert not judge_compression(CompressionFigures(60.0, 5000, 0.4), 7200, 0.6).healthy


def test_the_report_is_healthy_only_when_every_component_is() -> None:
    storage = judge_storage(StorageFigures(None, None, {}), 0.05)
    compression = judge_compression(CompressionFigures(None, 5000, None), 7200, 0.6)
    report = HealthReport((storage, compression), checked_at="now")
    assert not report.healthy
    assert report.as_dict()["components"]["storage"]["healthy"] is True
