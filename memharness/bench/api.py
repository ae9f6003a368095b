"""``memharness bench api``: the HTTP API against the in-process client, in one run.

On a scratch database and an empty Redis database of its own, with one real worker process
(write, embed, recall: the store's owner) and one real ``memharness serve`` process on a
spare port:

(a) record latency: the floor (a bare INSERT + COMMIT + ``send_task``, as in ``bench
    write-path``), in-process ``MemoryClient.record()`` and ``POST /v1/memories`` call by
    call in ABBA order (so all see the same machine noise); the HTTP client is the standard
    library's keep-alive ``http.client`` (the cheapest Python client: what is measured is the
    server). ``http_record_to_inproc_p50`` is the ratio of the medians,
    ``http_record_to_floor_p99`` the ratio of the HTTP p99 to the floor's;
(b) throughput: 8 client threads, each on its own connection (or its own ``MemoryClient``),
    record as fast as they can, in process and over HTTP in ABBA rounds;
    ``http_to_inproc_records_8`` is the ratio of the two rates;
(c) context over HTTP (skipped with ``--memories 0``): the store is filled to ``--memories``
    through ``record_many`` and drained by the worker, then ``POST /v1/context`` is timed
    (embedded mode: the server asks the owner worker through the ``recall`` queue, as
    ``MemoryClient.context`` does).

The key's rate limit stays on (at a rate no run reaches) so every request pays what the
limiter costs. Progress goes to stderr; the last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
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

from config import Settings, get_settings
from memharness.bench.scratch import (
    AUTO,
    BusyRedisDatabase,
    RedisChoice,
    add_redis_argument,
    claim_redis_db,
    clear_redis,
    percentile,
    refuse,
    release_redis,
    scratch_settings,
    worker_env,
)
from memharness.bench.write_path import FLOOR_TABLE, floor_write_ms
from memharness.client import MemoryClient
from memharness.processes import start_worker, wait_for_worker
from workers.db import drop_database, migrate
from workers.queues import CeleryQueue

# At most (``<=``) or at least (``>=``, the ones in AT_LEAST) these, in the same run.
TARGETS = {
    "http_record_p50_ms": 3.0,
    "http_record_to_inproc_p50": 2.5,
    "http_record_to_floor_p99": 1.5,
    "records_per_s_8": 1000,
    "http_to_inproc_records_8": 0.9,
}
AT_LEAST = frozenset({"records_per_s_8", "http_to_inproc_records_8"})
CLIENTS = 8
CONTENTS = [
    "We decided to keep money as integer cents because floats lost a cent (#{n}).",
    "Status: ATL-{n} (payment webhooks) is now in review; waiting on Priya.",
    "Constraint: the public API must answer within 200 ms at p99 (ticket ATL-{n}).",
    "I ran the ledger migration against staging; {n} rows moved in 14 minutes.",
    "I prefer short status updates; be detailed only for architecture decisions #{n}.",
]
QUESTIONS = ["How do we store money?", "What is ATL-7 waiting on?", "What is the p99 budget?",
             "How long did the migration take?", "How should status updates look?"]  # fmt: skip


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _spare_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Api:
    """A keep-alive connection to the server with the bench's key."""

    def __init__(self, port: int, key: str) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    def post(self, path: str, payload: Any) -> tuple[int, Any]:
        self.connection.request("POST", path, json.dumps(payload), self.headers)
        response = self.connection.getresponse()
        return response.status, json.loads(response.read())

    def close(self) -> None:
        self.connection.close()


def _serve(
    env: dict[str, str], port: int, log_dir: Path, processes: int
) -> subprocess.Popen[bytes]:
    log_dir.mkdir(parents=True, exist_ok=True)
    with (log_dir / "api.log").open("ab") as handle:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "memharness.cli",
                "serve",
                "--port",
                str(port),
                "--workers",
                str(processes),
            ],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            start_new_session=True,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError((log_dir / "api.log").read_text()[-2000:])
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        try:
            connection.request("GET", "/readyz")
            if connection.getresponse().status == 200:
                return proc
        except OSError:
            pass
        finally:
            connection.close()
        time.sleep(0.2)
    raise TimeoutError("the API server did not become ready")


