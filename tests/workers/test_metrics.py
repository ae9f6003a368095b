"""The metrics module and the operations' task bodies, in process against the real
PostgreSQL, Redis and an embedded store: the names of the contract are all exposed, the
hot-path calls move counters (and nothing when turned off), pool processes' values add up
through the multiprocess files, and a golden run stores its figures."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from config import Settings
from memharness.client import MemoryClient
from workers import metrics
from workers.clients import Clients
from workers.health.endpoint import registry_for
from workers.health.golden import count_points, run_golden_queries
from workers.index.completeness import measure_index
from workers.write.drain import drain_writes

# The names alert rules and the dashboard are written against (docs/monitoring.md).
CONTRACT = {
    "memharness_write_records_total", "memharness_write_funnel_total",
    "memharness_writes_per_interaction", "memharness_embedding_seconds",
    "memharness_drain_batch_size", "memharness_drain_seconds", "memharness_outbox_lag_seconds",
    "memharness_dead_letters", "memharness_golden_hit_ratio", "memharness_golden_runs_total",
    "memharness_rerank_rank_shift", "memharness_rerank_seconds",
    "memharness_vector_search_seconds", "memharness_context_budget_utilisation_ratio",
    "memharness_context_stage_seconds", "memharness_memories", "memharness_sweep_runs_total",
    "memharness_sweep_seconds", "memharness_fact_recall_ratio",
    "memharness_compression_rollbacks_total", "memharness_compression_resistant",
    "memharness_capacity_ratio", "memharness_queue_depth", "memharness_task_seconds",
    "memharness_task_failures_total", "memharness_workers_up", "memharness_index_points",
    "memharness_index_drift_ratio", "memharness_health_up", "memharness_index_missing_points",
    "memharness_index_degraded", "memharness_degraded_reads_total",
}  # fmt: skip


@pytest.fixture
def ctx(db, redis_client, qdrant_path, settings: Settings) -> Iterator[Clients]:  # type: ignore[no-untyped-def]
    context = Clients(settings)
    yield context
    context.close()


def exposed(registry) -> dict[str, list]:  # type: ignore[no-untyped-def,type-arg]
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, list] = {}  # type: ignore[type-arg]
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        name = family.name + ("_total" if family.type == "counter" else "")
        out[name] = family.samples
    return out


def test_every_name_of_the_contract_is_exposed(ctx, db, settings) -> None:  # type: ignore[no-untyped-def]
    # given a store with a memory, a sampled fact recall and a golden run that counted the index
    with MemoryClient(settings) as client:
        client.record("Decision: export invoices nightly as CSV (ADR-12).",
                      tenant_id="acme", task_id="t", session_id="s")  # fmt: skip
    drain_writes(ctx)
    db.execute(
        "INSERT INTO cognition_runs (run_id, kind, clock, stats) "
        "VALUES (gen_random_uuid(), 'quality', now(), '{\"fact_recall_mean\": 0.91}')"
    )
    run_golden_queries(ctx, "acme", search=lambda t, q, k: [], points=count_points(ctx))
    measure_index(ctx, "episodic")
    measure_index(ctx, "semantic")
    metrics.count_degraded_read("recall")
    metrics.count_rollbacks(1)
    metrics.observe_sweep("decay", 0.01)
    metrics.observe_task("memory.write.drain", "failed", 0.02)

    # when the registry a worker serves is collected
    registry, collector = registry_for(settings, multiproc_dir=None, ping_workers=True)
    try:
        names = exposed(registry)
    finally:
        collector.close()

    # then every contract name is there, with the figures just made
    assert CONTRACT - set(names) == set()
    recall = names["memharness_fact_recall_ratio"]
    assert recall[0].value == pytest.approx(0.91)
    golden = {s.labels["tenant"]: s.value for s in names["memharness_golden_hit_ratio"]}
    assert golden == {"acme": 0.0}
    points = {s.labels["kind"]: s.value for s in names["memharness_index_points"]}
    assert points == {"episodic": 1.0, "semantic": 0.0}
    drift = {s.labels["kind"]: s.value for s in names["memharness_index_drift_ratio"]}
    assert drift == {"episodic": 0.0, "semantic": 0.0}
    missing = {s.labels["kind"]: s.value for s in names["memharness_index_missing_points"]}
    assert missing == {"episodic": 0.0, "semantic": 0.0}
    degraded = {s.labels["kind"]: s.value for s in names["memharness_index_degraded"]}
    assert degraded == {"episodic": 0.0, "semantic": 0.0}
    memories = {
        (s.labels["level"], s.labels["status"]): s.value for s in names["memharness_memories"]
    }
    assert sum(memories.values()) == 1


def test_turned_off_the_hot_path_records_nothing() -> None:
    m = metrics.metrics()
    was = m.enabled
    try:
        metrics.set_enabled(True)
        before = m.write_records._value.get()
        metrics.count_records([type("R", (), {"status": "dropped"})()])
        assert m.write_records._value.get() == before + 1
        metrics.set_enabled(False)
        metrics.count_records([type("R", (), {"status": "accepted"})()])
        assert m.write_records._value.get() == before + 1
        assert metrics.recording() is False
    finally:
        metrics.set_enabled(was)


MULTIPROCESS_PROBE = """
import json, os, sys
from pathlib import Path
from workers.health.endpoint import use_multiprocess_dir
from workers import metrics
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

