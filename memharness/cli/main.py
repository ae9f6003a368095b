"""``memharness``: the project's command line."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from config import get_settings
from memharness.bench.api import register_bench as register_api_bench
from memharness.bench.cognition import register_bench as register_cognition_bench
from memharness.bench.embedders import EMBEDDERS
from memharness.bench.footprint import register_bench as register_footprint_bench
from memharness.bench.forget import register_bench as register_forget_bench
from memharness.bench.retrieval_latency import register_bench as register_latency
from memharness.bench.store_legs import register_bench as register_store_legs
from memharness.bench.system_quality import register_bench as register_system_quality
from memharness.cli.checkpoints import register as register_checkpoints
from memharness.cli.checkpoints import register_bench
from memharness.cli.health import register as register_health
from memharness.cli.llm import register as register_llm
from memharness.cli.own import register as register_own
from memharness.cli.owning import register as register_owning
from memharness.mcp_server.cli import register as register_mcp
from memharness.server.cli import register as register_server


def _cmd_migrate(args: argparse.Namespace) -> int:
    from workers.db import migrate

    settings = get_settings()
    migrate(settings.database_url, args.revision)
    print(f"database migrated to {args.revision}")
    return 0


def _cmd_worker(args: argparse.Namespace) -> int:
    from workers.app import app
    from workers.queues import VECTOR_QUEUES

    settings = get_settings()
    queues = [q.strip() for q in args.queues.split(",") if q.strip()]
    owns_store = any(q in {v.value for v in VECTOR_QUEUES} for q in queues)
    if owns_store and settings.store_is_embedded and args.concurrency != 1:
        print(
            "error: --concurrency must be 1 for queues that touch the vector index in "
            "embedded mode (qdrant-client local mode allows one process); set "
            "MEMHARNESS_QDRANT_URL to scale out",
            file=sys.stderr,
        )
        return 2
    argv = ["worker", "-Q", ",".join(queues), "-c", str(args.concurrency), "-E"]
    argv += ["--loglevel", args.loglevel, "-n", f"{args.name}@%h"]
    app.worker_main(argv)
    return 0


def _cmd_beat(args: argparse.Namespace) -> int:
    from workers.app import app

    app.start(["beat", "--loglevel", args.loglevel])
    return 0


def _cmd_stats(args: argparse.Namespace) -> int:
    from memharness.stats import collect_stats, format_stats

    stats = collect_stats(get_settings(), tenant_id=args.tenant, days=args.days)
    print(json.dumps(stats, indent=2, sort_keys=True) if args.json else format_stats(stats))
    return 0


def _cmd_reembed(args: argparse.Namespace) -> int:
    """Progress of re-embedding after a model change (reads only: safe beside the owner).

    ``--watch`` polls until no collection is running: a bar on a terminal, silence otherwise;
    the JSON status is printed last either way."""
    import time

    from memharness.progress import progress
    from workers.clients import Clients
    from workers.index.reembed import reembed_status

    if args.interval_s <= 0 or args.timeout_s <= 0:
        print("error: --interval-s and --timeout-s must be above 0", file=sys.stderr)
        return 2
    ctx = Clients(get_settings())
    try:
        status = reembed_status(ctx)
        deadline = time.monotonic() + args.timeout_s
        with progress("re-embedding", total=0, quiet=not args.watch) as bar:
            while args.watch and time.monotonic() < deadline:
                runs = {v["collection"]: v["run"] for v in status.values() if v["run"]}
                running = {name: run for name, run in runs.items() if not run["finished"]}
                if not running:
                    break
                bar.update(
                    "re-embedding " + ", ".join(f"{n} ({r['phase']})" for n, r in running.items()),
                    completed=sum(min(r["done"], r["total"]) for r in running.values()),
                    total=sum(r["total"] for r in running.values()),
                )
                time.sleep(args.interval_s)
                status = reembed_status(ctx)
    finally:
        ctx.close()
    print(json.dumps(status, indent=2, sort_keys=True, default=str))
    unfinished = [kind for kind, v in status.items() if v["state"] == "running"]
    return 1 if args.watch and unfinished else 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from memharness.demo import run_demo

    return run_demo(
        get_settings(),
        interactions=args.interactions,
        keep_running=args.keep,
        external_workers=args.external_workers,
    )


def _cmd_bench(args: argparse.Namespace) -> int:
    if args.which == "write-path":
        from memharness.bench.write_path import run

        return run(
            get_settings(),
            records=args.records,
            noop_tasks=args.noop_tasks,
            producers=args.producers,
            latency_samples=args.latency_samples,
        )
    if args.which == "retrieval-quality":
        from memharness.bench.retrieval_quality import run as run_quality

        return run_quality(args.data, args.embedder)
    if args.which == "code-retrieval":
        from memharness.bench.code_retrieval import run as run_code

        return run_code(args.embedder)
    if args.which == "compression":
        from memharness.bench.compression import run as run_compression

        return run_compression(args.data, l1_ratio=args.l1_ratio, limit=args.limit, lang=args.lang)
    if args.which == "consolidation":
        from memharness.bench.consolidation import run as run_consolidation

        return run_consolidation(
            args.data, memories=args.memories, batch=args.batch, lang=args.lang
        )
    if args.which == "dataset":
        from memharness.bench.zh_project import SEED, write

        questions = write(Path(args.out), seed=SEED if args.seed is None else args.seed)
        print(json.dumps({"dataset": args.name, "out": args.out, "questions": questions}))
        return 0
    raise AssertionError(args.which)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memharness", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("migrate", help="create the database if needed and apply migrations")
    p.add_argument("--revision", default="head")
    p.set_defaults(func=_cmd_migrate)

    p = sub.add_parser("worker", help="run a Celery worker on some queues")
    p.add_argument("--queues", default="write,embed,recall", help="comma-separated queues")
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--name", default="worker")
    p.add_argument("--loglevel", default="INFO")
    p.set_defaults(func=_cmd_worker)

    p = sub.add_parser("beat", help="run celery beat with the schedules/ declarations")
    p.add_argument("--loglevel", default="INFO")
    p.set_defaults(func=_cmd_beat)

    p = sub.add_parser(
        "stats", help="the write funnel, job states, task counters and LLM tokens with their cost"
    )
    p.add_argument("--tenant", default=None)
    p.add_argument(
        "--days", type=int, default=None, help="LLM tokens of the last N UTC days (default: all)"
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_stats)

    p = sub.add_parser("reembed", help="re-embedding after a model change: per-collection status")
    p.add_argument("--status", action="store_true", help="show progress (the default)")
    p.add_argument("--watch", action="store_true", help="follow running re-embeds to the end")
    p.add_argument("--interval-s", type=float, default=1.0, help="--watch: seconds between polls")
    p.add_argument("--timeout-s", type=float, default=3600.0, help="--watch: give up after this")
    p.set_defaults(func=_cmd_reembed)

    p = sub.add_parser("demo", help="a scripted agent writing and recalling through workers")
    p.add_argument("--interactions", type=int, default=200)
    p.add_argument("--keep", action="store_true", help="leave workers and Flower running")
    p.add_argument(
        "--external-workers",
        action="store_true",
        help="use a deployment's running workers (docker compose) instead of starting them",
    )
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("bench", help="benchmarks; each prints one JSON object last")
    bench = p.add_subparsers(dest="which", required=True)
    b = bench.add_parser("write-path", help="record() latency vs floor, ingest vs no-op tasks")
    b.add_argument("--records", type=int, default=5000)
    b.add_argument("--noop-tasks", type=int, default=5000)
    b.add_argument("--producers", type=int, default=4, help="threads calling record()")
    b.add_argument("--latency-samples", type=int, default=2000)
    b = bench.add_parser(
        "retrieval-quality",
        help="LoCoMo evidence recall: dense vs dense+sparse vs the full read pipeline",
    )
    b.add_argument("--data", required=True, help="LoCoMo-format JSON, read at run time")
    b.add_argument("--embedder", choices=sorted(EMBEDDERS), default="hashing")
    b = bench.add_parser(
        "code-retrieval",
        help="code memories: recall of the text path vs the text path + code vectors",
    )
    b.add_argument("--embedder", choices=sorted(EMBEDDERS), default="hashing")
    b = bench.add_parser("compression", help="fact recall and ratio of L1/L2 compression")
    b.add_argument("--data", required=True, help="LoCoMo-format JSON, read at run time")
    b.add_argument("--l1-ratio", type=float, default=None, help="L1 target ratio (policy: 10)")
    b.add_argument("--limit", type=int, default=None, help="only the first N conversations")
    b.add_argument(
        "--lang", choices=["en", "zh"], default="en", help="language of the decision set"
    )
    b = bench.add_parser("consolidation", help="memories/s through consolidation, offline")
    b.add_argument("--data", default=None, help="LoCoMo-format file instead of generated data")
    b.add_argument("--memories", type=int, default=20000)
    b.add_argument("--batch", type=int, default=1000)
    b.add_argument(
        "--lang", choices=["en", "zh"], default="en", help="language of the generated history"
    )
    b = bench.add_parser(
        "dataset", help="write a generated evaluation set (LoCoMo format) to --out"
    )
    b.add_argument("name", choices=["zh-project"], help="zh-project: Chinese project tracking")
    b.add_argument("--out", required=True, help="where to write the JSON")
    b.add_argument("--seed", type=int, default=None, help="default: the set's own seed")
    register_bench(bench)
    register_latency(bench)
    register_store_legs(bench)
    register_api_bench(bench)
    register_forget_bench(bench)
    register_footprint_bench(bench)
    register_cognition_bench(bench)
    register_system_quality(bench)
    p.set_defaults(func=_cmd_bench)

    register_checkpoints(sub)
    register_health(sub)
    register_own(sub)
    register_owning(sub)
    register_server(sub)
    register_mcp(sub)
    register_llm(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose and args.command != "migrate":
        # A command that migrates on its way (demo, the benchmarks) does not list each
        # migration; `memharness migrate` does, and -v shows them everywhere.
        logging.getLogger("alembic").setLevel(logging.WARNING)
    if not args.verbose:
        from memharness.cli.errors import quiet_connection_retries

        quiet_connection_retries(args.command)
    try:
        result: int = args.func(args)
    except Exception as exc:
        from memharness.cli.errors import EXIT_UNREACHABLE, unreachable_line

        line = unreachable_line(args.command, exc, get_settings())
        if line is None:
            raise
        print(line, file=sys.stderr)
        return EXIT_UNREACHABLE
    return result