def measure_record(
    settings: Settings, client: MemoryClient, api: Api, samples: int, warmup: int
) -> dict[str, float]:
    """The floor (``write_path.floor_write_ms``), in-process ``record()`` and
    ``POST /v1/memories``, call by call in ABBA order (F I H, H I F, ...) so that all three
    see the same noise and none always runs first."""
    from workers.app import get_app

    app = get_app(settings)
    times: dict[str, list[float]] = {"floor": [], "inproc": [], "http": []}
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        conn.execute(FLOOR_TABLE)
        for i in range(warmup + samples):
            scope = {"task_id": "latency", "session_id": f"s-{i % 20}"}
            content = CONTENTS[i % len(CONTENTS)].format(n=i)
            order = ("floor", "inproc", "http") if i % 2 == 0 else ("http", "inproc", "floor")
            taken: dict[str, float] = {}
            for side in order:
                started = time.perf_counter()
                if side == "floor":
                    taken[side] = floor_write_ms(conn, app, "bench", content, datetime.now(UTC))
                    continue
                if side == "inproc":
                    client.record(
                        f"{content} (in process)",
                        tenant_id="bench",
                        task_id=scope["task_id"],
                        session_id=scope["session_id"],
                    )
                else:
                    status, body = api.post(
                        "/v1/memories", {"content": f"{content} (http)", **scope}
                    )
                    if status != 202:
                        raise RuntimeError(f"POST /v1/memories answered {status}: {body}")
                taken[side] = (time.perf_counter() - started) * 1000
            if i >= warmup:
                for side, ms in taken.items():
                    times[side].append(ms)
    inproc, over_http, floor = times["inproc"], times["http"], times["floor"]
    return {
        "floor_p50_ms": round(statistics.median(floor), 3),
        "floor_p99_ms": round(percentile(floor, 0.99), 3),
        "inproc_record_p50_ms": round(statistics.median(inproc), 3),
        "inproc_record_p99_ms": round(percentile(inproc, 0.99), 3),
        "http_record_p50_ms": round(statistics.median(over_http), 3),
        "http_record_p99_ms": round(percentile(over_http, 0.99), 3),
        "http_record_to_inproc_p50": round(
            statistics.median(over_http) / statistics.median(inproc), 3
        ),
        "http_record_to_floor_p99": round(percentile(over_http, 0.99) / percentile(floor, 0.99), 3),
    }


def _run_clients(make: Any, count: int) -> float:
    """Seconds for ``CLIENTS`` threads to make ``count`` records in all: ``make(index)``
    returns a thread's ``(record(n), close())``; one warm-up record each before the clock."""
    per_client = count // CLIENTS
    errors: list[BaseException] = []
    barrier = threading.Barrier(CLIENTS + 1)

    def agent(index: int) -> None:
        record, close = make(index)
        try:
            record(-1)
            barrier.wait()
            for n in range(per_client):
                record(n)
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()
        finally:
            close()

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise errors[0]
    return elapsed


def _content(index: int, n: int) -> str:
    return CONTENTS[n % len(CONTENTS)].format(n=f"{index}-{n}-{uuid.uuid4().hex[:6]}")


def http_clients(port: int, key: str) -> Any:
    def make(index: int) -> Any:
        api = Api(port, key)

        def record(n: int) -> None:
            payload = {"content": _content(index, n), "task_id": f"load-{index}", "session_id": "s"}
            status, body = api.post("/v1/memories", payload)
            if status != 202:
                raise RuntimeError(f"POST /v1/memories answered {status}: {body}")

        return record, api.close

    return make


def inproc_clients(settings: Settings) -> Any:
    """Each thread its own ``MemoryClient``, as each HTTP thread has its own connection."""

    def make(index: int) -> Any:
        client = MemoryClient(settings)

        def record(n: int) -> None:
            client.record(
                _content(index, n), tenant_id="bench", task_id=f"inproc-{index}", session_id="s"
            )

        return record, client.close

    return make


