"""Index maintenance tasks: the rebuild rule, weekly compaction, the nightly reconciler, and
the steps of a re-embed run after an embedding model change.

Each job is declared twice from one table, with one body: on the ``embed`` queue, consumed by
the owner of an embedded store (nobody else may open it), and on the ``maintenance`` queue
for a Qdrant server, which any maintenance worker may reach. ``IndexJob.task(settings)`` says
which one a deployment uses; the schedules and the re-embed steps publish to that one.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from celery.signals import worker_process_init

from workers.clients import get_clients
from workers.index.maintenance import (
    check_indexes,
    compact_indexes,
    rebuild_index,
    reconcile_indexes,
)
from workers.index.reembed import publish_reembed_step, reembed_step
from workers.index.restore import restore_missing, run_restore_step
from workers.index.targets import KINDS
from workers.queues import IndexJob, TaskName, index_queue
from workers.tasking import memharness_task

log = logging.getLogger(__name__)


def _kinds(kinds: list[str] | None) -> tuple[str, ...]:
    chosen = tuple(kinds or KINDS)
    unknown = set(chosen) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown collection kinds: {sorted(unknown)}")
    return chosen


def check_index(kinds: list[str] | None = None) -> dict[str, Any]:
    """The rebuild rule and re-embed runs, then each collection measured against
    PostgreSQL: one found short is restored in steps (``restore_index``)."""
    clients = get_clients()
    chosen = _kinds(kinds)
    out = check_indexes(clients, chosen)
    for kind, figures in restore_missing(clients, chosen).items():
        out[kind] = {**out.get(kind, {}), "completeness": figures}
    return out


def rebuild_one_index(kind: str) -> dict[str, Any]:
    return rebuild_index(get_clients(), _kinds([kind])[0]).as_dict()


def compact_index(kinds: list[str] | None = None) -> dict[str, Any]:
    return compact_indexes(get_clients(), _kinds(kinds))


def reconcile_index(kinds: list[str] | None = None) -> dict[str, Any]:
    return reconcile_indexes(get_clients(), _kinds(kinds))


def reembed_one_step(kind: str, run_id: str, cursor: str) -> dict[str, Any]:
    """One step of a re-embed run; a step that moved the run on publishes the next one."""
    clients = get_clients()
    chosen = _kinds([kind])[0]
    outcome = reembed_step(clients, chosen, uuid.UUID(run_id), cursor)
    if outcome["requeue"]:
        publish_reembed_step(clients, chosen, uuid.UUID(run_id), str(outcome["cursor"]))
    return outcome


def restore_index(kind: str, cursor: str) -> dict[str, Any]:
    """One step of a collection's restore; it requeues the next one until it is whole."""
    return run_restore_step(get_clients(), _kinds([kind])[0], cursor)


BODIES: dict[IndexJob, Callable[..., dict[str, Any]]] = {
    IndexJob.CHECK: check_index,
    IndexJob.REBUILD: rebuild_one_index,
    IndexJob.COMPACT: compact_index,
    IndexJob.RECONCILE: reconcile_index,
    IndexJob.REEMBED_STEP: reembed_one_step,
    IndexJob.RESTORE: restore_index,
}


# Each job's task on the owner's queue and on maintenance: {(job, "owner"|"server"): task}.
TASKS: dict[tuple[IndexJob, str], Any] = {
    (job, side): memharness_task(
        TaskName(f"memory.{queue}.{job.value}"), ignore_result=False, long_running=True
    )(body)
    for job, body in BODIES.items()
    for side, queue in (("owner", "embed"), ("server", "maintenance"))
}


@worker_process_init.connect
def _restore_short_indexes(**_: object) -> None:
    """At the start of the process that runs index maintenance: measure each collection
    (the warm-up measured it once already, before the read slot served) and start the
    restore of a short one. Connected here, beside the tasks it publishes, so that
    ``workers.app`` never imports the publisher that imports it."""
    from workers.app import get_app

    clients = get_clients()
    consumed = getattr(get_app().amqp.queues, "consume_from", None) or {}
    if index_queue(clients.settings).value not in consumed:
        return
    try:
        restore_missing(clients, force=clients.settings.store_is_embedded)
    except Exception as exc:  # PostgreSQL or Redis still starting: the index check covers it
        log.warning("index restore not started at start: %s", exc)
