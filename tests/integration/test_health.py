"""Golden queries catch a broken index: points deleted behind the system's back (the store
opened by this test while its owner is stopped) make the next run's hit rate drop, and
``memharness health`` exit non-zero."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import httpx
import pytest

from tests.integration.test_http_api import spawn_server, stop_server
from workers.adapters import build_vector_index
from workers.index.targets import EPISODIC, LOCK_KEY, alias_name
from workers.publish import publish
from workers.queues import TaskName

pytestmark = pytest.mark.integration

TOPICS = [
    "the ledger migration moved {n} rows of invoices into partition ledger_{n}",
    "Priya approved the canary rollout of webhook retries for region eu-{n}",
    # one pin per runner: the same pin at five versions would be a chain of corrections
    "we pinned grpcio to version 1.{n}.2 on runner arm-{n} because the arm64 wheel segfaulted",
    "the nightly backup of tenant bucket archive-{n} now runs at 02:{n:02d} UTC",
    "Dana prefers terse standups; decision record ADR-{n} covers the queue split",
]


def memories(n: int) -> list[dict[str, str]]:
    return [
        {"content": TOPICS[i % len(TOPICS)].format(n=i + 10), "tenant_id": "acme",
         "task_id": f"task-{i % 3}", "session_id": "s1"}
        for i in range(n)
    ]  # fmt: skip


def run_golden(settings) -> dict:  # type: ignore[no-untyped-def,type-arg]
    from workers.app import get_app

    result = publish(TaskName.GOLDEN_QUERIES, app=get_app(settings), tenant_id="acme")
    answer: dict = result.get(timeout=60)  # type: ignore[type-arg]
    return answer


def health(*extra: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    done = subprocess.run(
        [sys.executable, "-m", "memharness.cli", "health", "--json", *extra],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def test_golden_queries_catch_points_deleted_behind_the_systems_back(
    client, workers, settings, db, redis_client, tmp_path
):  # type: ignore[no-untyped-def]
    # given 25 stored memories, an owner and a quality worker, and golden queries drawn
    owner = workers("owner")
    workers("quality", queues=("quality",))
    receipts = client.record_many(memories(25))
    ids = [r.memory_id for r in receipts if r.status == "accepted"]
    assert client.wait_until_settled(ids, timeout_s=60) == {"stored": len(ids)}
    healthy = run_golden(settings)["tenants"]["acme"]
    assert healthy["queries"] >= 10
    assert healthy["hit_ratio"] >= 0.8
    code, report = health()
    assert report["components"]["retrieval"]["healthy"], report
    assert report["components"]["storage"]["healthy"], report
    assert code == 0, report

    # when the owner stops, this test opens the store and deletes most points, and the
    # owner starts again while another maintenance job holds the collection (the owner's
    # restore of the missing points waits for it)
    lock = LOCK_KEY.format(alias=alias_name(settings, EPISODIC))
    redis_client.set(lock, "another-job", ex=300)
    owner.stop()
    index = build_vector_index(settings)
    try:
        physical = index.resolve(alias_name(settings, EPISODIC))
        assert physical is not None
        doomed = [uuid.UUID(str(i)) for i in ids[: int(len(ids) * 0.7)]]
        index.delete(physical, doomed)
        assert index.count(physical) == len(ids) - len(doomed)
    finally:
        index.close()
    restarted = workers("owner")

    # then the next golden run misses the deleted memories, and health fails
    broken = run_golden(settings)["tenants"]["acme"]
    assert broken["hit_ratio"] < 0.8, broken
    assert broken["misses"]
    code, report = health()
    assert code == 1
    assert not report["healthy"]
    assert not report["components"]["retrieval"]["healthy"]
    drift = {c["name"]: c for c in report["components"]["storage"]["checks"]}
    assert not drift["index_drift_episodic"]["ok"], drift
    # and the stored run is what the metrics read
    row = db.execute(
        "SELECT hit_ratio FROM golden_runs WHERE tenant_id = 'acme' ORDER BY ran_at DESC LIMIT 1"
    ).fetchone()
    assert row[0] == pytest.approx(broken["hit_ratio"])
    # and the API: /readyz says the process can serve (quality is not reachability),
    # /metrics carries the hit rate the alerts fire on
    server = spawn_server(tmp_path, "api", {"MEMHARNESS_API_METRICS_KEY": "scrape-token"})
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{server.url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, server.log_text()
            time.sleep(0.2)
        ready = httpx.get(f"{server.url}/readyz", timeout=30)
        assert ready.status_code == 200, ready.text
        assert ready.json() == {
            "status": "ready", "postgres": "ok", "redis": "ok", "store_owner": "ok"
        }  # fmt: skip
        scraped = httpx.get(
            f"{server.url}/metrics", headers={"Authorization": "Bearer scrape-token"}, timeout=30
        ).text
        line = next(x for x in scraped.splitlines() if x.startswith("memharness_golden_hit_ratio{"))
        assert float(line.split()[-1]) == pytest.approx(broken["hit_ratio"], abs=1e-6)
        # and the owner's measurement at its start: the collection is known short
        assert 'memharness_index_degraded{kind="episodic"} 1.0' in scraped
    finally:
        stop_server(server)

    # when the other job releases the collection, then the owner's restore makes it whole
    # and the golden queries pass again
    redis_client.delete(lock)
    deadline = time.monotonic() + 60
    while run_golden(settings)["tenants"]["acme"]["hit_ratio"] < 0.8:
        assert time.monotonic() < deadline, restarted.log_tail(40)
        time.sleep(1)


def test_golden_queries_set_by_the_user_are_checked(client, db):  # type: ignore[no-untyped-def]
    from pipelines.errors import InvalidInput, NotFound

    receipt = client.record(
        "Decision: the search API keeps cursor pagination (ADR-77).",
        tenant_id="acme", task_id="t", session_id="s",
    )  # fmt: skip
    assert (
        client.set_golden_queries(
            "acme", [{"query": "search API pagination", "expected_id": str(receipt.memory_id)}]
        )
        == 1
    )
    with pytest.raises(NotFound) as unknown:
        client.set_golden_queries("other", [("search API", str(receipt.memory_id))])
    assert unknown.value.field == "expected_id"
    with pytest.raises(InvalidInput) as bad:
        client.set_golden_queries("acme", [{"query": "", "expected_id": str(receipt.memory_id)}])
    assert bad.value.field == "queries[0].query"
    rows = db.execute("SELECT tenant_id, source FROM golden_queries").fetchall()
    assert rows == [("acme", "user")]
