"""``memharness checkpoints list|show|verify`` and ``memharness bench checkpoint``.

Exit codes: 0 done (verify: every checkpoint is sound), 1 a checkpoint is corrupted,
2 bad arguments or no such checkpoint.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from config import Settings, get_settings
from pipelines.errors import CheckpointFormatError, InvalidInput
from pipelines.state.models import TaskCheckpoint
from workers.state.service import CheckpointNotFound, CheckpointService


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``checkpoints list|show|verify`` to the top-level subcommands."""
    parser = subparsers.add_parser("checkpoints", help="task checkpoints: list, show, verify")
    commands = parser.add_subparsers(dest="checkpoints_command", required=True)

    p = commands.add_parser("list", help="a task's checkpoints, newest first")
    _scope_args(p)
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(func=_cmd_list)

    p = commands.add_parser("show", help="one checkpoint, verified and decoded, as JSON")
    _scope_args(p)
    p.add_argument("--id", required=True, help="checkpoint id")
    p.add_argument("--no-working-memory", action="store_true", help="leave the working memory out")
    p.set_defaults(func=_cmd_show)

    p = commands.add_parser("verify", help="check checksums, format and schema")
    _scope_args(p)
    p.add_argument("--id", default=None, help="one checkpoint (default: all of the task)")
    p.set_defaults(func=_cmd_verify)


def register_bench(
    bench_subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    """Add ``bench checkpoint``; its own default ``func`` overrides the ``bench`` parser's."""
    p = bench_subparsers.add_parser(
        "checkpoint", help="save and restore of a 50 KB checkpoint through PostgreSQL"
    )
    p.add_argument("--iterations", type=int, default=1000)
    p.set_defaults(func=lambda args: run_bench(get_settings(), args.iterations))


def run_bench(settings: Settings, iterations: int) -> int:
    from memharness.bench.checkpoint import run

    return run(settings, iterations=iterations)


def _scope_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tenant", required=True, help="tenant id")
    parser.add_argument("--task", required=True, help="task id")


@contextmanager
def _service() -> Iterator[CheckpointService]:
    from workers.adapters import build_llm
    from workers.db import open_pool
    from workers.ledger import PostgresLedger

    settings = get_settings()
    pool = open_pool(settings, name="memharness-cli")
    llm = build_llm(settings, ledger=PostgresLedger(lambda: pool))
    try:
        yield CheckpointService(pool, llm, keep_last=settings.checkpoint_keep_last)
    finally:
        pool.close()


def _fail(message: str, code: int) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


def _cmd_list(args: argparse.Namespace) -> int:
    try:
        with _service() as service:
            rows = service.list(args.tenant, args.task, limit=args.limit)
    except InvalidInput as exc:
        return _fail(str(exc), 2)
    if args.json:
        for row in rows:
            print(
                json.dumps(
                    {
                        "id": str(row.id),
                        "parent_id": str(row.parent_id) if row.parent_id else None,
                        "created_at": row.created_at.isoformat(),
                        "format_version": row.format_version,
                        "iteration": row.iteration,
                        "phase_transition": row.is_phase_transition,
                        "size_bytes": row.size_bytes,
                    }
                )
            )
        return 0
    if not rows:
        print(f"no checkpoints for task {args.tenant}/{args.task}")
        return 0
    print(f"{'id':36}  {'parent':36}  {'created_at (UTC)':26}  v  {'iter':>6}  phase  bytes")
    for row in rows:
        print(
            f"{row.id!s:36}  {row.parent_id or '-'!s:36}  "
            f"{row.created_at.isoformat(timespec='microseconds')[:26]:26}  "
            f"{row.format_version}  {row.iteration:>6}  "
            f"{'yes' if row.is_phase_transition else '':5}  {row.size_bytes}"
        )
    return 0


def checkpoint_as_json(checkpoint: TaskCheckpoint, *, working_memory: bool = True) -> Any:
    data = checkpoint.model_dump(mode="json")
    if working_memory:
        data["state"]["working_memory"] = checkpoint.state.working_memory.model_dump(mode="json")
    return data


def _cmd_show(args: argparse.Namespace) -> int:
    try:
        with _service() as service:
            checkpoint = service.show(args.tenant, args.task, args.id)
    except (InvalidInput, CheckpointNotFound) as exc:
        return _fail(str(exc), 2)
    except CheckpointFormatError as exc:
        return _fail(f"checkpoint {args.id} is unreadable ({exc.kind}): {exc}", 1)
    data = checkpoint_as_json(checkpoint, working_memory=not args.no_working_memory)
    print(json.dumps(data, indent=2, ensure_ascii=False))
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    try:
        with _service() as service:
            reports = service.verify(args.tenant, args.task, args.id)
    except (InvalidInput, CheckpointNotFound) as exc:
        return _fail(str(exc), 2)
    bad = 0
    for report in reports:
        if report.ok:
            print(
                f"ok       {report.checkpoint_id}  v{report.format_version}  {report.size_bytes} B"
            )
        else:
            bad += 1
            print(f"CORRUPT  {report.checkpoint_id}  {report.error_kind}: {report.error}")
    print(f"{len(reports) - bad} sound, {bad} corrupted")
    return 1 if bad else 0
