"""Real worker processes serve their metrics over HTTP, and the numbers move with the work:
a write raises the funnel counters of the worker that drained it, a context() its stage
timings, and a killed worker shows as a queue filling up and one worker fewer answering."""

from __future__ import annotations

import socket
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from workers.publish import publish
from workers.queues import TaskName

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the endpoint: (name, sorted labels) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(samples: dict, name: str, **labels: str) -> float:  # type: ignore[type-arg]
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def wait_scrape(port: int, timeout_s: float = 20.0) -> dict:  # type: ignore[type-arg]
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return scrape(port)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def metrics_env(tmp_path: Path, port: int) -> dict[str, str]:
    return {
        "MEMHARNESS_METRICS_PORT": str(port),
        "MEMHARNESS_METRICS_MULTIPROC_DIR": str(tmp_path / "metrics"),
        "MEMHARNESS_METRICS_SCRAPE_TIMEOUT_S": "2",
    }


def test_a_write_and_a_context_move_the_owner_workers_metrics(client, workers, tmp_path):  # type: ignore[no-untyped-def]
    # given the store's owner serving its pool's metrics on a port of its own
    port = free_port()
    workers("owner", env=metrics_env(tmp_path, port))
    before = wait_scrape(port)
    assert value(before, "memharness_write_funnel_total", stage="stored") == 0

    # when an agent writes four interactions (one is small talk, dropped at tier 1 in the
    # agent's own process) and asks for a context
    receipts = client.record_many(
        [
            {"content": f"Decision: ship the billing export v{n} behind flag EXP-{n}.",
             "tenant_id": "acme", "task_id": "t1", "session_id": "s1"}
            for n in range(3)
        ]
        + [{"content": "ok thanks", "tenant_id": "acme", "task_id": "t1", "session_id": "s1"}]
    )  # fmt: skip
    accepted = [r.memory_id for r in receipts if r.status == "accepted"]
    assert len(accepted) == 3
    client.wait_until_settled(accepted, timeout_s=60)
    client.context("t1", "what did we decide about the billing export?", 8000, tenant_id="acme")

    # then the worker's endpoint shows the funnel, the drain, the embedder and the context
    after = scrape(port)
    assert value(after, "memharness_write_funnel_total", stage="tier2_decided") >= 3
    stored = value(after, "memharness_write_funnel_total", stage="stored")
    discarded = value(after, "memharness_write_funnel_total", stage="discarded")
    assert stored + discarded == 3
    assert value(after, "memharness_drain_batch_size_count") >= 1
    assert value(after, "memharness_drain_batch_size_sum") >= 3
    assert value(after, "memharness_embedding_seconds_count") >= 1
    assert value(after, "memharness_task_seconds_count", task="memory.write.drain") >= 1
    assert value(after, "memharness_context_stage_seconds_count", stage="total") == 1
    assert value(after, "memharness_context_stage_seconds_count", stage="rerank") == 1
    assert value(after, "memharness_vector_search_seconds_count") >= 1
    assert value(after, "memharness_rerank_rank_shift_count") == 1
    assert (
        value(
            after,
            "memharness_context_budget_utilisation_ratio_count",
            partition="retrieved_memory",
        )
        == 1
    )
    # and the scrape-time gauges read PostgreSQL: the memories by level and status
    assert value(after, "memharness_memories", level="0", status="stored") == stored
    assert value(after, "memharness_outbox_lag_seconds", kind="write") == 0
    assert value(after, "memharness_health_up", component="storage") == 1
    # and the agent's process counted its own calls, the tier-1 drop among them
    from workers.metrics import metrics

    m = metrics()
    assert m.write_records._value.get() >= 4
    assert m.funnel["tier1_dropped"]._value.get() >= 1


def test_a_killed_worker_shows_as_queue_depth_and_one_worker_fewer(client, workers, tmp_path):  # type: ignore[no-untyped-def]
    # given the owner with an endpoint, and a maintenance worker
    port = free_port()
    workers("owner", env=metrics_env(tmp_path, port))
    maintenance = workers("maintenance", queues=("maintenance",))
    up = wait_scrape(port)
    assert value(up, "memharness_workers_up") == 2
    assert value(up, "memharness_queue_depth", queue="maintenance") == 0

    # when the maintenance worker is killed and its queue keeps receiving tasks
    maintenance.kill()
    maintenance.proc.wait(timeout=10)
    for _ in range(25):
        publish(TaskName.NOOP)

    # then the scrape shows the messages piling up and one worker answering (the ping waits
    # 0.5 s for replies: on a loaded machine one scrape may miss the live worker's, so the
    # gauge is read until it settles; the dead worker must never count)
    deadline = time.monotonic() + 15
    while True:
        down = scrape(port)
        answering = value(down, "memharness_workers_up")
        assert answering <= 1
        if answering == 1 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert value(down, "memharness_queue_depth", queue="maintenance") >= 25
    assert answering == 1
