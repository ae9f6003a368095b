"""The metrics endpoint of a worker, and the gauges read at scrape time.

A prefork worker's pool processes record into memory-mapped files (prometheus_client's
multiprocess mode); the worker's main process serves ``/metrics`` on ``metrics_port``, summing
the files and adding the gauges that come from PostgreSQL and Redis (outbox lag, dead letters,
memories per level, capacity, queue depth, index drift, golden hit rate, workers up, health).
Those are read when Prometheus scrapes, with one short statement each under
``metrics_scrape_timeout_s``: nothing polls between scrapes.

Each worker keeps its files in ``metrics_multiproc_dir/<node name>``, emptied when it starts
(the library's rule: the directory must not outlive the processes that wrote it).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from celery.signals import celeryd_after_setup, celeryd_init, worker_process_shutdown

from config import Settings, get_settings
from workers import metrics
from workers.health.figures import FigureReader
from workers.health.report import health_report

log = logging.getLogger(__name__)

ENV_MULTIPROC = "PROMETHEUS_MULTIPROC_DIR"


class ScrapeCollector:
    """The DB/Redis-derived gauges, read on each collect()."""

    def __init__(self, settings: Settings, *, ping_workers: bool = True) -> None:
        self.settings = settings
        self.ping_workers = ping_workers
        self._reader = FigureReader(settings)
        self._lock = threading.Lock()

    def close(self) -> None:
        self._reader.close()

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        with self._lock:  # one scrape at a time shares the reader's connection
            figures = self._reader.read(ping_workers=self.ping_workers)
            report = health_report(
                self.settings, live_index=False, reader=self._reader, figures=figures
            )

        def gauge(name: str, doc: str, labels: list[str] | None = None) -> Any:
            return GaugeMetricFamily(name, doc, labels=labels)

        lag = gauge(
            "memharness_outbox_lag_seconds", "Age of the oldest due job per outbox kind.", ["kind"]
        )
        for kind, seconds in sorted(figures.outbox_lag_s.items()):
            lag.add_metric([kind], seconds)
        dead = gauge("memharness_dead_letters", "Dead letters and dead jobs by reason.", ["reason"])
        for reason, n in sorted(figures.dead_letters.items()):
            dead.add_metric([reason], n)
        memories = gauge(
            "memharness_memories", "Memories by level and status.", ["level", "status"]
        )
        for (level, status), n in sorted(figures.memories.items()):
            memories.add_metric([str(level), status], n)
        out = [lag, dead, memories]
        if figures.postgres_error is None:
            capacity = gauge(
                "memharness_capacity_ratio", "Live episodic memories / the capacity watermark."
            )
            capacity.add_metric([], figures.capacity_ratio(self.settings))
            out.append(capacity)
        if figures.resistant is not None:
            resistant = gauge(
                "memharness_compression_resistant", "Memories marked compression-resistant."
            )
            resistant.add_metric([], figures.resistant)
            out.append(resistant)
        if figures.fact_recall is not None:
            recall = gauge("memharness_fact_recall_ratio", "Last sampled fact recall.")
            recall.add_metric([], figures.fact_recall)
            out.append(recall)
        golden = gauge(
            "memharness_golden_hit_ratio", "Top-K hit rate of the last golden run.", ["tenant"]
        )
        for tenant, (ratio, _, _) in sorted(figures.golden.items()):
            if ratio is not None:
                golden.add_metric([tenant], ratio)
        out.append(golden)
        if figures.index_points is not None:
            points = gauge("memharness_index_points", "Points in the live collection.", ["kind"])
            drift = gauge(
                "memharness_index_drift_ratio",
                "|points - PostgreSQL live rows| / max(1, rows), as of the last golden run.",
                ["kind"],
            )
            for kind, n in sorted(figures.index_points.items()):
                points.add_metric([kind], n)
            for kind, ratio in sorted(figures.drift().items()):
                drift.add_metric([kind], ratio)
            out += [points, drift]
        if figures.index_states is not None:
            missing = gauge(
                "memharness_index_missing_points",
                "Live rows the collection has no point for, as the owner last measured.",
                ["kind"],
            )
            degraded = gauge(
                "memharness_index_degraded",
                "1 while the collection is known to miss live rows (reads add keyword hits).",
                ["kind"],
            )
            for kind, state in sorted(figures.index_states.items()):
                missing.add_metric([kind], state.missing)
                degraded.add_metric([kind], 1.0 if state.degraded else 0.0)
            out += [missing, degraded]
        if figures.llm_usage is not None:
            # Read from the ledger's totals, which only grow: a counter that survives every
            # restart and counts every process's calls (each endpoint exports the same sums).
            tokens = CounterMetricFamily(
                "memharness_llm_tokens",
                "Tokens of LLM calls by kind (prompt, completion, cached: the part of prompt "
                "served from the provider's cache, reasoning: the part of completion), tenant "
                "and call.",
                labels=["kind", "tenant", "call"],
            )
            calls = CounterMetricFamily(
                "memharness_llm_calls", "LLM calls answered, by tenant and call.",
                labels=["tenant", "call"],
            )  # fmt: skip
            for row in figures.llm_usage:
                for kind, n in row.usage.by_kind().items():
                    tokens.add_metric([kind, row.tenant_id, row.call], n)
                calls.add_metric([row.tenant_id, row.call], row.usage.calls)
            out += [tokens, calls]
        if figures.redis_error is None:
            depth = gauge("memharness_queue_depth", "Messages waiting per Celery queue.", ["queue"])
            for queue, n in sorted(figures.queue_depth.items()):
                depth.add_metric([queue], n)
            out.append(depth)
        if figures.workers_up is not None:
            up = gauge("memharness_workers_up", "Workers answering a ping.")
            up.add_metric([], figures.workers_up)
            out.append(up)
        health = gauge(
            "memharness_health_up", "1 when a health component is healthy.", ["component"]
        )
        for component in report.components:
            health.add_metric([component.name], 1.0 if component.healthy else 0.0)
        out.append(health)
        yield from out


class _LocalFiles:
    """Every worker's files under ``root`` merged (``memharness metrics`` on a worker host)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def collect(self) -> Iterator[Any]:
        from prometheus_client.multiprocess import MultiProcessCollector

        files = sorted(str(p) for p in self.root.glob("*/*.db"))
        if files:
            yield from MultiProcessCollector.merge(files, accumulate=True)  # type: ignore[no-untyped-call]


