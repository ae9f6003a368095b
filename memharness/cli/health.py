"""``memharness metrics | health | golden``: what an operator (or a probe) asks of a running
deployment.

``metrics`` prints a snapshot in the Prometheus text format (or ``--json``): the gauges read
from PostgreSQL and Redis now, and the counters and histograms of this host's workers (their
metric files under ``metrics_multiproc_dir``). ``health`` prints the health report and exits
1 when a component is unhealthy (2 on a bad argument), for probes. ``golden`` manages a
tenant's golden queries and runs them.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from config import get_settings
from pipelines.errors import InvalidInput, NotFound

EXIT_UNHEALTHY = 1
EXIT_BAD_INPUT = 2


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``metrics``, ``health`` and ``golden`` to the top-level commands."""
    p = subparsers.add_parser("metrics", help="a snapshot of the Prometheus metrics")
    p.add_argument("--json", action="store_true", help="samples as JSON instead of text")
    p.add_argument("--no-ping", action="store_true", help="skip the workers' ping (0.5 s)")
    p.set_defaults(func=_cmd_metrics)

    p = subparsers.add_parser(
        "health", help="storage, retrieval, compression; exit 1 when unhealthy"
    )
    p.add_argument("--json", action="store_true", help="the report as one JSON object")
    p.add_argument(
        "--no-live-index",
        action="store_true",
        help="use the last golden run's index counts instead of asking the store's owner",
    )
    p.set_defaults(func=_cmd_health)

    p = subparsers.add_parser("golden", help="golden queries: add, list, draw, run")
    golden = p.add_subparsers(dest="golden_command", required=True)
    g = golden.add_parser("add", help="a query and the memory it must find")
    g.add_argument("--tenant", required=True)
    g.add_argument("--query", required=True)
    g.add_argument("--expected", required=True, help="the memory id the query must find")
    g.set_defaults(func=_cmd_golden_add)
    g = golden.add_parser("list", help="a tenant's golden queries")
    g.add_argument("--tenant", required=True)
    g.add_argument("--json", action="store_true")
    g.set_defaults(func=_cmd_golden_list)
    g = golden.add_parser("draw", help="draw golden queries from a tenant's memories")
    g.add_argument("--tenant", required=True)
    g.add_argument("--count", type=int, default=None, help="default: golden_draw_count")
    g.set_defaults(func=_cmd_golden_draw)
    g = golden.add_parser("run", help="run the golden queries now, on a quality worker")
    g.add_argument("--tenant", default=None, help="default: every tenant")
    g.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for it")
    g.set_defaults(func=_cmd_golden_run)


def _bad(exc: Exception) -> int:
    print(f"error: {exc}", file=sys.stderr)
    return EXIT_BAD_INPUT


def samples_as_json(registry: Any) -> list[dict[str, Any]]:
    out = []
    for family in registry.collect():
        for sample in family.samples:
            out.append({"name": sample.name, "labels": dict(sample.labels), "value": sample.value})
    return out


def _cmd_metrics(args: argparse.Namespace) -> int:
    from prometheus_client import generate_latest

    from workers.health.endpoint import snapshot_registry

    registry, collector = snapshot_registry(get_settings(), ping_workers=not args.no_ping)
    try:
        if args.json:
            print(json.dumps(samples_as_json(registry), indent=2, sort_keys=True))
        else:
            sys.stdout.write(generate_latest(registry).decode())
    finally:
        collector.close()
    return 0


def format_report(report: dict[str, Any]) -> str:
    lines = [f"healthy: {'yes' if report['healthy'] else 'NO'}  ({report['checked_at']})"]
    for name, component in report["components"].items():
        lines.append(f"{name}: {'ok' if component['healthy'] else 'UNHEALTHY'}")
        for check in component["checks"]:
            mark = "ok " if check["ok"] else "BAD"
            detail = f"  ({check['detail']})" if check["detail"] else ""
            lines.append(
                f"  [{mark}] {check['name']} = {check['value']} ({check['limit']}){detail}"
            )
    for note in report["notes"]:
        lines.append(f"note: {note}")
    return "\n".join(lines)


def _cmd_health(args: argparse.Namespace) -> int:
    from workers.health.report import health_report

    report = health_report(get_settings(), live_index=not args.no_live_index).as_dict()
    print(json.dumps(report, indent=2, sort_keys=True) if args.json else format_report(report))
    return 0 if report["healthy"] else EXIT_UNHEALTHY


def _with_conn(fn: Any) -> Any:
    from workers.db import open_pool

    pool = open_pool(get_settings(), name="memharness-cli")
    try:
        with pool.connection() as conn:
            return fn(conn)
    finally:
        pool.close()


def _cmd_golden_add(args: argparse.Namespace) -> int:
    from workers.health.golden import add_golden_query

    try:
        golden_id = _with_conn(
            lambda c: add_golden_query(c, args.tenant, args.query, args.expected)
        )
    except (InvalidInput, NotFound) as exc:
        return _bad(exc)
    print(json.dumps({"id": golden_id}))
    return 0


def _cmd_golden_list(args: argparse.Namespace) -> int:
    from workers.health.golden import list_golden_queries

    try:
        rows = _with_conn(lambda c: list_golden_queries(c, args.tenant))
    except InvalidInput as exc:
        return _bad(exc)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            print(f"{row['source']:5}  {row['expected_id']}  {row['query']}")
    return 0


def _cmd_golden_draw(args: argparse.Namespace) -> int:
    from workers.health.golden import draw_for_tenant

    count = args.count if args.count is not None else get_settings().golden_draw_count
    try:
        drawn = _with_conn(lambda c: draw_for_tenant(c, args.tenant, count))
    except InvalidInput as exc:
        return _bad(exc)
    print(json.dumps({"tenant": args.tenant, "drawn": drawn}))
    return 0


def _cmd_golden_run(args: argparse.Namespace) -> int:
    from workers.app import get_app
    from workers.publish import publish
    from workers.queues import TaskName

    if args.tenant is not None:
        from pipelines.records import check_id

        try:
            check_id("tenant", args.tenant)
        except InvalidInput as exc:
            return _bad(exc)
    settings = get_settings()
    result = publish(TaskName.GOLDEN_QUERIES, app=get_app(settings), tenant_id=args.tenant)
    print(json.dumps(result.get(timeout=args.timeout), indent=2, sort_keys=True))
    return 0
