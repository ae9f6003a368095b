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
        # Index maintenance runs in the embedded store's owner (embed queue), or on any
        # maintenance worker with a Qdrant server (workers.tasks.index.index_queue).
        PeriodicJob(
            key="index-check",
            task="memory.maintenance.check_index"
            if settings.qdrant_url
            else "memory.embed.check_index",
            queue=CeleryQueue.MAINTENANCE if settings.qdrant_url else CeleryQueue.EMBED,
            every_s=settings.index_check_interval_s,
            description="rebuild a vector collection once too much of it was deleted",
        ),
        PeriodicJob(
            key="index-compaction",
            task="memory.maintenance.compact_index"
            if settings.qdrant_url
            else "memory.embed.compact_index",
            queue=CeleryQueue.MAINTENANCE if settings.qdrant_url else CeleryQueue.EMBED,
            cron=settings.index_compaction_cron,
            description="vacuum deleted points and merge segments of the vector collections",
        ),
        PeriodicJob(
            key="index-reconcile",
            task="memory.maintenance.reconcile_index"
            if settings.qdrant_url
            else "memory.embed.reconcile_index",
            queue=CeleryQueue.MAINTENANCE if settings.qdrant_url else CeleryQueue.EMBED,
            cron=settings.index_reconcile_cron,
            description="make the vector index equal to PostgreSQL: embed missing, drop orphans",
        ),
        # Background cognition (workers.cognition_service).
        PeriodicJob(
            key="decay-sweep",
            task="memory.maintenance.decay_sweep",
            queue=CeleryQueue.MAINTENANCE,
            every_s=settings.decay_interval_s,
            description="forgetting curve over idle tenants: store retention, evict and log",
        ),
        PeriodicJob(
            key="compression-promotion",
            task="memory.maintenance.schedule_compression",
            queue=CeleryQueue.MAINTENANCE,
            every_s=settings.compress_tick_s,
            description="start an L0->L1->L2 compression sweep when due; sooner past the "
            "capacity watermark",
        ),
        PeriodicJob(
            key="quality-sampling",
            task="memory.quality.sweep",
            queue=CeleryQueue.QUALITY,
            every_s=settings.quality_interval_s,
            description="check summaries not checked yet; roll back those below the bar",
        ),
        PeriodicJob(
            key="nightly-consolidation",
            task="memory.consolidate.nightly",
            queue=CeleryQueue.CONSOLIDATE,
            cron=settings.consolidate_cron,
            description="per tenant: episodes to semantic knowledge",
        ),
        PeriodicJob(
            key="cognition-relay",
            task="memory.maintenance.relay_cognition",
            queue=CeleryQueue.MAINTENANCE,
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
