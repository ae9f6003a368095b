"""Index maintenance tasks: the rebuild rule, weekly compaction, the nightly reconciler, and
the steps of a re-embed run after an embedding model change.

Each job is declared twice from one table, with one body: on the ``embed`` queue, consumed by
the owner of an embedded store (nobody else may open it), and on the ``maintenance`` queue
for a Qdrant server, which any maintenance worker may reach. ``IndexJob.task(settings)`` says
which one a deployment uses; the schedules and the re-embed steps publish to that one.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from workers.clients import get_clients
from workers.index.maintenance import (
    check_indexes,
    compact_indexes,
    rebuild_index,
    reconcile_indexes,
)
from workers.index.reembed import publish_reembed_step, reembed_step
from workers.index.targets import KINDS
from workers.queues import IndexJob, TaskName
from workers.tasking import memharness_task


def _kinds(kinds: list[str] | None) -> tuple[str, ...]:
    chosen = tuple(kinds or KINDS)
    unknown = set(chosen) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown collection kinds: {sorted(unknown)}")
    return chosen


def check_index(kinds: list[str] | None = None) -> dict[str, Any]:
    return check_indexes(get_clients(), _kinds(kinds))


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


BODIES: dict[IndexJob, Callable[..., dict[str, Any]]] = {
    IndexJob.CHECK: check_index,
    IndexJob.REBUILD: rebuild_one_index,
    IndexJob.COMPACT: compact_index,
    IndexJob.RECONCILE: reconcile_index,
    IndexJob.REEMBED_STEP: reembed_one_step,
}


# Each job's task on the owner's queue and on maintenance: {(job, "owner"|"server"): task}.
TASKS: dict[tuple[IndexJob, str], Any] = {
    (job, side): memharness_task(
        TaskName(f"memory.{queue}.{job.value}"), ignore_result=False, long_running=True
    )(body)
    for job, body in BODIES.items()
    for side, queue in (("owner", "embed"), ("server", "maintenance"))
}
