"""Every periodic job, declared once.

Celery beat runs these in a distributed deployment (``beat_schedule``); APScheduler runs the
same declarations inside the single embedded node (``schedules.embedded``). A job only
publishes a task: the work itself always runs on a worker, on the job's queue.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from celery.schedules import crontab
from celery.schedules import schedule as schedule_every

from config import Settings
from schedules.leader import LeaderGated, ZonedCrontab
from workers.queues import CeleryQueue, IndexJob, TaskName


@dataclass(frozen=True)
class PeriodicJob:
    key: str
    task: TaskName
    description: str
    every_s: float | None = None
    # crontab fields "minute hour day_of_month month day_of_week", local to the scheduler.
    cron: str | None = None

    def __post_init__(self) -> None:
        if (self.every_s is None) == (self.cron is None):
            raise ValueError(f"{self.key}: give exactly one of every_s and cron")

    @property
    def queue(self) -> CeleryQueue:
        return self.task.queue


def declarations(settings: Settings) -> tuple[PeriodicJob, ...]:
    return (
        PeriodicJob(
            key="outbox-relay",
            task=TaskName.RELAY_OUTBOX,
            every_s=settings.relay_interval_s,
            description="re-publish write jobs whose message was lost or whose worker died",
        ),
        # Index maintenance runs in the embedded store's owner (embed queue), or on any
        # maintenance worker with a Qdrant server (IndexJob.task).
        PeriodicJob(
            key="index-check",
            task=IndexJob.CHECK.task(settings),
            every_s=settings.index_check_interval_s,
            description="rebuild a vector collection once too much of it was deleted",
        ),
        PeriodicJob(
            key="index-compaction",
            task=IndexJob.COMPACT.task(settings),
            cron=settings.index_compaction_cron,
            description="vacuum deleted points and merge segments of the vector collections",
        ),
        PeriodicJob(
            key="index-reconcile",
            task=IndexJob.RECONCILE.task(settings),
            cron=settings.index_reconcile_cron,
            description="make the vector index equal to PostgreSQL: embed missing, drop orphans",
        ),
        # Background cognition (workers.cognition).
        PeriodicJob(
            key="decay-sweep",
            task=TaskName.DECAY_SWEEP,
            every_s=settings.decay_interval_s,
            description="forgetting curve over idle tenants: store retention, evict and log",
        ),
        PeriodicJob(
            key="compression-promotion",
            task=TaskName.SCHEDULE_COMPRESSION,
            every_s=settings.compress_tick_s,
            description="start an L0->L1->L2 compression sweep when due; sooner past the "
            "capacity watermark",
        ),
        PeriodicJob(
            key="quality-sampling",
            task=TaskName.QUALITY_SWEEP,
            every_s=settings.quality_interval_s,
            description="check summaries not checked yet; roll back those below the bar",
        ),
        PeriodicJob(
            key="nightly-consolidation",
            task=TaskName.CONSOLIDATE_NIGHTLY,
            cron=settings.consolidate_cron,
            description="per tenant: episodes to semantic knowledge",
        ),
        # Operations (workers.health).
        PeriodicJob(
            key="golden-queries",
            task=TaskName.GOLDEN_QUERIES,
            every_s=settings.golden_interval_s,
            description="ask every tenant's golden queries through the owner's recall; store "
            "the hit rate, latencies and index counts",
        ),
        PeriodicJob(
            key="cognition-relay",
            task=TaskName.RELAY_COGNITION,
            every_s=settings.relay_interval_s,
            description="re-publish overdue embed/unindex jobs and links of unlinked memories",
        ),
    )


def _cron(expr: str, zone: str | None = None) -> crontab:
    minute, hour, day_of_month, month, day_of_week = expr.split()
    return ZonedCrontab(
        zone or None,
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
        inner = (
            schedule_every(job.every_s)
            if job.every_s is not None
            else _cron(job.cron or "", settings.schedule_timezone)
        )
        # Exactly one beat acts: the others see every entry as not due (schedules.leader).
        entry["schedule"] = LeaderGated(inner, settings.redis_url, settings.beat_leader_ttl_s)
        schedule[job.key] = entry
    return schedule


def _expires_s(job: PeriodicJob) -> float:
    # A tick nobody ran before the next one is due is worthless: the next one replaces it.
    return job.every_s if job.every_s is not None else 3600.0