def registry_for(
    settings: Settings, *, multiproc_dir: Path | None, ping_workers: bool = True
) -> tuple[Any, ScrapeCollector]:
    """A registry of the scrape-time gauges and this process's own metrics: from the
    multiprocess files of ``multiproc_dir`` when given, else from memory. The collector is
    returned too: close it when the registry is done with (it keeps a connection)."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry(auto_describe=False)
    if multiproc_dir is not None:
        MultiProcessCollector(registry, path=str(multiproc_dir))  # type: ignore[no-untyped-call]
    else:
        registry.register(metrics.local_collector())
    collector = ScrapeCollector(settings, ping_workers=ping_workers)
    registry.register(collector)
    return registry, collector


def snapshot_registry(
    settings: Settings, *, ping_workers: bool = True
) -> tuple[Any, ScrapeCollector]:
    """What ``memharness metrics`` prints: the scrape-time gauges and the metric files of
    this host's workers (when there are any)."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_LocalFiles(Path(settings.metrics_multiproc_dir)))
    collector = ScrapeCollector(settings, ping_workers=ping_workers)
    registry.register(collector)
    return registry, collector


def node_dir(settings: Settings, nodename: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", nodename) or "worker"
    return Path(settings.metrics_multiproc_dir).resolve() / safe


def use_multiprocess_dir(path: Path) -> None:
    """Switch this process (and the pool it will fork) to multiprocess files in ``path``,
    emptied first. Must run before any metric is created in the process."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True, exist_ok=True)
    os.environ[ENV_MULTIPROC] = str(path)
    import prometheus_client.values as values

    # The library picks its value class when it is first imported; a worker that imported
    # it before this signal (through a dependency) picks again now, before the pool forks.
    values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]
    metrics.reset()


_endpoint: dict[str, Any] = {}


@celeryd_init.connect
def _prepare_worker_metrics(sender: str | None = None, **_: object) -> None:
    settings = get_settings()
    if not settings.metrics_port:
        return
    path = node_dir(settings, str(sender or "worker"))
    use_multiprocess_dir(path)
    _endpoint["dir"] = path


@celeryd_after_setup.connect
def _start_worker_endpoint(sender: str | None = None, **_: object) -> None:
    settings = get_settings()
    if not settings.metrics_port or "dir" not in _endpoint:
        return
    from prometheus_client import start_http_server

    registry, _collector = registry_for(settings, multiproc_dir=_endpoint["dir"])
    try:
        server, _thread = start_http_server(
            settings.metrics_port, addr=settings.metrics_host, registry=registry
        )
    except OSError as exc:  # another worker has the port: this one runs without an endpoint
        log.warning("metrics endpoint not started on port %s: %s", settings.metrics_port, exc)
        return
    _endpoint["server"] = server
    log.info(
        "metrics of %s on http://%s:%s/metrics",
        sender,
        settings.metrics_host,
        settings.metrics_port,
    )


@worker_process_shutdown.connect
def _mark_pool_process_dead(pid: int | None = None, **_: object) -> None:
    if "dir" in _endpoint:  # inherited by the pool from the main process
        from prometheus_client import multiprocess

        try:
            multiprocess.mark_process_dead(pid or os.getpid())  # type: ignore[no-untyped-call]
        except OSError as exc:
            log.debug("metric files of %s not marked dead: %s", pid, exc)
