"""Index maintenance tasks: the rebuild rule, weekly compaction, the nightly reconciler,
and the steps of a re-embed run after an embedding model change.

Each job exists twice, with one body (``workers.index_service``): on the ``embed`` queue,
consumed by the owner of an embedded store (nobody else may open it), and on the
``maintenance`` queue for a Qdrant server, which any maintenance worker may reach.
``index_queue`` says which one a deployment uses; the schedules publish to that one.
"""

from __future__ import annotations

import uuid
from typing import Any

from config import Settings, get_settings
from workers.context import get_context
from workers.index_service import (
    KINDS,
    OWNER_REEMBED_TASK,
    SERVER_REEMBED_TASK,
    check_indexes,
    compact_indexes,
    publish_reembed_step,
    rebuild_index,
    reconcile_indexes,
    reembed_step,
)
from workers.queues import CeleryQueue
from workers.tasking import memharness_task

_settings = get_settings()
# A rebuild of 100k points builds its HNSW graph for ~133 s on these machines (DESIGN.md):
# give the long jobs half the visibility timeout, as the settings validator does for all.
LONG_LIMIT_S = _settings.broker_visibility_timeout_s // 2
LONG_SOFT_LIMIT_S = LONG_LIMIT_S - 30


def index_queue(settings: Settings) -> CeleryQueue:
    """The queue of index maintenance: the owner's in embedded mode, else maintenance."""
    return CeleryQueue.MAINTENANCE if settings.qdrant_url else CeleryQueue.EMBED


def _kinds(kinds: list[str] | None) -> tuple[str, ...]:
    chosen = tuple(kinds or KINDS)
    unknown = set(chosen) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown collection kinds: {sorted(unknown)}")
    return chosen


def _reembed(kind: str, run_id: str, cursor: str) -> dict[str, Any]:
    """One step of a re-embed run; a step that moved the run on publishes the next one."""
    ctx = get_context()
    chosen = _kinds([kind])[0]
    outcome = reembed_step(ctx, chosen, uuid.UUID(run_id), cursor)
    if outcome["requeue"]:
        publish_reembed_step(ctx, chosen, uuid.UUID(run_id), str(outcome["cursor"]))
    return outcome


# -- embedded mode: the store's owner ------------------------------------------------------------


@memharness_task(
    "memory.embed.check_index",
    queue=CeleryQueue.EMBED,
    ignore_result=False,
    time_limit=LONG_LIMIT_S,
    soft_time_limit=LONG_SOFT_LIMIT_S,
)
def owner_check_index_task(kinds: list[str] | None = None) -> dict[str, Any]:
    return check_indexes(get_context(), _kinds(kinds))


@memharness_task(
    "memory.embed.rebuild_index",
    queue=CeleryQueue.EMBED,
    ignore_result=False,
    time_limit=LONG_LIMIT_S,
    soft_time_limit=LONG_SOFT_LIMIT_S,
)
def owner_rebuild_index_task(kind: str) -> dict[str, Any]:
    return rebuild_index(get_context(), _kinds([kind])[0]).as_dict()


@memharness_task(
    "memory.embed.compact_index",
    queue=CeleryQueue.EMBED,
    ignore_result=False,
    time_limit=LONG_LIMIT_S,
    soft_time_limit=LONG_SOFT_LIMIT_S,
)
def owner_compact_index_task(kinds: list[str] | None = None) -> dict[str, Any]:
    return compact_indexes(get_context(), _kinds(kinds))


@memharness_task(
    "memory.embed.reconcile_index",
    queue=CeleryQueue.EMBED,
    ignore_result=False,
    time_limit=LONG_LIMIT_S,
    soft_time_limit=LONG_SOFT_LIMIT_S,
)
def owner_reconcile_index_task(kinds: list[str] | None = None) -> dict[str, Any]:
    return reconcile_indexes(get_context(), _kinds(kinds))


@memharness_task(
    OWNER_REEMBED_TASK,
    queue=CeleryQueue.EMBED,
    ignore_result=False,
    time_limit=LONG_LIMIT_S,
    soft_time_limit=LONG_SOFT_LIMIT_S,
)
def owner_reembed_step_task(kind: str, run_id: str, cursor: str) -> dict[str, Any]:
    return _reembed(kind, run_id, cursor)


# -- server mode: any maintenance worker ---------------------------------------------------------


@memharness_task(
    "memory.maintenance.check_index",
    queue=CeleryQueue.MAINTENANCE,
    ignore_result=False,
    time_limit=LONG_LIMIT_S,
    soft_time_limit=LONG_SOFT_LIMIT_S,
)
def check_index_task(kinds: list[str] | None = None) -> dict[str, Any]:
    return check_indexes(get_context(), _kinds(kinds))


@memharness_task(
    "memory.maintenance.rebuild_index",
    queue=CeleryQueue.MAINTENANCE,
    ignore_result=False,
    time_limit=LONG_LIMIT_S,
    soft_time_limit=LONG_SOFT_LIMIT_S,
)
def rebuild_index_task(kind: str) -> dict[str, Any]:
    return rebuild_index(get_context(), _kinds([kind])[0]).as_dict()


@memharness_task(
    "memory.maintenance.compact_index",
    queue=CeleryQueue.MAINTENANCE,
    ignore_result=False,
    time_limit=LONG_LIMIT_S,
    soft_time_limit=LONG_SOFT_LIMIT_S,
)
def compact_index_task(kinds: list[str] | None = None) -> dict[str, Any]:
    return compact_indexes(get_context(), _kinds(kinds))


@memharness_task(
    "memory.maintenance.reconcile_index",
    queue=CeleryQueue.MAINTENANCE,
    ignore_result=False,
    time_limit=LONG_LIMIT_S,
    soft_time_limit=LONG_SOFT_LIMIT_S,
)
def reconcile_index_task(kinds: list[str] | None = None) -> dict[str, Any]:
    return reconcile_indexes(get_context(), _kinds(kinds))


@memharness_task(
    SERVER_REEMBED_TASK,
    queue=CeleryQueue.MAINTENANCE,
    ignore_result=False,
    time_limit=LONG_LIMIT_S,
    soft_time_limit=LONG_SOFT_LIMIT_S,
)
def reembed_step_task(kind: str, run_id: str, cursor: str) -> dict[str, Any]:
    return _reembed(kind, run_id, cursor)
