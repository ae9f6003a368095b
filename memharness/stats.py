"""``memharness stats``: the write funnel, job states, dead letters, task counters, and the
token ledger's calls and tokens per tenant and call with their estimated cost."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta
from typing import Any

import psycopg
import redis

from config import Settings
from workers.ledger import LedgerRow, Prices, read_usage, total
from workers.queues import TaskName
from workers.tasking import METRICS_KEY
from workers.write.sql import funnel


def collect_stats(
    settings: Settings, tenant_id: str | None = None, *, days: int | None = None
) -> dict[str, Any]:
    since = (datetime.now(UTC) - timedelta(days=days - 1)).date() if days else None
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        counts = funnel(conn, tenant_id)
        dead_letters = conn.execute("SELECT count(*) FROM dead_letters").fetchone()
        reasons = conn.execute(
            "SELECT dead_reason, count(*) FROM jobs WHERE status = 'dead' "
            "GROUP BY 1 ORDER BY 2 DESC LIMIT 5"
        ).fetchall()
        usage = read_usage(conn, tenant_id, since)
    tasks: dict[str, dict[str, float]] = {}
    try:
        client = redis.Redis.from_url(settings.redis_url, socket_timeout=2)
        for name in sorted(TaskName):
            raw = client.hgetall(METRICS_KEY.format(name=name))
            if raw:
                tasks[name] = {_text(k): float(v) for k, v in raw.items()}
    except redis.RedisError:
        tasks = {}
    return {
        "funnel": counts,
        "dead_letters": int(dead_letters[0]) if dead_letters else 0,
        "dead_job_reasons": {str(reason): int(n) for reason, n in reasons},
        "tasks": tasks,
        "llm": llm_section(usage, Prices.of(settings), since),
    }


def llm_section(rows: Iterable[LedgerRow], prices: Prices, since: date | None) -> dict[str, Any]:
    """Per tenant: calls and tokens of each call kind, their sums and the estimated cost."""
    tenants: dict[str, dict[str, Any]] = {}
    for row in rows:
        tenant = tenants.setdefault(row.tenant_id, {"calls": {}, "usage": []})
        tenant["calls"][row.call] = {
            "calls": row.usage.calls,
            **row.usage.by_kind(),
            "cost_usd": round(prices.cost_usd(row.usage), 6),
        }
        tenant["usage"].append(row.usage)
    out: dict[str, Any] = {}
    for name, tenant in sorted(tenants.items()):
        summed = total(tenant.pop("usage"))
        tenant["total"] = {
            "calls": summed.calls,
            **summed.by_kind(),
            "cost_usd": round(prices.cost_usd(summed), 6),
        }
        out[name] = tenant
    return {
        "since": since.isoformat() if since else None,
        "usd_per_mtok": {
            "input": prices.input_per_mtok,
            "cached": prices.cached_per_mtok,
            "output": prices.output_per_mtok,
        },
        "tenants": out,
    }


def format_stats(stats: dict[str, Any]) -> str:
    f = stats["funnel"]
    total = sum(v for k, v in f.items() if k.startswith("memories_")) + f.get("tier1_drop", 0)
    lines = [
        "write funnel",
        f"  writes received                 {total}",
        f"  stopped at tier 1 (rules)       {f.get('tier1_drop', 0)}",
        f"  passed tier 1                   {total - f.get('tier1_drop', 0)}",
        f"  tier 2 keep / drop              {f.get('tier2_keep', 0)} / {f.get('tier2_drop', 0)}",
        f"  reached tier 3 (uncertain)      {f.get('tier3_keep', 0) + f.get('tier3_drop', 0)}",
        f"  tier 3 keep / drop              {f.get('tier3_keep', 0)} / {f.get('tier3_drop', 0)}",
        f"  stored                          {f.get('memories_stored', 0)}",
        f"  discarded                       {f.get('memories_discarded', 0)}",
        f"  pending                         {f.get('memories_pending', 0)}",
        f"  dead-lettered                   {f.get('memories_dead', 0)}",
        "jobs: " + ", ".join(f"{k[5:]} {v}" for k, v in sorted(f.items()) if k.startswith("jobs_")),
        f"dead letters (tasks): {stats['dead_letters']}",
    ]
    for reason, n in stats["dead_job_reasons"].items():
        lines.append(f"  dead job x{n}: {reason}")
    if stats["tasks"]:
        lines.append("task runs")
        for name, counters in stats["tasks"].items():
            runs = {k: int(v) for k, v in counters.items() if k != "seconds"}
            lines.append(f"  {name:34s} {runs}  {counters.get('seconds', 0.0):.2f}s")
    lines += format_llm(stats["llm"])
    return "\n".join(lines)


def format_llm(llm: dict[str, Any]) -> list[str]:
    prices = llm["usd_per_mtok"]
    since = f" since {llm['since']}" if llm["since"] else ""
    lines = [
        f"LLM tokens{since} (estimated at USD {prices['input']}/{prices['cached']}/"
        f"{prices['output']} per million input/cached/output)"
    ]
    if not llm["tenants"]:
        return [*lines, "  no model calls recorded (the offline rules spend no tokens)"]
    header = f"    {'call':12s} {'calls':>7s} {'prompt':>10s} {'cached':>10s} "
    header += f"{'completion':>10s} {'reasoning':>10s} {'USD':>10s}"
    for tenant, figures in llm["tenants"].items():
        lines += [f"  tenant {tenant}", header]
        for call, n in [*figures["calls"].items(), ("total", figures["total"])]:
            lines.append(
                f"    {call:12s} {n['calls']:>7d} {n['prompt']:>10d} {n['cached']:>10d} "
                f"{n['completion']:>10d} {n['reasoning']:>10d} {n['cost_usd']:>10.4f}"
            )
    return lines


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