def measure_throughput(settings: Settings, port: int, key: str, records: int) -> dict[str, float]:
    """8 clients in process and 8 over HTTP, ``records`` each, in ABBA rounds (in process,
    HTTP, HTTP, in process) of half as many: both sides see the same noise."""
    half = records // 2
    seconds = {"inproc": 0.0, "http": 0.0}
    made = {"inproc": 0, "http": 0}
    for side in ("inproc", "http", "http", "inproc"):
        make = inproc_clients(settings) if side == "inproc" else http_clients(port, key)
        seconds[side] += _run_clients(make, half)
        made[side] += half // CLIENTS * CLIENTS
    inproc = made["inproc"] / seconds["inproc"]
    over_http = made["http"] / seconds["http"]
    return {
        "records_per_s_8": round(over_http, 1),
        "inproc_records_per_s_8": round(inproc, 1),
        "http_to_inproc_records_8": round(over_http / inproc, 3),
    }


UNLINKED_SQL = (
    "SELECT count(*) FROM memories WHERE status = 'stored' AND level = 0 AND linked_at IS NULL"
)


def fill(client: MemoryClient, settings: Settings, memories: int) -> float:
    """Top the store up to ``memories`` rows through the real write path; wait until drained."""
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        have = conn.execute("SELECT count(*) FROM memories").fetchone()
    missing = max(0, memories - int(have[0] if have else 0))
    started = time.perf_counter()
    ids: list[uuid.UUID] = []
    for start in range(0, missing, 500):
        batch = [
            {
                "content": CONTENTS[n % len(CONTENTS)].format(n=f"fill-{n}"),
                "tenant_id": "bench",
                "task_id": f"task-{n % 5}",
                "session_id": f"s-{n % 50}",
            }
            for n in range(start, min(missing, start + 500))
        ]
        ids.extend(receipt.memory_id for receipt in client.record_many(batch))
    client.wait_until_settled(ids[-500:], timeout_s=600)
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        while conn.execute("SELECT count(*) FROM memories WHERE status = 'pending'").fetchone()[0]:  # type: ignore[index]
            time.sleep(0.5)
        # and linked: the link pass runs in the owner too, one long task the queues do not show
        while conn.execute(UNLINKED_SQL).fetchone()[0]:  # type: ignore[index]
            time.sleep(0.5)
    elapsed = time.perf_counter() - started
    wait_idle(settings)
    return elapsed


def wait_idle(settings: Settings, *, quiet_s: float = 2.0, timeout_s: float = 300.0) -> None:
    """Until the owner's queues stay empty for ``quiet_s``: the follow-up work of the writes
    (links, summaries) runs in the same worker as the context calls, and a context call
    queued behind it would time the backlog, not the read."""
    broker = redis.Redis.from_url(settings.redis_url)
    queues = [queue.value for queue in CeleryQueue]
    deadline = time.monotonic() + timeout_s
    quiet_since: float | None = None
    try:
        while time.monotonic() < deadline:
            if sum(int(broker.llen(queue)) for queue in queues) == 0:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since >= quiet_s:
                    return
            else:
                quiet_since = None
            time.sleep(0.1)
    finally:
        broker.close()


def measure_context(client: MemoryClient, api: Api, queries: int, warmup: int) -> dict[str, float]:
    """``POST /v1/context`` and in-process ``MemoryClient.context`` alternate call by call."""
    over_http: list[float] = []
    inproc: list[float] = []
    for i in range(warmup + queries):
        task, query = f"task-{i % 5}", QUESTIONS[i % len(QUESTIONS)]
        payload = {"task_id": task, "query": query, "budget_tokens": 8000}
        started = time.perf_counter()
        status, body = api.post("/v1/context", payload)
        middle = time.perf_counter()
        client.context(task, query, 8000, tenant_id="bench")
        ended = time.perf_counter()
        if status != 200:
            raise RuntimeError(f"POST /v1/context answered {status}: {body}")
        if i >= warmup:
            over_http.append((middle - started) * 1000)
            inproc.append((ended - middle) * 1000)
    return {
        "http_context_p50_ms": round(statistics.median(over_http), 2),
        "http_context_p95_ms": round(percentile(over_http, 0.95), 2),
        "inproc_context_p50_ms": round(statistics.median(inproc), 2),
        "inproc_context_p95_ms": round(percentile(inproc, 0.95), 2),
    }


