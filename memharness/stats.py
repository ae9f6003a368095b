"""``memharness stats``: the write funnel, job states, dead letters and task counters."""

from __future__ import annotations

from typing import Any

import psycopg
import redis

from config import Settings
from workers.queues import TaskName
from workers.tasking import METRICS_KEY
from workers.write.sql import funnel


def collect_stats(settings: Settings, tenant_id: str | None = None) -> dict[str, Any]:
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        counts = funnel(conn, tenant_id)
        dead_letters = conn.execute("SELECT count(*) FROM dead_letters").fetchone()
        reasons = conn.execute(
            "SELECT dead_reason, count(*) FROM jobs WHERE status = 'dead' "
            "GROUP BY 1 ORDER BY 2 DESC LIMIT 5"
        ).fetchall()
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
    return "\n".join(lines)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
