"""The Celery application: JSON only, late acks, prefetch 1, limits inside the visibility
timeout, events on for Flower. Built from ``Settings``; nothing connects at import time."""

from __future__ import annotations

import logging

from celery import Celery
from celery.signals import worker_process_init, worker_process_shutdown
from kombu import Exchange, Queue

from config import Settings, get_settings
from workers.queues import CeleryQueue

log = logging.getLogger(__name__)

TASK_MODULES = (
    "workers.tasks.write",
    "workers.tasks.maintenance",
    "workers.tasks.recall",
    "workers.tasks.index",
    "workers.tasks.cognition",
)


def celery_config(settings: Settings) -> dict[str, object]:
    return {
        "broker_url": settings.redis_url,
        "result_backend": settings.redis_url,
        "task_ignore_result": True,
        "result_expires": 3600,
        # JSON is the wire format; a pickled message is refused by the consumer.
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        # A message is acknowledged after its task finishes, and given back to the broker if
        # the process running it dies: a crash never loses a job.
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_time_limit": settings.task_time_limit_s,
        "task_soft_time_limit": settings.task_soft_time_limit_s,
        "broker_transport_options": {
            "visibility_timeout": settings.broker_visibility_timeout_s,
        },
        "result_backend_transport_options": {
            "visibility_timeout": settings.broker_visibility_timeout_s,
        },
        "broker_connection_retry_on_startup": True,
        "task_queues": [
            Queue(queue.value, Exchange(queue.value, type="direct"), routing_key=queue.value)
            for queue in CeleryQueue
        ],
        "task_default_queue": CeleryQueue.MAINTENANCE.value,
        "task_routes": {f"memory.{queue.value}.*": {"queue": queue.value} for queue in CeleryQueue},
        # Flower reads task events.
        "worker_send_task_events": True,
        "task_send_sent_event": True,
        "task_track_started": True,
        "worker_hijack_root_logger": False,
        "enable_utc": True,
        "timezone": "UTC",
    }


def create_app(settings: Settings | None = None) -> Celery:
    from schedules.declarations import beat_schedule

    settings = settings or get_settings()
    app = Celery("memharness", set_as_current=True)
    app.conf.update(celery_config(settings))
    app.conf.beat_schedule = beat_schedule(settings)
    app.conf.include = list(TASK_MODULES)
    return app


app = create_app()


@worker_process_init.connect
def _warm_process_clients(**_: object) -> None:
    # Built here, once per pool process, after the fork: never inherited from the parent.
    from workers.context import get_context, tune_gc

    get_context()
    consumed = getattr(app.amqp.queues, "consume_from", None) or {}
    if CeleryQueue.RECALL.value in consumed:
        # The store owner serves context(): its first call should not pay for opening the
        # stores and loading the tokenizer (about half a second).
        from workers.tasks.recall import read_stores

        try:
            read_stores().counter.count("warm")
        except Exception as exc:  # a store still starting: the first call builds them
            log.warning("read path not warmed at start: %s", exc)
    tune_gc()


@worker_process_shutdown.connect
def _close_process_clients(**_: object) -> None:
    from workers.context import close_context

    close_context()
