"""Prometheus metrics of the project: the write, read and task paths record into these.

Recording is counters and histograms only, no I/O: in a prefork worker every pool process
writes its values into its own memory-mapped file (``PROMETHEUS_MULTIPROC_DIR``, which the
worker's main process sets before the pool forks, ``workers.health.endpoint``) and the main
process's endpoint sums the files at scrape time. In any other process (an agent with a
``MemoryClient``, the API server, a benchmark) the values live in the process.

Nothing is built at import: ``prometheus_client`` is imported, and the metrics created, on the
first recording call, so that an agent importing the client pays nothing and the worker can
choose the multiprocess mode first. ``set_enabled(False)`` (or
``MEMHARNESS_METRICS_ENABLED=false``) turns every recording call into a return.

The names are a contract with the alert rules and the dashboard (docs/monitoring.md).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prometheus_client.metrics import Counter, Gauge, Histogram
    from prometheus_client.registry import Collector

# Latency buckets from 1 ms to 10 s: a context() here takes ~5-30 ms (docs/benchmarks.md),
# an LLM call up to llm_timeout_s, a sweep step up to sweep_deadline_s (20 s).
SECONDS_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
# A drain claims up to write_batch_size (256) jobs; powers of two up to 1024.
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
# Mean absolute rank shift over a result list of up to 20-50 candidates.
RANK_SHIFT_BUCKETS = (0.0, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0)
RATIO_BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 1.0, 1.1)

FUNNEL_STAGES = ("tier1_dropped", "tier2_decided", "tier3_sent", "stored", "discarded", "dead")
CONTEXT_STAGES = ("rewrite", "recall", "rerank", "assemble", "window", "total")
SWEEP_KINDS = ("compress", "quality", "decay", "consolidate", "link")


class Metrics:
    """Every in-process metric, created once; labelled children bound ahead for hot paths."""

    def __init__(self, enabled: bool) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        self.enabled = enabled
        # registry=None: nothing goes into the library's global registry; ``collectors``
        # exposes these in a single process, the multiprocess files everywhere else.
        self.write_records: Counter = Counter(
            "memharness_write_records",
            "record() calls accepted by the client (tier-1 drops included).",
            registry=None,
        )
        self.write_funnel: Counter = Counter(
            "memharness_write_funnel",
            "Writes through the three-tier funnel, by stage.",
            ["stage"],
            registry=None,
        )
        self.funnel = {stage: self.write_funnel.labels(stage=stage) for stage in FUNNEL_STAGES}
        self.writes_per_interaction: Gauge = Gauge(
            "memharness_writes_per_interaction",
            "Records in the latest record_many() batch (one interaction's writes).",
            registry=None,
            multiprocess_mode="mostrecent",
        )
        self.embedding_seconds: Histogram = Histogram(
            "memharness_embedding_seconds",
            "Latency of one embedder call.",
            buckets=SECONDS_BUCKETS,
            registry=None,
        )
        self.drain_batch_size: Histogram = Histogram(
            "memharness_drain_batch_size",
            "Outbox jobs claimed per drain batch.",
            buckets=BATCH_BUCKETS,
            registry=None,
        )
        self.drain_seconds: Histogram = Histogram(
            "memharness_drain_seconds",
            "Duration of one drain batch (decide, summarise, embed, upsert, record).",
            buckets=SECONDS_BUCKETS,
            registry=None,
        )
        self.rerank_rank_shift: Histogram = Histogram(
            "memharness_rerank_rank_shift",
            "Mean absolute rank shift the rerank applied to the fused list, per context().",
            buckets=RANK_SHIFT_BUCKETS,
            registry=None,
        )
        self.rerank_seconds: Histogram = Histogram(
            "memharness_rerank_seconds",
            "Rerank latency (local and model stages, priority), per context().",
            buckets=SECONDS_BUCKETS,
            registry=None,
        )
        self.vector_search_seconds: Histogram = Histogram(
            "memharness_vector_search_seconds",
            "Latency of one batch of vector searches on the index.",
            buckets=SECONDS_BUCKETS,
            registry=None,
        )
        self.context_budget: Histogram = Histogram(
            "memharness_context_budget_utilisation_ratio",
            "Tokens used / budget per partition, per context().",
            ["partition"],
            buckets=RATIO_BUCKETS,
            registry=None,
        )
        self.context_stage: Histogram = Histogram(
            "memharness_context_stage_seconds",
            "context() latency by stage.",
            ["stage"],
            buckets=SECONDS_BUCKETS,
            registry=None,
        )
        self.stages = {stage: self.context_stage.labels(stage=stage) for stage in CONTEXT_STAGES}
        self.sweep_runs: Counter = Counter(
            "memharness_sweep_runs", "Sweep steps run, by kind.", ["kind"], registry=None
        )
        self.sweep_seconds: Histogram = Histogram(
            "memharness_sweep_seconds",
            "Duration of one sweep step, by kind.",
            ["kind"],
            buckets=SECONDS_BUCKETS,
            registry=None,
        )
        self.compression_rollbacks: Counter = Counter(
            "memharness_compression_rollbacks",
            "Summaries the quality sweep rolled back.",
            registry=None,
        )
        self.automatic_corrections: Counter = Counter(
            "memharness_automatic_corrections",
            "Automatic corrections by outcome: superseded (the older memory hidden), conflict "
            "(both kept and shown side by side), undone (a supersession reverted).",
            ["outcome"],
            registry=None,
        )
        self.task_seconds: Histogram = Histogram(
            "memharness_task_seconds",
            "Task run time by task name.",
            ["task"],
            buckets=SECONDS_BUCKETS,
            registry=None,
        )
        self.task_failures: Counter = Counter(
            "memharness_task_failures",
            "Task runs that failed or timed out, by task name.",
            ["task"],
            registry=None,
        )
        self.degraded_reads: Counter = Counter(
            "memharness_degraded_reads",
            "Reads answered while the episodic index was known to miss live rows (keyword "
            "hits added), by call.",
            ["call"],
            registry=None,
        )
        self.golden_runs: Counter = Counter(
            "memharness_golden_runs",
            "Golden-query runs by tenant and outcome (passed, failed, empty).",
            ["tenant", "outcome"],
            registry=None,
        )
        self._lock = threading.Lock()

    def all(self) -> tuple[Any, ...]:
        return tuple(v for v in vars(self).values() if hasattr(v, "collect"))


_metrics: Metrics | None = None
_build_lock = threading.Lock()


def _build() -> Metrics:
    global _metrics
    with _build_lock:
        if _metrics is None:
            from config import get_settings

            _metrics = Metrics(enabled=get_settings().metrics_enabled)
        return _metrics


def metrics() -> Metrics:
    """This process's metrics, built on first use."""
    return _metrics or _build()


