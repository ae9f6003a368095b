"""``memharness bench store-legs``: the PostgreSQL legs of ``context()``, leg by leg, at sizes
the vector index cannot be built at in a session.

``retrieval-latency`` times the whole call; at 1,000,000 memories its in-process p50 was
182 ms while the dense search took 21 ms, and building the HNSW graph for that run took 74
minutes. The rest of the call is PostgreSQL's: the keyword search of each query variant, the
temporal search of the literal query, the fetch of the candidates' rows. This bench loads
the same synthetic store (``retrieval_latency.synthetic_memories``: 8 tenants x 5 tasks, a
month of timestamps) into a scratch database with COPY, VACUUM ANALYZEs it as autovacuum
would, and times each leg through the read path's own adapter
(``workers.read.sql.PostgresRecall``, a fresh one per call so nothing is answered from its
memo) over the bench's questions from random tenants and tasks: ``sparse`` (task scope, 50
hits), ``sparse_tenant`` (tenant scope, as ``recall()`` without a task asks), ``temporal``
(the task's last 7 days, 20 hits) and ``fetch`` (the rows, versions and conflicts of the 50
ids the sparse leg found). No vector index and no Redis: a 1M run takes minutes, not hours.
Progress goes to stderr; the last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from config import Settings, get_settings
from memharness.bench.retrieval_latency import (
    QUESTIONS,
    SUBJECTS,
    TASKS_PER_TENANT,
    TENANTS,
    copy_memories,
    store_sizes,
    synthetic_memories,
)
from memharness.bench.scratch import percentile, scratch_settings
from pipelines.read.config import DEFAULT_CONFIG
from pipelines.read.recall import RecallScope
from workers.db import drop_database, migrate, open_pool
from workers.read.sql import PostgresRecall

LEGS = ("sparse", "sparse_tenant", "temporal", "fetch")


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _timed(pool: ConnectionPool, leg: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    """``leg`` (a ``PostgresRecall`` method) on a fresh recaller: nothing from its memo."""
    with PostgresRecall(pool, versions_from_rows=True) as recall:
        started = time.perf_counter()
        answer = leg(recall, *args)
        elapsed_ms = (time.perf_counter() - started) * 1000
    return elapsed_ms, answer


def measure(settings: Settings, n: int, *, queries: int, warmup: int) -> dict[str, Any]:
    """Load ``n`` memories and time each leg ``queries`` times after ``warmup`` calls."""
    now = datetime.now(UTC)
    started = time.perf_counter()
    rows = synthetic_memories(n, now)
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        conn.execute("TRUNCATE memories CASCADE")
        with conn.transaction():
            copy_memories(conn, rows, "hashing")
        del rows
        conn.execute("VACUUM ANALYZE memories")
    load_s = round(time.perf_counter() - started, 2)
    _log(f"[{n}] copied and vacuumed in {load_s} s")

    config = DEFAULT_CONFIG
    since = now - timedelta(hours=config.temporal_window_hours)
    limit = config.sparse_limit
    timings: dict[str, list[float]] = {leg: [] for leg in LEGS}
    hits: dict[str, list[int]] = {leg: [] for leg in LEGS}
    rng = random.Random(n)
    pool = open_pool(settings, name="memharness-bench-store-legs")
    try:
        for i in range(warmup + queries):
            tenant = f"tenant-{rng.randrange(TENANTS)}"
            task = RecallScope(
                tenant_id=tenant, task_id=f"task-{rng.randrange(TASKS_PER_TENANT)}", now=now
            )
            whole = RecallScope(tenant_id=tenant, task_id=None, now=now)
            text = rng.choice(QUESTIONS).format(s=rng.choice(SUBJECTS))
            sparse_ms, found = _timed(pool, PostgresRecall.search_sparse, text, task, limit)
            tenant_ms, wide = _timed(pool, PostgresRecall.search_sparse, text, whole, limit)
            temporal_ms, recent = _timed(
                pool, PostgresRecall.search_recent, text, task, since, config.temporal_limit
            )
            ids = [hit.id for hit in found]
            fetch_ms, views = _timed(pool, PostgresRecall.fetch, ids, task)
            if i < warmup:
                continue
            for leg, ms, answer in (
                ("sparse", sparse_ms, found),
                ("sparse_tenant", tenant_ms, wide),
                ("temporal", temporal_ms, recent),
                ("fetch", fetch_ms, views),
            ):
                timings[leg].append(ms)
                hits[leg].append(len(answer))
    finally:
        pool.close()
    out: dict[str, Any] = {"points": n, "load_s": load_s, "queries": queries}
    for leg in LEGS:
        out[f"{leg}_p50_ms"] = round(statistics.median(timings[leg]), 2)
        out[f"{leg}_p95_ms"] = round(percentile(timings[leg], 0.95), 2)
        out[f"{leg}_hits_mean"] = round(statistics.fmean(hits[leg]), 1)
    _log(
        f"[{n}] "
        + ", ".join(f"{leg} {out[f'{leg}_p50_ms']}/{out[f'{leg}_p95_ms']} ms" for leg in LEGS)
    )
    return out


def run(base: Settings, *, points: Sequence[int], queries: int = 100, warmup: int = 10) -> int:
    # PostgreSQL only: the settings' vector store path is never opened.
    settings = scratch_settings(
        base, db_suffix=f"store_legs_{os.getpid()}", qdrant_path=Path("/nonexistent"), redis_db=None
    )
    drop_database(settings.database_url)
    migrate(settings.database_url)
    out: dict[str, Any] = {
        "bench": "store-legs",
        "measured": "p*_ms: one PostgresRecall call per leg (workers.read.sql), a fresh "
        "recaller per call, on the retrieval-latency bench's synthetic store after VACUUM "
        "ANALYZE; sparse: task scope, 50 hits; sparse_tenant: tenant scope; temporal: the "
        "task's last 7 days, 20 hits; fetch: rows, versions and conflicts of the sparse hits",
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "runs": {},
    }
    try:
        for n in sorted(points):
            out["runs"][str(n)] = measure(settings, n, queries=queries, warmup=warmup)
    finally:
        drop_database(settings.database_url)
    out["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out, sort_keys=True))
    return 0


def register_bench(
    bench_subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    """Add ``bench store-legs``; its own ``func`` overrides the ``bench`` parser's."""
    p = bench_subparsers.add_parser(
        "store-legs", help="context()'s PostgreSQL legs one by one, up to 1M memories"
    )
    add_arguments(p)
    p.set_defaults(func=run_args)


def run_args(args: argparse.Namespace) -> int:
    if args.quick:
        args.points, args.queries, args.warmup = [1_000], 20, 2
    return run(get_settings(), points=args.points, queries=args.queries, warmup=args.warmup)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--points", type=store_sizes, default=[100_000, 1_000_000])
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="1k memories, 20 calls (CI)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m memharness.bench.store_legs")
    add_arguments(parser)
    raise SystemExit(run_args(parser.parse_args()))
