"""APScheduler running ``declarations`` inside one embedded node process."""

from __future__ import annotations

import logging

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger
from celery import Celery

from config import Settings
from schedules.declarations import PeriodicJob, declarations

log = logging.getLogger(__name__)


def _publish(app: Celery, job: PeriodicJob) -> None:
    app.send_task(job.task, queue=job.queue.value)


def build_scheduler(settings: Settings, app: Celery) -> BackgroundScheduler:
    scheduler = BackgroundScheduler(timezone="UTC")
    for job in declarations(settings):
        if job.every_s is not None:
            trigger: IntervalTrigger | CronTrigger = IntervalTrigger(seconds=job.every_s)
        else:
            trigger = CronTrigger.from_crontab(job.cron or "")
        scheduler.add_job(
            _publish,
            trigger,
            args=(app, job),
            id=job.key,
            name=job.description,
            coalesce=True,
            max_instances=1,
            misfire_grace_time=int(job.every_s or 300),
        )
    return scheduler
