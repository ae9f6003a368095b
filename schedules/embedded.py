"""APScheduler running ``declarations`` inside one embedded node process."""

from __future__ import annotations

import logging

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger
from celery import Celery

from config import Settings
from schedules.declarations import PeriodicJob, declarations
from schedules.leader import LeaderLock, leader_lock, resolve_zone
from workers.publish import publish

log = logging.getLogger(__name__)


def _publish(app: Celery, job: PeriodicJob, lock: LeaderLock) -> None:
    # Two embedded nodes sharing one Redis would double every job; the lease settles it.
    if lock.is_leader():
        publish(job.task, app=app)


def build_scheduler(settings: Settings, app: Celery) -> BackgroundScheduler:
    zone = resolve_zone(settings.schedule_timezone or None)
    scheduler = BackgroundScheduler(timezone=zone)
    lock = leader_lock(settings.redis_url, settings.beat_leader_ttl_s)
    for job in declarations(settings):
        if job.every_s is not None:
            trigger: IntervalTrigger | CronTrigger = IntervalTrigger(seconds=job.every_s)
        else:
            trigger = CronTrigger.from_crontab(job.cron or "", timezone=zone)
        scheduler.add_job(
            _publish,
            trigger,
            args=(app, job, lock),
            id=job.key,
            name=job.description,
            coalesce=True,
            max_instances=1,
            misfire_grace_time=int(job.every_s or 300),
        )
    return scheduler