def run(
    base: Settings,
    *,
    samples: int = 1000,
    warmup: int = 100,
    records: int = 4000,
    memories: int = 10_000,
    queries: int = 200,
    redis_db: RedisChoice = AUTO,
    server_processes: int = 1,
) -> int:
    """The whole run on an empty Redis database of its own (``redis_db``: ``"auto"``, a
    number, or None for the one of ``base``, as the tests do)."""
    from memharness.server.keys import create_key

    try:
        number = claim_redis_db(base.redis_url, redis_db)
    except BusyRedisDatabase as exc:
        return refuse(exc)
    tmp = Path(tempfile.mkdtemp(prefix="memharness-api-bench-"))
    settings = scratch_settings(
        base, db_suffix="api_bench", qdrant_path=tmp / "qdrant", redis_db=number
    )
    env = {
        **worker_env(settings),
        "MEMHARNESS_API_RATE_LIMIT_PER_S": "1000000",
        "MEMHARNESS_API_RATE_LIMIT_BURST": "1000000",
        "MEMHARNESS_API_ACCESS_LOG": "false",
    }
    drop_database(settings.database_url)
    migrate(settings.database_url)
    clear_redis(settings, claimed=number is not None)
    port = _spare_port()
    out: dict[str, Any] = {
        "bench": "api",
        "cpus": os.cpu_count(),
        "server_processes": server_processes,
        "http_client": "http.client keep-alive",
    }
    worker = server = None
    try:
        worker = start_worker(
            "api-bench-owner", ["write", "embed", "recall"], env=env, log_dir=tmp / "logs"
        )
        wait_for_worker(worker)
        server = _serve(env, port, tmp / "logs", server_processes)
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            key, _ = create_key(conn, tenant_id="bench", scopes="read,write")
        api = Api(port, key)
        with MemoryClient(settings) as client:
            _log(f"record: {samples} alternating in-process / HTTP calls")
            out |= measure_record(settings, client, api, samples, warmup)
            _log(f"throughput: {records} records each from {CLIENTS} in-process and HTTP clients")
            out |= measure_throughput(settings, port, key, records)
            if memories > 0:
                _log(f"filling the store to {memories} memories and draining it")
                out["fill_s"] = round(fill(client, settings, memories), 1)
                out["memories"] = memories
                api.close()
                # a fresh connection: uvicorn closes one idle past its keep-alive timeout (5 s)
                api = Api(port, key)
                _log(f"context: {queries} calls over HTTP")
                out |= measure_context(client, api, queries, min(warmup, 20))
        api.close()
        out["targets"] = {k: (f">= {v}" if k in AT_LEAST else f"<= {v}")
                          for k, v in TARGETS.items()}  # fmt: skip
        out["missed"] = [
            k for k, v in TARGETS.items() if (out[k] < v if k in AT_LEAST else out[k] > v)
        ]
        out["meets_targets"] = not out["missed"]
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=15)
        if worker is not None:
            worker.stop()
        drop_database(settings.database_url)
        release_redis(settings)
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(out, sort_keys=True))
    return 0 if out.get("meets_targets") else 1


def register_bench(
    bench_subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    """Add ``bench api``; its own ``func`` overrides the ``bench`` parser's."""
    p = bench_subparsers.add_parser(
        "api", help="HTTP record p50/p99 vs in-process, context p95, records/s of 8 clients"
    )
    p.add_argument("--samples", type=int, default=1000, help="record calls of each kind")
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--records", type=int, default=4000, help="records of the 8-client run")
    p.add_argument(
        "--memories",
        type=int,
        default=10_000,
        help="store size of the context run (0: no context run)",
    )
    p.add_argument("--queries", type=int, default=200, help="context calls")
    p.add_argument(
        "--server-processes", type=int, default=1, help="uvicorn worker processes of the server"
    )
    add_redis_argument(p)
    p.set_defaults(
        func=lambda args: run(
            get_settings(),
            samples=args.samples,
            warmup=args.warmup,
            records=args.records,
            memories=args.memories,
            queries=args.queries,
            server_processes=args.server_processes,
            redis_db=args.redis_db,
        )
    )
