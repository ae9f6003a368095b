"""``memharness bench write-path``: the synchronous write path against its floor.

Measured in one run, on a scratch database and a scratch Redis database:

(a) floor: a bare psycopg INSERT + COMMIT of the same payload into a table of the same shape,
    plus a bare Celery ``send_task`` of it, per operation;
(b) ``record()`` latency. (a) and (b) alternate operation by operation while a write worker
    runs, so both see the same machine noise;
(c) end-to-end ingest: ``--producers`` threads call ``record()`` as fast as they can while one
    worker process (prefork, concurrency 1, hashing embedder) drains; the rate counts from
    the first record to the last memory stored;
(d) a no-op task's throughput through one worker process of the same configuration: the
    tasks are queued first, then the rate counts from the first finished task to the last.

The last line of stdout is one JSON object.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import redis
from psycopg.types.json import Jsonb

from config import Settings
from memharness.bench.scratch import (
    AUTO,
    BusyRedisDatabase,
    RedisChoice,
    claim_redis_db,
    clear_redis,
    percentile,
    refuse,
    release_redis,
    scratch_settings,
    worker_env,
)
from memharness.client import MemoryClient
from memharness.processes import Managed, start_worker, wait_for_worker
from workers.app import get_app
from workers.db import drop_database, migrate
from workers.metrics import set_enabled
from workers.publish import publish
from workers.queues import TaskName
from workers.tasking import METRICS_KEY

FLOOR_TABLE = """
CREATE TABLE IF NOT EXISTS bench_floor (
    id uuid PRIMARY KEY, tenant_id text NOT NULL, task_id text NOT NULL,
    session_id text NOT NULL, ts timestamptz NOT NULL, content text NOT NULL,
    metadata jsonb NOT NULL DEFAULT '{}'
)
"""
CONTENTS = [
    "We decided to keep money as integer cents in amount_cents because floats lost a cent (#{n}).",
    "Status: ATL-{n} (payment webhooks) is now in review; waiting on Priya.",
    "Constraint: the public API must answer within 200 ms at p99 (ticket ATL-{n}).",
    "I ran scripts/migrate_ledger.py against staging; {n} rows moved in 14 minutes.",
    "I prefer short status updates; be detailed only for architecture decisions #{n}.",
]


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def floor_write_ms(
    conn: psycopg.Connection[Any], app: Any, tenant: str, content: str, now: datetime
) -> float:
    """One floor write in ms: a bare INSERT + COMMIT of ``content`` into ``bench_floor``
    (``FLOOR_TABLE``, created by the caller) and a bare ``send_task`` of it."""
    started = time.perf_counter()
    with conn.transaction():
        conn.execute(
            "INSERT INTO bench_floor (id, tenant_id, task_id, session_id, ts, content, "
            "metadata) VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (uuid.uuid4(), tenant, "t", "s", now, content, Jsonb({})),
        )
    # The floor is a bare send_task by definition (not the project's publish()).
    app.send_task(TaskName.NOOP.value, args=[content], queue="bench-floor")
    return (time.perf_counter() - started) * 1000


def _measure_latency(
    settings: Settings, client: MemoryClient, samples: int
) -> tuple[list[float], list[float], list[float]]:
    app = get_app(settings)
    floor_ms: list[float] = []
    record_ms: list[float] = []
    record_off_ms: list[float] = []
    tenant = f"lat-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        conn.execute(FLOOR_TABLE)
        for i in range(samples + 200):
            content = CONTENTS[i % len(CONTENTS)].format(n=i)
            now = datetime.now(UTC)
            # (a) the floor: what any durable, queued write has to pay at least
            floor = floor_write_ms(conn, app, tenant, content, now)
            # (b) record(): validation, tier-1 rules, memory + outbox row, publish; once with
            # metrics on and once off (another write: the same text is a duplicate), in
            # alternating order (metrics_overhead_record_p50)
            timed: dict[bool, float] = {}
            for enabled in (True, False) if i % 2 == 0 else (False, True):
                set_enabled(enabled)
                text = content if enabled else f"{content} (again)"
                started = time.perf_counter()
                client.record(text, tenant_id=tenant, task_id="t", session_id="s", timestamp=now)
                timed[enabled] = (time.perf_counter() - started) * 1000
            set_enabled(True)
            if i >= 200:  # the first 200 warm the pools, prepared statements and caches
                floor_ms.append(floor)
                record_ms.append(timed[True])
                record_off_ms.append(timed[False])
    return floor_ms, record_ms, record_off_ms


def _wait_all_settled(settings: Settings, tenant: str, total: int, timeout_s: float) -> datetime:
    deadline = time.monotonic() + timeout_s
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT count(*) FILTER (WHERE status <> 'pending'), max(updated_at) "
                "FROM memories WHERE tenant_id = %s",
                (tenant,),
            ).fetchone()
            assert row is not None
            if int(row[0]) >= total:
                last: datetime = row[1]
                return last
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {row[0]} of {total} settled after {timeout_s}s")
            time.sleep(0.02)


def _measure_ingest(settings: Settings, records: int, producers: int) -> dict[str, float]:
    tenant = f"ingest-{uuid.uuid4().hex[:8]}"
    per_producer = records // producers
    total = per_producer * producers
    start_gate = threading.Barrier(producers + 1)
    errors: list[BaseException] = []

    def produce(worker_index: int) -> None:
        try:
            with MemoryClient(settings) as client:
                start_gate.wait()
                for i in range(per_producer):
                    content = CONTENTS[i % len(CONTENTS)].format(n=f"{worker_index}-{i}")
                    client.record(
                        content, tenant_id=tenant, task_id="ingest", session_id=f"p{worker_index}"
                    )
        except BaseException as exc:
            errors.append(exc)
            raise

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(producers)]
    for thread in threads:
        thread.start()
    start_gate.wait()
    first = datetime.now(UTC)
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    produced_s = time.perf_counter() - started
    if errors:
        raise errors[0]
    last = _wait_all_settled(settings, tenant, total, timeout_s=600)
    elapsed_s = (last - first).total_seconds()
    return {
        "ingest_records": total,
        "ingest_per_s": total / elapsed_s,
        "ingest_seconds": elapsed_s,
        "produce_per_s": total / produced_s,
    }


def _measure_noop(
    settings: Settings, env: dict[str, str], tasks: int, log_dir: Path
) -> dict[str, float]:
    app = get_app(settings)
    client = redis.Redis.from_url(settings.redis_url)
    key = METRICS_KEY.format(name=TaskName.NOOP.value)
    client.delete(key)
    for _ in range(tasks):
        publish(TaskName.NOOP, app=app)
    worker = start_worker("bench-noop", ["maintenance"], env=env, log_dir=log_dir)
    try:
        wait_for_worker(worker)
        first: float | None = None
        deadline = time.monotonic() + 600
        while True:
            done = int(client.hget(key, "succeeded") or 0)
            now = time.perf_counter()
            if first is None and done >= 1:
                first, first_done = now, done
            if done >= tasks:
                assert first is not None
                return {
                    "noop_tasks": tasks,
                    "noop_tasks_per_s": (done - first_done) / (now - first),
                }
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {done} of {tasks} no-op tasks ran")
            time.sleep(0.005)
    finally:
        worker.stop()
        client.close()


def run(
    base: Settings, *, records: int = 5000, noop_tasks: int = 5000, producers: int = 4,
    latency_samples: int = 2000, redis_db: RedisChoice = AUTO,
) -> int:  # fmt: skip
    try:
        number = claim_redis_db(base.redis_url, redis_db)
    except BusyRedisDatabase as exc:
        return refuse(exc)
    tmp = Path(tempfile.mkdtemp(prefix="memharness-bench-"))
    settings = scratch_settings(
        base, db_suffix="bench", qdrant_path=tmp / "qdrant", redis_db=number
    )
    env = worker_env(settings)
    log_dir = tmp / "logs"
    drop_database(settings.database_url)
    migrate(settings.database_url)
    clear_redis(settings, claimed=number is not None)
    worker: Managed | None = None
    result: dict[str, Any] = {"benchmark": "write-path", "cpus": os.cpu_count()}
    try:
        worker = start_worker(
            "bench-writer", ["write", "embed", "recall"], env=env, log_dir=log_dir
        )
        wait_for_worker(worker)
        _log(f"latency: {latency_samples} alternating floor / record() operations")
        with MemoryClient(settings) as client:
            floor_ms, record_ms, record_off_ms = _measure_latency(settings, client, latency_samples)
        result |= {
            "record_p50_ms": round(statistics.median(record_ms), 3),
            "record_p99_ms": round(percentile(record_ms, 0.99), 3),
            "floor_p50_ms": round(statistics.median(floor_ms), 3),
            "floor_p99_ms": round(percentile(floor_ms, 0.99), 3),
        }
        result["record_to_floor_p50"] = round(result["record_p50_ms"] / result["floor_p50_ms"], 3)
        result["record_metrics_off_p50_ms"] = round(statistics.median(record_off_ms), 3)
        result["metrics_overhead_record_p50"] = round(
            statistics.median(record_ms) / statistics.median(record_off_ms), 3
        )
        _log(f"ingest: {records} records from {producers} producer threads, one worker")
        ingest = _measure_ingest(settings, records, producers)
        result |= {k: round(v, 1) for k, v in ingest.items()}
        worker.stop()
        worker = None
        _log(f"no-op: {noop_tasks} tasks through one worker process")
        result |= {
            k: round(v, 1) for k, v in _measure_noop(settings, env, noop_tasks, log_dir).items()
        }
        result["ingest_to_noop"] = round(result["ingest_per_s"] / result["noop_tasks_per_s"], 3)
        result["targets"] = {
            "record_to_floor_p50": "<= 1.3",
            "record_p99_ms": "<= 5",
            "ingest_per_s": ">= 1000",
            "ingest_to_noop": ">= 1.0",
            "metrics_overhead_record_p50": "<= 1.05",
        }
    finally:
        if worker is not None:
            worker.stop()
        release_redis(settings)
        drop_database(settings.database_url)
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(result))
    return 0
