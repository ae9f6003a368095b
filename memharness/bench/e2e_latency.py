"""``MemoryClient.context()`` end to end, as an agent feels it: from this process through the
``recall`` queue to a real store-owner worker process (Celery, prefork, concurrency 1, its
read slot) and back through the result backend.

Three phases on a store the caller has built and closed (``retrieval_latency.measure``):

- idle: the owner does nothing else;
- under writes: another process records memories at ``WRITES_PER_S`` (``MemoryClient.record``:
  PostgreSQL, the drain flag, the owner's drains, embeddings, upserts and link passes);
- during a rebuild: the owner rebuilds the episodic index (next generation copied, its
  graph built, verified, alias switched) while the calls go on; a call that fails or
  comes back without retrieved memories counts as a failure.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

from config import Settings
from memharness.bench.scratch import percentile, worker_env
from memharness.processes import start_worker, wait_for_worker
from pipelines.read.budget import Partition
from pipelines.records import TaskPhase
from workers.read.ask import last_trace

# The write load: an agent fleet recording 200 interactions a second.
WRITES_PER_S = 200
# The writer runs this long before the timed calls start, so the owner is in its steady
# state of drains and link passes, not at the first batch.
WRITES_SETTLE_S = 2.0
# The stages of one call (workers.read.ask.last_trace) and what the trace leaves out.
STAGES = ("client_encode", "publish", "pickup", "engine", "reply_encode", "reply_wake",
          "client_decode", "client_rest")  # fmt: skip


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Query:
    tenant_id: str
    task_id: str
    text: str
    phase: str | None


def queries_for(
    n: int, seed: int, tenants: int, tasks: int, questions: Sequence[str], subjects: Sequence[str]
) -> list[Query]:
    rng = random.Random(seed)
    phases: list[TaskPhase | None] = [None, *TaskPhase]
    out = []
    for _ in range(n):
        phase = rng.choice(phases)
        out.append(
            Query(
                tenant_id=f"tenant-{rng.randrange(tenants)}",
                task_id=f"task-{rng.randrange(tasks)}",
                text=rng.choice(questions).format(s=rng.choice(subjects)),
                phase=phase.value if phase else None,
            )
        )
    return out


def stream_writes(
    env: dict[str, str], rate_per_s: float, tenants: int, tasks: int,
    stop: Event, written: Synchronized[int],
) -> None:  # fmt: skip
    """The writer process: ``record()`` at ``rate_per_s`` until ``stop``, paced by the clock
    (a late record is sent at once, never skipped)."""
    os.environ.update(env)
    from memharness import MemoryClient

    rng = random.Random(os.getpid())
    with MemoryClient(Settings()) as client:
        started = time.monotonic()
        i = 0
        while not stop.is_set():
            due = started + i / rate_per_s
            pause = due - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            tenant, task = rng.randrange(tenants), rng.randrange(tasks)
            client.record(
                f"Status: stream note {i} of writer {os.getpid()}: the ledger export for "
                f"task {task} moved to review after the load test (ticket W-{i}).",
                tenant_id=f"tenant-{tenant}",
                task_id=f"task-{task}",
                session_id=f"stream-{tenant}",
            )
            i += 1
            with written.get_lock():
                written.value = i


def _wait_drained(settings: Settings, timeout_s: float = 600.0) -> float:
    """Seconds until no memory is pending any more."""
    import psycopg

    started = time.monotonic()
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        while time.monotonic() - started < timeout_s:
            row = conn.execute("SELECT count(*) FROM memories WHERE status = 'pending'")
            if row.fetchone() == (0,):
                break
            time.sleep(0.1)
    return round(time.monotonic() - started, 2)


class Agent:
    """Calls ``context()`` through the owner and times each call."""

    def __init__(self, client: Any, budget_tokens: int, warmup: int) -> None:
        self.client = client
        self.stages: list[dict[str, float]] = []
        self.budget_tokens = budget_tokens
        # Calls before the timed ones of each phase: caches and the result subscription warm.
        self.warmup = warmup

    def call(self, query: Query) -> tuple[float, int]:
        """(milliseconds, retrieved memories) of one call; its stages go to ``stages``."""
        t0 = time.perf_counter()
        context = self.client.context(
            query.task_id, query.text, self.budget_tokens, query.phase,
            tenant_id=query.tenant_id,
        )  # fmt: skip
        elapsed = (time.perf_counter() - t0) * 1000
        trace = last_trace()
        if trace is not None:
            # What the trace leaves out: the call's checks before the ask and the context's
            # model validation after it, in this process.
            self.stages.append({**trace, "client_rest": elapsed - sum(trace.values())})
        return elapsed, len(context.partition(Partition.RETRIEVED_MEMORY).items)

    def timed(self, calls: Sequence[Query], until: Callable[[], bool] | None = None) -> list[float]:
        for query in calls[: self.warmup]:
            self.call(query)
        self.stages = []
        out = []
        for query in calls[self.warmup :]:
            if until is not None and until():
                break
            out.append(self.call(query)[0])
        return out


def stage_p50s(stages: Sequence[dict[str, float]]) -> dict[str, float]:
    """The median of each stage over the calls, in the order a call goes through them."""
    names = [name for name in STAGES if any(name in s for s in stages)]
    return {
        name: round(statistics.median(s[name] for s in stages if name in s), 3) for name in names
    }


def _summary(
    prefix: str, latencies: Sequence[float], stages: Sequence[dict[str, float]] = ()
) -> dict[str, Any]:
    if not latencies:
        return {f"{prefix}_calls": 0}
    out: dict[str, Any] = {
        f"{prefix}_calls": len(latencies),
        f"{prefix}_p50_ms": round(statistics.median(latencies), 2),
        f"{prefix}_p95_ms": round(percentile(latencies, 0.95), 2),
        f"{prefix}_p99_ms": round(percentile(latencies, 0.99), 2),
    }
    if stages:
        out[f"{prefix}_stages_ms"] = stage_p50s(stages)
    return out


def measure_e2e(
    settings: Settings,
    calls: Sequence[Query],
    *,
    tenants: int,
    tasks: int,
    budget_tokens: int,
    warmup: int,
    log_dir: Path,
    under_writes: bool = True,
    during_rebuild: bool = True,
) -> dict[str, Any]:
    """The three phases against an owner worker started on ``settings``' store."""
    from memharness import MemoryClient
    from workers.app import get_app
    from workers.publish import publish
    from workers.queues import IndexJob

    env = worker_env(settings)
    result: dict[str, Any] = {}
    owner = start_worker("latency-bench-owner", ["write", "embed", "recall"], env=env,
                         log_dir=log_dir)  # fmt: skip
    try:
        wait_for_worker(owner, timeout_s=120)
        with MemoryClient(settings) as client:
            agent = Agent(client, budget_tokens, warmup)
            _log("  e2e: idle owner")
            result |= _summary("e2e", agent.timed(calls), agent.stages)
            result["e2e_read_transport"] = settings.read_transport

            if under_writes:
                ctx = multiprocessing.get_context("spawn")
                stop = ctx.Event()
                written = ctx.Value("i", 0)
                writer = ctx.Process(
                    target=stream_writes,
                    args=(env, WRITES_PER_S, tenants, tasks, stop, written),
                    daemon=True,
                )
                writer.start()
                try:
                    time.sleep(WRITES_SETTLE_S)
                    _log(f"  e2e: {WRITES_PER_S} writes/s from another process")
                    before, t0 = written.value, time.monotonic()
                    latencies = agent.timed(calls)
                    rate = (written.value - before) / (time.monotonic() - t0)
                finally:
                    stop.set()
                    writer.join(timeout=30)
                result |= _summary("e2e_under_writes", latencies, agent.stages)
                result["e2e_under_writes_records_per_s"] = round(rate, 1)
                # The owner drains what the writer left before the next phase starts.
                result["e2e_under_writes_backlog_s"] = _wait_drained(settings)

            if during_rebuild:
                _log("  e2e: during a rebuild of the episodic index")
                rebuild = publish(IndexJob.REBUILD.task(settings), app=get_app(settings),
                                  kind="episodic")  # fmt: skip
                started = time.monotonic()
                while rebuild.state == "PENDING" and time.monotonic() - started < 60:
                    time.sleep(0.01)
                latencies, failures = [], 0
                agent.stages = []
                # The calls again and again until the rebuild is done.
                for query in itertools.cycle(calls):
                    if rebuild.ready():
                        break
                    try:
                        elapsed, retrieved = agent.call(query)
                    except Exception as exc:  # a failed answer is what this phase counts
                        _log(f"  context() failed during the rebuild: {exc!r}")
                        failures += 1
                        continue
                    if retrieved == 0:
                        failures += 1
                    latencies.append(elapsed)
                report = rebuild.get(timeout=3600)
                result |= _summary("e2e_during_rebuild", latencies, agent.stages)
                result["e2e_failures_during_rebuild"] = failures
                result["e2e_rebuild_s"] = round(float(report["seconds"]), 2)
                result["e2e_rebuild_phases_s"] = {
                    k: round(float(v), 2) for k, v in report.get("phases_s", {}).items()
                }
    finally:
        owner.stop(timeout_s=30)
    return result
