"""Every periodic job, declared once.

Celery beat runs these in a distributed deployment (``beat_schedule``); APScheduler runs the
same declarations inside the single embedded node (``schedules.embedded``). A job only
publishes a task: the work itself always runs on a worker, on the job's queue.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from celery.schedules import crontab

from config import Settings
from workers.queues import CeleryQueue


@dataclass(frozen=True)
class PeriodicJob:
    key: str
    task: str
    queue: CeleryQueue
    description: str
    every_s: float | None = None
    # crontab fields "minute hour day_of_month month day_of_week", local to the scheduler.
    cron: str | None = None

    def __post_init__(self) -> None:
        if (self.every_s is None) == (self.cron is None):
            raise ValueError(f"{self.key}: give exactly one of every_s and cron")


def declarations(settings: Settings) -> tuple[PeriodicJob, ...]:
    return (
        PeriodicJob(
            key="outbox-relay",
            task="memory.maintenance.relay_outbox",
            queue=CeleryQueue.MAINTENANCE,
            every_s=settings.relay_interval_s,
            description="re-publish write jobs whose message was lost or whose worker died",
        ),
    )


def _cron(expr: str) -> crontab:
    minute, hour, day_of_month, month, day_of_week = expr.split()
    return crontab(
        minute=minute,
        hour=hour,
        day_of_month=day_of_month,
        month_of_year=month,
        day_of_week=day_of_week,
    )


def beat_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    schedule: dict[str, dict[str, Any]] = {}
    for job in declarations(settings):
        entry: dict[str, Any] = {
            "task": job.task,
            "options": {"queue": job.queue.value, "expires": _expires_s(job)},
        }
        entry["schedule"] = job.every_s if job.every_s is not None else _cron(job.cron or "")
        schedule[job.key] = entry
    return schedule


def _expires_s(job: PeriodicJob) -> float:
    # A tick nobody ran before the next one is due is worthless: the next one replaces it.
    return job.every_s if job.every_s is not None else 3600.0
