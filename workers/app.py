"""The Celery application: JSON only, late acks, prefetch 1, limits inside the visibility
timeout, events on for Flower. Built from ``Settings`` on first use, once per process and
configuration; nothing is built or connects at import time.

``celery -A workers.app:app`` reads the module attribute ``app``, which builds this process's
app from the environment's settings.
"""

from __future__ import annotations

import logging
from collections.abc import Container
from typing import TYPE_CHECKING, Any

from celery import Celery
from celery.signals import (
    celeryd_after_setup,
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
)
from kombu import Exchange, Queue

from config import Settings, get_settings
from workers.queues import CeleryQueue

if TYPE_CHECKING:
    from workers.clients import Clients

log = logging.getLogger(__name__)

TASK_MODULES = (
    "workers.write.tasks",
    "workers.read.tasks",
    "workers.cognition.tasks",
    "workers.index.tasks",
    "workers.own.tasks",
    "workers.health.tasks",
    "workers.probes",
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
    from workers.logs import hide_task_results

    settings = settings or get_settings()
    # Task results (recall answers, contexts) are memory content: never in the worker log.
    hide_task_results()
    app = Celery("memharness", set_as_current=True)
    app.conf.update(celery_config(settings))
    app.conf.beat_schedule = beat_schedule(settings)
    app.conf.include = list(TASK_MODULES)
    return app


_apps: dict[str, Celery] = {}


def get_app(settings: Settings | None = None) -> Celery:
    """This process's app for ``settings`` (default: the environment's), built on first use.

    An agent that passes its own settings (another broker, a test's database) gets an app of
    its own; every caller with the same settings shares one.
    """
    settings = settings or get_settings()
    key = settings.model_dump_json()
    if key not in _apps:
        _apps[key] = create_app(settings)
    return _apps[key]


def __getattr__(name: str) -> Celery:
    if name == "app":
        return get_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Set in the worker's main process when it owns an embedded store and was asked to serve
# ``recall``: its Celery consumer then leaves that queue to the read slot (workers.read.slot),
# which runs in the process holding the store (the pool's child, inherited across the fork).
_read_slot_hostname: str | None = None
_read_slot_in_main = False


@celeryd_after_setup.connect
def _move_recall_to_read_slot(sender: str, instance: Any, **_: object) -> None:
    """A store owner serves ``recall`` on its read slot, never on its single Celery slot,
    where a context() would wait behind drains, link passes, rebuilds and re-embeds."""
    global _read_slot_hostname, _read_slot_in_main
    from celery.concurrency import get_implementation
    from celery.concurrency.prefork import TaskPool

    app = instance.app
    consumed = app.amqp.queues.consume_from or {}
    if not get_settings().store_is_embedded or CeleryQueue.RECALL.value not in consumed:
        return
    app.amqp.queues.deselect([CeleryQueue.RECALL.value])
    _read_slot_hostname = sender
    # With the prefork pool the store lives in the pool's child; with solo or threads, here.
    _read_slot_in_main = not issubclass(get_implementation(instance.pool_cls), TaskPool)
    log.info("%s serves %s on its read slot", sender, CeleryQueue.RECALL.value)


def serves_reads() -> bool:
    """Whether this worker process is the store's owner and serves ``recall``."""
    return _read_slot_hostname is not None


@worker_process_init.connect
def _warm_process_clients(**_: object) -> None:
    # Built here, once per pool process, after the fork: never inherited from the parent.
    from workers.clients import get_clients, tune_gc

    clients = get_clients()
    consumed = getattr(get_app().amqp.queues, "consume_from", None) or {}
    if serves_reads() or CeleryQueue.RECALL.value in consumed:
        # The store owner serves context(): its first call should not pay for opening the
        # stores and loading the tokenizer (about half a second).
        try:
            clients.counter.count("warm")
            clients.vectors, clients.embedder, clients.llm  # noqa: B018 (built, not used)
        except Exception as exc:  # a store still starting: the first call builds them
            log.warning("read path not warmed at start: %s", exc)
    tune_gc()
    # Before the read slot serves: a collection found short (its directory lost while the
    # owner was down) is marked so at once, and its restore starts.
    _measure_indexes(clients, consumed)
    if serves_reads() and not _read_slot_in_main:
        _start_read_slot()


def _measure_indexes(clients: Clients, consumed: Container[str]) -> None:
    """In the process that runs index maintenance (the store's owner, embedded; a
    maintenance worker with a Qdrant server): measure each collection against PostgreSQL,
    so that reads over a short one say so from the first (``workers.index.completeness``;
    ``workers.index.tasks`` then starts its restore)."""
    from workers.index.completeness import measure_index
    from workers.index.targets import KINDS
    from workers.queues import index_queue

    if index_queue(clients.settings).value not in consumed:
        return
    try:
        for kind in KINDS:
            state = measure_index(clients, kind)
            log.info(
                "index %s at start: %s points, %s live rows, %s missing",
                kind,
                state.indexed,
                state.live,
                state.missing,
            )
    except Exception as exc:  # PostgreSQL or Redis still starting: the index check covers it
        log.warning("index not measured at start: %s", exc)


@worker_ready.connect
def _start_read_slot_in_main(**_: object) -> None:
    if serves_reads() and _read_slot_in_main:
        _start_read_slot()


def _start_read_slot() -> None:
    from workers.read.reply import start_reply_slot
    from workers.read.slot import start_read_slot

    assert _read_slot_hostname is not None
    start_read_slot(get_app(), _read_slot_hostname)
    # Direct reads (workers.read.ask) on a thread of their own, beside the recall queue's.
    start_reply_slot(get_app(), get_settings().redis_url)


@worker_process_shutdown.connect
def _close_process_clients(**_: object) -> None:
    from workers.clients import close_clients
    from workers.read.reply import stop_reply_slot
    from workers.read.slot import stop_read_slot

    stop_read_slot()  # the read in hand finishes (and is acked) before the store closes
    stop_reply_slot()
    close_clients()


@worker_shutdown.connect
def _stop_read_slot_in_main(**_: object) -> None:
    if _read_slot_in_main:
        from workers.read.reply import stop_reply_slot
        from workers.read.slot import stop_read_slot

        stop_read_slot()
        stop_reply_slot()