path = Path(sys.argv[1])
use_multiprocess_dir(path)
children = []
for n in range(2):
    pid = os.fork()
    if pid == 0:
        metrics.count_decision([])
        metrics.observe_task("memory.write.drain", "succeeded", 0.01 * (n + 1))
        os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
registry = CollectorRegistry()
MultiProcessCollector(registry, path=str(path))
out = {}
for family in registry.collect():
    for sample in family.samples:
        out[sample.name + json.dumps(sample.labels, sort_keys=True)] = sample.value
print(json.dumps(out))
"""


def test_the_pool_processes_values_add_up_in_the_main_process(tmp_path: Path) -> None:
    # given a process switched to multiprocess files, whose two forked children record
    done = subprocess.run(
        [sys.executable, "-c", MULTIPROCESS_PROBE, str(tmp_path / "m")],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    samples = json.loads(done.stdout.strip().splitlines()[-1])
    # then the parent reads both children's counts from the files
    assert samples['memharness_write_funnel_total{"stage": "tier2_decided"}'] == 2
    assert samples['memharness_task_seconds_count{"task": "memory.write.drain"}'] == 2


def test_a_golden_run_stores_hit_rate_latency_and_index_counts(ctx, db, settings) -> None:  # type: ignore[no-untyped-def]
    # given three stored memories of a tenant, drained into the embedded store
    with MemoryClient(settings) as client:
        for text in (
            "the ledger migration moved 40k invoices into partition ledger_2026",
            "Priya approved the canary rollout of webhook retries for eu-west",
            "we pinned grpcio to 1.62.2 because the arm64 wheel segfaulted",
        ):
            client.record(text, tenant_id="acme", task_id="t", session_id="s")
    drain_writes(ctx)
    from workers.read.search import search

    def recall(tenant: str, query: str, k: int) -> list[str]:
        return [h["id"] for h in search(ctx, tenant_id=tenant, query=query, task_id=None, limit=k)]

    # when the golden run's body runs with this process's search (it owns the store here)
    result = run_golden_queries(ctx, None, search=recall, points=count_points(ctx))

    # then it drew queries for the tenant, found every memory, and stored the run
    acme = result["tenants"]["acme"]
    assert acme["queries"] == 3
    assert acme["hit_ratio"] == 1.0
    assert result["index_points"] == {"episodic": 3, "semantic": 0}
    row = db.execute(
        "SELECT queries, hits, top_k, index_points, live_rows FROM golden_runs"
    ).fetchone()
    assert row == (3, 3, settings.golden_top_k, {"episodic": 3, "semantic": 0},
                   {"episodic": 3, "semantic": 0})  # fmt: skip


def test_the_metrics_and_golden_commands(db, redis_client, capsys) -> None:  # type: ignore[no-untyped-def]
    from memharness.cli import main

    # when an operator asks for a snapshot as JSON
    assert main(["metrics", "--json", "--no-ping"]) == 0
    samples = json.loads(capsys.readouterr().out)
    depth = {
        s["labels"]["queue"]: s["value"] for s in samples if s["name"] == "memharness_queue_depth"
    }
    # then the queues' depths are there, read from Redis
    assert depth["write"] == 0 and "recall" in depth
    # and a bad tenant is refused with the field named, exit 2
    assert main(["golden", "list", "--tenant", ""]) == 2
    assert "tenant_id" in capsys.readouterr().err
    assert main(["golden", "draw", "--tenant", "acme", "--count", "0"]) == 2
    assert "count" in capsys.readouterr().err
