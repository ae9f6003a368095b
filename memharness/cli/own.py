"""``memharness list | list-semantic | export | import``: a tenant's memories, page by page,
and its whole store as a ``memharness.export/1`` JSON Lines file.

Progress goes to stderr with ``rich``, only on a terminal (never with ``--json``, when stderr
is not a TTY or when ``CI`` is set), so stdout stays the data. Exit codes: 0 done, 2 a bad
argument or a refused file (the message names the field, or the line and field).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from typing import IO, Any

from config import get_settings
from pipelines.errors import Conflict, InvalidInput

ProgressFn = Callable[[int, int | None], None]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``list``, ``list-semantic``, ``export`` and ``import`` to the top-level commands."""
    p = subparsers.add_parser("list", help="a tenant's memories, newest first, a page at a time")
    p.add_argument("--tenant", required=True, help="tenant id")
    p.add_argument("--task", default=None, help="only this task")
    p.add_argument("--type", default=None, help="decision, action, observation, ...")
    p.add_argument("--level", default=None, help="0-4 (L0 raw ... L3 task summary)")
    p.add_argument("--status", default=None, help="default stored; 'any' adds tombstones")
    p.add_argument("--since", default=None, help="ISO 8601 time with offset")
    p.add_argument("--cursor", default=None, help="next_cursor of the previous page")
    p.add_argument("--limit", type=int, default=50, help="1-500")
    p.add_argument("--json", action="store_true", help="the page as one JSON object")
    p.set_defaults(func=_cmd_list)

    p = subparsers.add_parser("list-semantic", help="a tenant's semantic knowledge, paged")
    p.add_argument("--tenant", required=True, help="tenant id")
    p.add_argument(
        "--kind", default=None, help="preference, pattern, mistake, convention, owner, stack"
    )
    p.add_argument("--status", default=None, help="default the live ones; 'any' adds retired")
    p.add_argument("--cursor", default=None)
    p.add_argument("--limit", type=int, default=50, help="1-500")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_list_semantic)

    p = subparsers.add_parser("export", help="a tenant as memharness.export/1 JSON Lines")
    p.add_argument("--tenant", required=True, help="tenant id")
    p.add_argument("--out", default=None, help="file to write (default: stdout)")
    p.set_defaults(func=_cmd_export)

    p = subparsers.add_parser("import", help="import an export file, all or nothing")
    p.add_argument("file", help="the .jsonl file, or - for stdin")
    p.add_argument("--json", action="store_true", help="no progress; the counts as JSON")
    p.set_defaults(func=_cmd_import)


def _client() -> Any:
    from memharness.client import MemoryClient

    return MemoryClient(get_settings())


def _refused(exc: InvalidInput | Conflict) -> int:
    print(f"error: {exc}", file=sys.stderr)
    return 2


def _cmd_list(args: argparse.Namespace) -> int:
    filters = {
        "task_id": args.task,
        "type": args.type,
        "level": args.level,
        "status": args.status,
        "since": args.since,
        "cursor": args.cursor,
        "limit": args.limit,
    }
    with _client() as client:
        try:
            page = client.list_memories(args.tenant, **filters)
        except InvalidInput as exc:
            return _refused(exc)
    if args.json:
        print(page.model_dump_json())
        return 0
    for item in page.items:
        text = (item.content or f"[{item.status}: {item.change_reason or ''}]").replace("\n", " ")
        print(
            f"{item.ts.isoformat(timespec='seconds')}  {item.id}  L{item.level}  "
            f"{item.status:<9}  {item.type or '-':<13}  {text[:70]}"
        )
    if page.next_cursor:
        print(f"next page: --cursor {page.next_cursor}")
    return 0


def _cmd_list_semantic(args: argparse.Namespace) -> int:
    with _client() as client:
        try:
            page = client.list_semantic(
                args.tenant,
                kind=args.kind,
                status=args.status,
                cursor=args.cursor,
                limit=args.limit,
            )
        except InvalidInput as exc:
            return _refused(exc)
    if args.json:
        print(page.model_dump_json())
        return 0
    for item in page.items:
        print(
            f"{item.created_at.isoformat(timespec='seconds')}  {item.id}  {item.kind or '-':<10}  "
            f"{item.confidence:.2f}  {item.status:<18}  {item.content[:70]}"
        )
    if page.next_cursor:
        print(f"next page: --cursor {page.next_cursor}")
    return 0


def show_progress(quiet: bool = False) -> bool:
    """Progress is for a person at a terminal: never in CI, with --json or when piped."""
    return not quiet and not os.environ.get("CI") and sys.stderr.isatty()


@contextlib.contextmanager
def _progress(label: str, enabled: bool) -> Iterator[ProgressFn | None]:
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int | None) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def _cmd_export(args: argparse.Namespace) -> int:
    out: IO[str]
    out = open(args.out, "w", encoding="utf-8") if args.out else sys.stdout  # noqa: SIM115
    try:
        with _client() as client, _progress("export", show_progress()) as progress:
            counts = client.export(args.tenant, out, progress=progress)
    except InvalidInput as exc:
        return _refused(exc)
    finally:
        if out is not sys.stdout:
            out.close()
    print(json.dumps({"exported": counts.model_dump(), "tenant_id": args.tenant}), file=sys.stderr)
    return 0


def _cmd_import(args: argparse.Namespace) -> int:
    source: IO[str]
    if args.file == "-":
        source = sys.stdin
    else:
        try:
            source = open(args.file, encoding="utf-8")  # noqa: SIM115
        except OSError as exc:
            print(f"error: file: {exc}", file=sys.stderr)
            return 2
    try:
        with _client() as client, _progress("import", show_progress(args.json)) as progress:
            counts = client.import_file(source, progress=progress)
    except (InvalidInput, Conflict) as exc:
        return _refused(exc)
    finally:
        if source is not sys.stdin:
            source.close()
    print(json.dumps(counts.as_dict()))
    return 0