def set_enabled(enabled: bool) -> None:
    """Turn recording on or off in this process (the benchmarks alternate the two)."""
    metrics().enabled = enabled


def reset() -> None:
    """Forget this process's metrics (after the multiprocess mode was switched on)."""
    global _metrics
    with _build_lock:
        _metrics = None


class _Local:
    """The in-process metrics as a collector, for a single-process registry."""

    def collect(self) -> Iterator[Any]:
        for metric in metrics().all():
            yield from metric.collect()


def local_collector() -> Collector:
    return _Local()


# -- recording calls: one per instrumented place -----------------------------------------------


def count_records(receipts: Iterable[Any], *, batch: bool = False) -> None:
    """Receipts of record() / record_many(): accepted calls and tier-1 drops."""
    m = _metrics or _build()
    if not m.enabled:
        return
    n = dropped = 0
    for receipt in receipts:
        if receipt is None:
            continue
        n += 1
        if receipt.status == "dropped":
            dropped += 1
    m.write_records.inc(n)
    if dropped:
        m.funnel["tier1_dropped"].inc(dropped)
    if batch:
        m.writes_per_interaction.set(n)


def count_decision(verdicts: Sequence[Any]) -> None:
    """One write decided at tier 2, and sent on to tier 3 when a verdict says so."""
    m = _metrics or _build()
    if not m.enabled:
        return
    m.funnel["tier2_decided"].inc()
    if any(getattr(v, "tier", 2) == 3 for v in verdicts):
        m.funnel["tier3_sent"].inc()


def count_drain(
    *, claimed: int, seconds: float, stored: int, discarded: int, dead: int
) -> None:  # fmt: skip
    m = _metrics or _build()
    if not m.enabled:
        return
    m.drain_batch_size.observe(claimed)
    m.drain_seconds.observe(seconds)
    if stored:
        m.funnel["stored"].inc(stored)
    if discarded:
        m.funnel["discarded"].inc(discarded)
    if dead:
        m.funnel["dead"].inc(dead)


def observe_embedding(seconds: float) -> None:
    m = _metrics or _build()
    if m.enabled:
        m.embedding_seconds.observe(seconds)


def observe_vector_search(seconds: float) -> None:
    m = _metrics or _build()
    if m.enabled:
        m.vector_search_seconds.observe(seconds)


def observe_context(
    stage_seconds: Mapping[str, float],
    utilisation: Mapping[str, float],
    rank_shift: float | None,
) -> None:
    """One context() call: its stage timings, partition utilisation and rerank shift."""
    m = _metrics or _build()
    if not m.enabled:
        return
    for stage, seconds in stage_seconds.items():
        child = m.stages.get(stage)
        if child is not None:
            child.observe(seconds)
    rerank = stage_seconds.get("rerank")
    if rerank is not None:
        m.rerank_seconds.observe(rerank)
    for partition, ratio in utilisation.items():
        m.context_budget.labels(partition=partition).observe(ratio)
    if rank_shift is not None:
        m.rerank_rank_shift.observe(rank_shift)


def observe_sweep(kind: str, seconds: float) -> None:
    m = _metrics or _build()
    if m.enabled:
        m.sweep_runs.labels(kind=kind).inc()
        m.sweep_seconds.labels(kind=kind).observe(seconds)


def count_rollbacks(n: int) -> None:
    m = _metrics or _build()
    if m.enabled and n:
        m.compression_rollbacks.inc(n)


CORRECTION_OUTCOMES = ("superseded", "conflict", "undone")


def count_automatic_corrections(outcome: str, n: int = 1) -> None:
    """Automatic corrections: ``outcome`` is one of :data:`CORRECTION_OUTCOMES`."""
    m = _metrics or _build()
    if m.enabled and n:
        m.automatic_corrections.labels(outcome=outcome).inc(n)


def observe_task(name: str, outcome: str, seconds: float) -> None:
    """A task run from the project decorator: its time, and a failure when it failed."""
    m = _metrics or _build()
    if not m.enabled:
        return
    m.task_seconds.labels(task=name).observe(seconds)
    if outcome in ("failed", "timed_out"):
        m.task_failures.labels(task=name).inc()


def count_degraded_read(call: str) -> None:
    """A recall() or context() answered over an index known to be short."""
    m = _metrics or _build()
    if m.enabled:
        m.degraded_reads.labels(call=call).inc()


def count_golden_run(tenant_id: str, outcome: str) -> None:
    m = _metrics or _build()
    if m.enabled:
        m.golden_runs.labels(tenant=tenant_id, outcome=outcome).inc()


def recording() -> bool:
    """Whether this process records (the read path skips its timings when not)."""
    return (_metrics or _build()).enabled
