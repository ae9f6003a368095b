"""``health_report(settings)``: storage, retrieval and compression, judged by
``pipelines.health.report``. The CLI (``memharness health``) and the metrics'
``memharness_health_up`` call this (the API's ``/readyz`` answers reachability, not quality).

Storage counts the vector index live (embedded: the store's owner answers
``memory.recall.index_counts``; an owner that does not answer is itself a storage failure);
the scrape-time variant (``live_index=False``) uses the counts of the last golden run, so a
scrape never waits on the owner. Retrieval reads the last golden run of every tenant, its
recall p95 (what an agent's ``recall()`` waited) and the rerank p95 of this host's worker
metrics when there are any. Compression reads the last compress / quality run and the last
sampled fact recall.
"""

from __future__ import annotations

import glob
import logging
import math
from datetime import UTC, datetime

from config import Settings
from pipelines.health.report import (
    CompressionFigures,
    HealthReport,
    RetrievalFigures,
    StorageFigures,
    judge_compression,
    judge_retrieval,
    judge_storage,
)
from pipelines.health.signals import histogram_quantile
from workers.health.figures import FigureReader, Figures
from workers.health.golden import index_points, live_rows

log = logging.getLogger(__name__)

# A golden run older than this many periods means the schedule stopped.
GOLDEN_STALE_PERIODS = 3


IndexCounts = dict[str, tuple[int, int]]


def _live_index(settings: Settings, reader: FigureReader) -> tuple[IndexCounts | None, str | None]:
    try:
        points = index_points(settings, settings.golden_timeout_s)
    except Exception as exc:  # no owner answering: the index cannot be trusted either
        return None, f"index not counted: {type(exc).__name__}: {exc}"[:300]
    try:
        rows = live_rows(reader.connection(), settings)
    except Exception as exc:
        return None, f"live rows not counted: {type(exc).__name__}: {exc}"[:300]
    return {kind: (points.get(kind, 0), rows.get(kind, 0)) for kind in rows}, None


def local_rerank_p95(settings: Settings) -> float | None:
    """p95 of ``memharness_rerank_seconds`` over this host's worker metric files."""
    files = glob.glob(str(settings.metrics_multiproc_dir / "*" / "histogram_*.db"))
    if not files:
        return None
    from prometheus_client.multiprocess import MultiProcessCollector

    buckets: dict[float, float] = {}
    for metric in MultiProcessCollector.merge(files, accumulate=True):  # type: ignore[no-untyped-call]
        if metric.name != "memharness_rerank_seconds":
            continue
        for sample in metric.samples:
            if sample.name.endswith("_bucket"):
                bound = float(sample.labels["le"])
                buckets[bound] = buckets.get(bound, 0.0) + sample.value
    ordered = sorted(buckets.items(), key=lambda kv: kv[0])
    if not ordered or not math.isinf(ordered[-1][0]):
        return None
    return histogram_quantile(0.95, ordered)


def judge(settings: Settings, figures: Figures, storage_index: StorageFigures) -> HealthReport:
    golden_ratios = {tenant: ratio for tenant, (ratio, _, _) in figures.golden.items()}
    p95s = [p95 for _, p95, _ in figures.golden.values() if p95 is not None]
    ages = [age for _, _, age in figures.golden.values()]
    retrieval = RetrievalFigures(
        golden=golden_ratios,
        golden_age_s=min(ages) if ages else None,
        vector_p95_s=max(p95s) if p95s else None,
        rerank_p95_s=local_rerank_p95(settings),
    )
    compression = CompressionFigures(
        last_run_age_s=figures.last_compression_age_s,
        live_rows=figures.live_episodic,
        fact_recall=figures.fact_recall,
    )
    return HealthReport(
        components=(
            judge_storage(storage_index, settings.health_index_drift_max),
            judge_retrieval(
                retrieval,
                settings.health_golden_min_ratio,
                settings.health_latency_p95_max_s,
                settings.golden_interval_s * GOLDEN_STALE_PERIODS,
            ),
            judge_compression(
                compression, settings.health_compression_max_age_s, settings.health_fact_recall_min
            ),
        ),
        checked_at=datetime.now(UTC).isoformat(),
        notes=tuple(figures.errors),
    )


def health_report(
    settings: Settings,
    *,
    live_index: bool = True,
    reader: FigureReader | None = None,
    figures: Figures | None = None,
) -> HealthReport:
    """The health of the deployment ``settings`` names. ``figures`` already read (a scrape)
    are judged as they are, without reading again."""
    own = reader is None
    reader = reader or FigureReader(settings)
    try:
        if figures is None:
            figures = reader.read(ping_workers=False)
        index: IndexCounts | None
        error: str | None
        if figures.postgres_error is not None:
            index, error = None, "PostgreSQL unreachable"
        elif live_index:
            index, error = _live_index(settings, reader)
        elif figures.index_points is not None and figures.index_rows is not None:
            index = {
                kind: (points, figures.index_rows.get(kind, 0))
                for kind, points in figures.index_points.items()
            }
            error = None
        else:
            index, error = {}, None  # no golden run counted the index yet
        storage = StorageFigures(figures.postgres_error, figures.redis_error, index, error)
        return judge(settings, figures, storage)
    finally:
        if own:
            reader.close()
