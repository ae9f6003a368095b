"""``memharness bench footprint``: what a memory costs at rest, measured at N memories.

For each store size N, N synthetic memories (``retrieval_latency``'s generator, made and
loaded in blocks so a million never sit in this process at once) go into a scratch
PostgreSQL database with COPY and into a fresh embedded qdrant-edge collection with the
owner's collection parameters (content, context and code named vectors, the payload
indexes), whose HNSW graphs are then built. Reported per N: the seed rate, the graph build
time, the bytes per memory of PostgreSQL (the ``memories`` table with its indexes and
TOAST, and the whole database) and of the index (its directory, split by what the engine
stores: each named vector's storage, the graphs, the payload and its indexes, the WAL), and
the RSS of this process once the built collection is open (as the owner holds it).

These are the measured per-memory costs of the capacity model in docs/scaling.md. Progress
goes to stderr; the last stdout line is one JSON object. No Redis and no worker: nothing
here is queued.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from config import Settings, get_settings
from memharness.bench.retrieval_latency import (
    SEED,
    copy_memories,
    index_memories,
    store_sizes,
    synthetic_memories,
)
from memharness.bench.scratch import scratch_settings
from workers.adapters import build_embedder
from workers.adapters.vector_edge import EdgeIndex
from workers.db import drop_database, migrate
from workers.index.targets import EPISODIC, alias_name, collection_params

# Rows made, copied and upserted per block: ~50 MB of row dicts at a time.
BLOCK = 50_000


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _key(n: int) -> str:
    return f"{n // 1000}k" if n % 1000 == 0 else str(n)


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def _peak_rss_mib() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def index_parts(root: Path) -> dict[str, int]:
    """Bytes on disk under ``root`` by what the engine keeps there: ``vector:<name>`` for a
    named vector's storage, ``hnsw:<name>`` for its graph, ``payload`` and
    ``payload_index``, ``wal``, and ``other``. Allocated blocks, not apparent sizes: the
    engine preallocates sparse files."""
    parts: dict[str, int] = defaultdict(int)
    for path in root.rglob("*"):
        if not path.is_file():
            continue
        size = path.stat().st_blocks * 512
        names = path.relative_to(root).parts
        part = "other"
        for name in names:
            if name.startswith("vector_storage-"):
                part = f"vector:{name.removeprefix('vector_storage-')}"
            elif name.startswith("vector_index-"):
                part = f"hnsw:{name.removeprefix('vector_index-')}"
            elif name == "payload_storage":
                part = "payload"
            elif name == "payload_index" or name.startswith("field_index"):
                part = "payload_index"
            elif name == "wal":
                part = "wal"
            else:
                continue
            break
        parts[part] += size
    return dict(parts)


def _pg_bytes(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    row = conn.execute(
        "SELECT pg_total_relation_size('memories'), pg_database_size(current_database())"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def measure(settings: Settings, n: int, tmp: Path) -> dict[str, Any]:
    """Seed ``n`` memories, build the graphs, and measure what they hold."""
    now = datetime.now(UTC)
    embedder = build_embedder(settings)
    alias = alias_name(settings, EPISODIC)
    path = tmp / f"qdrant-{n}"
    shutil.rmtree(path, ignore_errors=True)
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        conn.execute("TRUNCATE memories CASCADE")
        conn.execute("VACUUM FULL memories")
        empty_table, empty_db = _pg_bytes(conn)
        index = EdgeIndex(path, search_threads=settings.edge_search_threads)
        try:
            index.ensure_collection(
                alias, embedder.dim, collection_params(settings, EPISODIC), embedder.version
            )
            pg_s = upsert_s = 0.0
            for block, start in enumerate(range(0, n, BLOCK)):
                rows = synthetic_memories(min(BLOCK, n - start), now, seed=SEED + block)
                for j, row in enumerate(rows):  # unique across blocks, as one run's would be
                    row["content"] = row["content"].replace(f"(note {j})", f"(note {start + j})")
                t0 = time.perf_counter()
                with conn.transaction():
                    copy_memories(conn, rows, embedder.version)
                t1 = time.perf_counter()
                index_memories(index, alias, embedder, rows)
                pg_s += t1 - t0
                upsert_s += time.perf_counter() - t1
                del rows
                if block % 4 == 3:
                    _log(f"[{_key(n)}] {start + BLOCK} seeded")
            conn.execute("ANALYZE memories")
            _log(f"[{_key(n)}] seeded (pg {pg_s:.1f} s, index {upsert_s:.1f} s); building HNSW")
            t0 = time.perf_counter()
            index.optimize(alias)
            build_s = time.perf_counter() - t0
            rss_built = _rss_mib()
            table, database = _pg_bytes(conn)
        finally:
            index.close()
    # Reopened as the owner opens it at start: what a process holding this store keeps.
    reopened = EdgeIndex(path, search_threads=settings.edge_search_threads)
    try:
        reopened.search(
            alias, embedder.embed(["what did we decide"])[0], tenant_id="tenant-0", limit=10
        )
        rss_open = _rss_mib()
    finally:
        reopened.close()
    parts = index_parts(path)
    shutil.rmtree(path, ignore_errors=True)
    index_bytes = sum(parts.values())
    return {
        "memories": n,
        "embedder": embedder.version,
        "dim": embedder.dim,
        "pg_copy_s": round(pg_s, 2),
        "index_upsert_s": round(upsert_s, 2),
        "seed_memories_per_s": round(n / (pg_s + upsert_s), 1),
        "hnsw_build_s": round(build_s, 2),
        "pg_memories_table_bytes_per_memory": round((table - empty_table) / n, 1),
        "pg_database_bytes_per_memory": round((database - empty_db) / n, 1),
        "index_bytes_per_memory": round(index_bytes / n, 1),
        "index_parts_bytes_per_memory": {k: round(v / n, 1) for k, v in sorted(parts.items())},
        "rss_mib_after_build": rss_built,
        "rss_mib_store_reopened": rss_open,
        "peak_rss_mib": _peak_rss_mib(),
    }


def run(base: Settings, *, memories: list[int]) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="memharness-footprint-"))
    # No Redis database is claimed: nothing here is queued.
    settings = scratch_settings(
        base, db_suffix=f"footprint_{os.getpid()}", qdrant_path=tmp / "qdrant", redis_db=None
    )
    drop_database(settings.database_url)
    migrate(settings.database_url)
    out: dict[str, Any] = {
        "bench": "footprint",
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "runs": {},
    }
    try:
        for n in sorted(memories):
            result = measure(settings, n, tmp)
            out["runs"][_key(n)] = result
            _log(f"[{_key(n)}] {json.dumps(result, sort_keys=True)}")
    finally:
        drop_database(settings.database_url)
        shutil.rmtree(tmp, ignore_errors=True)
    out["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out, sort_keys=True))
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--memories", type=store_sizes, default=[10_000, 100_000])


def run_args(args: argparse.Namespace) -> int:
    return run(get_settings(), memories=args.memories)


def register_bench(
    bench_subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    """Add ``bench footprint``; its own ``func`` overrides the ``bench`` parser's."""
    p = bench_subparsers.add_parser(
        "footprint", help="bytes per memory in PostgreSQL and the index, RSS, HNSW build"
    )
    add_arguments(p)
    p.set_defaults(func=run_args)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m memharness.bench.footprint")
    add_arguments(parser)
    raise SystemExit(run_args(parser.parse_args()))
