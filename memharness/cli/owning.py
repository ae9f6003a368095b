"""``memharness correct | undo-correction | forget | history``: the owner's operations from a
shell."""

from __future__ import annotations

import argparse

from config import get_settings


def _cmd_correct(args: argparse.Namespace) -> int:
    from memharness.client import MemoryClient

    with MemoryClient(get_settings()) as client:
        receipt = client.correct(
            args.memory_id, args.content, tenant_id=args.tenant, reason=args.reason,
            actor=args.actor,
        )  # fmt: skip
    print(receipt.model_dump_json() if args.json else f"{receipt.supersedes} -> {receipt.memory_id}"
          f" (version {receipt.version})")  # fmt: skip
    return 0


def _cmd_undo(args: argparse.Namespace) -> int:
    from memharness.client import MemoryClient

    with MemoryClient(get_settings()) as client:
        receipt = client.undo_correction(
            args.memory_id, tenant_id=args.tenant, reason=args.reason, actor=args.actor
        )
    if args.json:
        print(receipt.model_dump_json())
    else:
        print(f"{receipt.restored_id} {receipt.status}, kept beside {receipt.kept_id}")
    return 0


def _cmd_forget(args: argparse.Namespace) -> int:
    from memharness.client import MemoryClient

    with MemoryClient(get_settings()) as client:
        receipt = client.forget(
            tenant_id=args.tenant,
            reason=args.reason,
            actor=args.actor,
            memory_id=args.memory,
            task_id=args.task,
            session_id=args.session,
            whole_tenant=args.all,
        )
        if args.wait and not receipt.already:
            receipt = client.wait_until_forgotten(
                receipt, tenant_id=args.tenant, timeout_s=args.timeout
            )
    if args.json:
        print(receipt.model_dump_json())
    else:
        what = "already forgotten" if receipt.already else f"{receipt.memories} memories"
        print(f"forget request {receipt.request_id}: {what}, {receipt.status}")
    return 0 if receipt.status in ("done", "pending", "running") else 1


def _cmd_history(args: argparse.Namespace) -> int:
    from memharness.client import MemoryClient

    with MemoryClient(get_settings()) as client:
        history = client.history(args.memory_id, tenant_id=args.tenant)
    if args.json:
        print(history.model_dump_json(indent=2))
        return 0
    for version in history.versions:
        mark = "*" if version.id == history.current_id else " "
        print(f"{mark} v{version.version} {version.id} {version.status}: {version.content[:100]}")
    for event in history.events:
        who = f" by {event.actor}" if event.actor else ""
        print(f"  {event.at.isoformat()} {event.event}{who} {event.memory_id}"
              f"{': ' + event.reason if event.reason else ''}")  # fmt: skip
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("correct", help="replace what a memory says with a new version")
    p.add_argument("memory_id")
    p.add_argument("content", help="what holds now")
    p.add_argument("--tenant", required=True)
    p.add_argument("--reason", required=True)
    p.add_argument("--actor", default="cli")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_correct)

    p = sub.add_parser(
        "undo-correction", help="recall again a memory an automatic correction superseded"
    )
    p.add_argument("memory_id", help="the superseded memory")
    p.add_argument("--tenant", required=True)
    p.add_argument("--reason", required=True)
    p.add_argument("--actor", default="cli")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_undo)

    p = sub.add_parser("forget", help="erase a memory, a task, a session or a whole tenant")
    p.add_argument("--tenant", required=True)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--memory", help="a memory id (every version of it)")
    target.add_argument("--task")
    target.add_argument("--session")
    target.add_argument("--all", action="store_true", help="the whole tenant")
    p.add_argument("--reason", required=True)
    p.add_argument("--actor", default="cli")
    p.add_argument("--wait", action="store_true", help="until every copy is reached")
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_forget)

    p = sub.add_parser("history", help="every version of a memory and what happened to it")
    p.add_argument("memory_id")
    p.add_argument("--tenant", required=True)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_history)
