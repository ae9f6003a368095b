"""``memharness bench forget``: how long an erasure takes to settle, and how fast a tenant is
exported and imported.

Measured in one run, on scratch databases and a scratch Redis database, with one owner worker
(write, embed, recall; hashing embedder) per database:

(a) forget one: ``--samples`` memories of a tenant of ``--memories`` stored ones are forgotten
    one after the other; each time counts from the ``forget()`` call to its request being
    ``done`` (every copy reached and verified);
(b) forget a tenant of ``--tenant-memories`` stored memories: from the call to ``done``;
(c) export: a tenant of ``--memories`` memories (with the links the workers made: about ten a
    memory on this generated project, where people, files and tickets recur) to a file,
    memories per second and lines per second;
(d) import of that file into a fresh database: memories per second until ``import_file``
    returns, and until the target's owner has embedded every one with its own embedder.

The last line of stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from config import Settings
from memharness.bench.scratch import (
    AUTO,
    BusyRedisDatabase,
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
from memharness.progress import progress
from workers.db import drop_database, migrate

CONTENTS = [
    "We decided to keep money as integer cents in amount_cents (decision #{n}).",
    "Status: ATL-{n} (payment webhooks) moved to review; waiting on Priya.",
    "Constraint: the public API must answer within 200 ms at p99 (ticket ATL-{n}).",
    "I ran scripts/migrate_ledger.py against staging; {n} rows moved in 14 minutes.",
]
T0 = datetime(2026, 11, 1, tzinfo=UTC)


def _seed(client: MemoryClient, tenant: str, n: int, sessions: int = 50) -> list[uuid.UUID]:
    ids: list[uuid.UUID] = []
    items = [
        {
            "content": CONTENTS[i % len(CONTENTS)].format(n=i),
            "tenant_id": tenant,
            "task_id": f"task-{i % 5}",
            "session_id": f"s{i % sessions}",
            "timestamp": T0 + timedelta(minutes=i),
        }
        for i in range(n)
    ]
    for start in range(0, n, 500):
        ids += [r.memory_id for r in client.record_many(items[start : start + 500])]
    client.wait_until_settled(ids, timeout_s=600)
    return ids


def _settle(client: MemoryClient, tenant: str, receipt: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while client.forget_status(receipt.request_id, tenant_id=tenant).status != "done":
        if time.monotonic() > deadline:
            raise TimeoutError(f"forget request {receipt.request_id} not done")
        time.sleep(0.002)


def _wait_linked(settings: Settings, timeout_s: float = 600) -> None:
    import psycopg

    deadline = time.monotonic() + timeout_s
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT count(*) FROM memories WHERE status = 'stored' AND level = 0 "
                "AND linked_at IS NULL"
            ).fetchone()
            if row and row[0] == 0:
                return
            time.sleep(0.2)
    raise TimeoutError("the link pass did not finish")


def _embedded(settings: Settings, tenant: str) -> int:
    import psycopg

    with psycopg.connect(settings.database_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM memories WHERE tenant_id = %s AND status = 'stored' "
            "AND embedding_version IS NOT NULL",
            (tenant,),
        ).fetchone()
    return int(row[0]) if row else 0


def run(base: Settings, *, memories: int, tenant_memories: int, samples: int) -> int:
    from workers.own.export import export_tenant
    from workers.own.imports import import_file

    try:  # the exporting store and the importing one: two Redis databases of their own
        source_db = claim_redis_db(base.redis_url, AUTO)
        target_db = claim_redis_db(base.redis_url, AUTO)
    except BusyRedisDatabase as exc:
        return refuse(exc)
    tmp = Path(tempfile.mkdtemp(prefix="memharness-bench-forget-"))
    log_dir = tmp / "logs"
    source = scratch_settings(
        base, db_suffix="bench_forget", qdrant_path=tmp / "qdrant-forget", redis_db=source_db
    )
    target = scratch_settings(
        base, db_suffix="bench_import", qdrant_path=tmp / "qdrant-import", redis_db=target_db
    )
    source_env, target_env = worker_env(source), worker_env(target)
    for settings in (source, target):
        drop_database(settings.database_url)
        migrate(settings.database_url)
        clear_redis(settings, claimed=True)
    workers: list[Managed] = []
    result: dict[str, Any] = {"benchmark": "forget", "cpus": os.cpu_count()}
    owner_queues = ["write", "embed", "recall"]
    with progress("bench forget") as bar:
        try:
            workers.append(
                start_worker("bench-owner", owner_queues, env=source_env, log_dir=log_dir)
            )
            wait_for_worker(workers[-1])
            with MemoryClient(source) as client:
                bar.note(f"seeding a tenant of {memories} memories")
                ids = _seed(client, "one", memories)
                # The link pass of the seeded rows holds the owner's slot for a while; an erasure
                # measured behind it would time the link pass.
                _wait_linked(source)
                bar.note(f"forget one: {samples} memories, one after the other")
                one_ms: list[float] = []
                for memory_id in ids[:samples]:
                    started = time.perf_counter()
                    receipt = client.forget(tenant_id="one", memory_id=memory_id, reason="bench")
                    _settle(client, "one", receipt, 60)
                    one_ms.append((time.perf_counter() - started) * 1000)
                    bar.advance()
                result |= {
                    "forget_one_samples": samples,
                    "forget_one_p50_ms": round(statistics.median(one_ms), 1),
                    "forget_one_p95_ms": round(percentile(one_ms, 0.95), 1),
                }

                bar.note("export")
                export_path = tmp / "one.jsonl"
                started = time.perf_counter()
                with export_path.open("w", encoding="utf-8") as out:
                    counts = export_tenant(client._pool, "one", out)
                export_s = time.perf_counter() - started
                exported = counts.memory
                result |= {
                    "export_memories": exported,
                    "export_per_s": round(exported / export_s, 1),
                    "export_lines": counts.total,
                    "export_lines_per_s": round(counts.total / export_s, 1),
                    "export_bytes": export_path.stat().st_size,
                }

                bar.note(f"seeding a tenant of {tenant_memories} memories")
                _seed(client, "big", tenant_memories, sessions=200)
                bar.note("forget the tenant")
                started = time.perf_counter()
                receipt = client.forget(tenant_id="big", whole_tenant=True, reason="bench")
                _settle(client, "big", receipt, 600)
                result["forget_tenant_memories"] = receipt.memories
                result["forget_tenant_s"] = round(time.perf_counter() - started, 2)

            bar.note("import into a fresh database")
            workers.append(
                start_worker("bench-target", owner_queues, env=target_env, log_dir=log_dir)
            )
            wait_for_worker(workers[-1])
            with MemoryClient(target) as client:
                started = time.perf_counter()
                with export_path.open(encoding="utf-8") as lines:
                    imported = import_file(client._pool, lines, app=client._app)
                import_s = time.perf_counter() - started
                stored = 0
                wanted = imported.embed_jobs
                deadline = time.monotonic() + 600
                while (stored := _embedded(target, "one")) < wanted and time.monotonic() < deadline:
                    time.sleep(0.05)
                indexed_s = time.perf_counter() - started
            n = imported.read.memory
            result |= {
                "import_memories": n,
                "import_per_s": round(n / import_s, 1),
                "import_lines_per_s": round(imported.read.total / import_s, 1),
                "import_indexed": stored,
                "import_indexed_per_s": round(stored / indexed_s, 1),
            }
            result["targets"] = {
                "forget_one_p95_ms": "<= 2000",
                "export_per_s": ">= 5000",
                "import_per_s": ">= 1000",
            }
        finally:
            for worker in workers:
                worker.stop()
            for settings in (source, target):
                release_redis(settings)
                drop_database(settings.database_url)
            shutil.rmtree(tmp, ignore_errors=True)
    if tenant_memories == 10_000:
        result["forget_tenant_10k_s"] = result["forget_tenant_s"]
    print(json.dumps(result))
    return 0


def register_bench(bench: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``bench forget``; its own ``func`` overrides the ``bench`` parser's."""
    from config import get_settings

    b = bench.add_parser(
        "forget", help="time to erase a memory and a tenant; export and import rates"
    )
    b.add_argument("--memories", type=int, default=5000, help="the exported tenant's size")
    b.add_argument("--tenant-memories", type=int, default=10_000, help="the erased tenant's size")
    b.add_argument("--samples", type=int, default=50, help="single memories forgotten")
    b.set_defaults(
        func=lambda args: run(
            get_settings(),
            memories=args.memories,
            tenant_memories=args.tenant_memories,
            samples=args.samples,
        )
    )
