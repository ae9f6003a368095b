"""How fast the owner restores a lost vector collection from PostgreSQL.

Records ``--memories`` memories through the real write path (client, drain, embedded
store), closes the store, deletes its directory, opens it again, and runs the restore's
steps (``workers.index.restore.restore_step``, cursor handed on as the chain does, without
the broker hop between steps) until the collection measures whole. Prints one JSON line:
rows, steps, seconds, rows per second and seconds per 10k memories. Run it on state of its
own (the database is created and migrated, its tables emptied; the Redis database flushed)::

    MEMHARNESS_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/memharness_bench_restore \\
    MEMHARNESS_REDIS_URL=redis://127.0.0.1:6379/10 MEMHARNESS_QDRANT_PATH=var/bench-restore \\
    .venv/bin/python scripts/bench_index_restore.py --memories 10000
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import time

from config import Settings
from memharness.client import MemoryClient
from workers.clients import Clients
from workers.db import migrate
from workers.index.completeness import measure_index
from workers.index.restore import FIRST_CURSOR, restore_step
from workers.index.targets import EPISODIC
from workers.write.drain import drain_writes

WORDS = ["ledger", "postgres", "invoice", "billing", "outbox", "migration", "helm", "canary"]


def seed(settings: Settings, n: int) -> None:
    rng = random.Random(7)
    ctx = Clients(settings)
    try:
        with MemoryClient(settings) as client:
            for start in range(0, n, 500):
                client.record_many(
                    [
                        {
                            "content": f"We decided to rework the {' '.join(rng.sample(WORDS, 3))}"
                            f" part, ticket T-{i}.",
                            "tenant_id": f"tenant-{i % 10}",
                            "task_id": "main",
                            "session_id": f"s-{i // 100}",
                        }
                        for i in range(start, min(n, start + 500))
                    ]
                )
                while drain_writes(ctx).more:
                    pass
        while drain_writes(ctx).more:
            pass
    finally:
        ctx.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=10_000)
    args = parser.parse_args()
    settings = Settings()
    migrate(settings.database_url)
    ctx = Clients(settings)
    with ctx.pool.connection() as conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                "AND tablename <> 'alembic_version'"
            ).fetchall()
        ]
        conn.execute(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE")
    ctx.redis.flushdb()
    ctx.close()
    shutil.rmtree(settings.qdrant_path, ignore_errors=True)

    started = time.monotonic()
    seed(settings, args.memories)
    seeded_s = time.monotonic() - started

    # the directory lost while nobody held the store
    shutil.rmtree(settings.qdrant_path)
    ctx = Clients(settings)
    try:
        state = measure_index(ctx, EPISODIC)
        started = time.monotonic()
        cursor, steps, embedded = FIRST_CURSOR, 0, 0
        while True:
            outcome = restore_step(ctx, EPISODIC, cursor)
            steps += 1
            embedded += int(outcome["embedded"])
            cursor = str(outcome["cursor"])
            if outcome["done"]:
                break
        seconds = time.monotonic() - started
        after = measure_index(ctx, EPISODIC)
    finally:
        ctx.close()
    print(
        json.dumps(
            {
                "memories": state.live,
                "missing_before": state.missing,
                "missing_after": after.missing,
                "embedder": settings.embedder,
                "embed_dim": settings.embed_dim,
                "step_s": settings.index_restore_step_s,
                "steps": steps,
                "embedded": embedded,
                "seconds": round(seconds, 2),
                "rows_per_s": round(embedded / seconds, 1),
                "seconds_per_10k": round(seconds * 10_000 / max(1, embedded), 2),
                "seed_seconds": round(seeded_s, 1),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
