"""The safety net of the ``embed`` queue's background work, run by beat."""

from __future__ import annotations

from typing import Any

from workers.clients import Clients
from workers.cognition.sql import (
    unlinked_ids,
)
from workers.db.jobs import EMBED_JOB, UNINDEX_JOB, count_due_jobs
from workers.own.correct import SETTLE_JOB
from workers.own.forget import due_requests
from workers.publish import publish_quietly
from workers.queues import TaskName


def relay_cognition(ctx: Clients) -> dict[str, Any]:
    """The safety net of the embed queue: overdue embed/unindex jobs, corrections and
    erasures owed, unlinked memories."""
    grace_s = ctx.settings.relay_interval_s / 2
    with ctx.pool.connection() as conn:
        due = count_due_jobs(conn, kind=EMBED_JOB, grace_s=grace_s)
        due += count_due_jobs(conn, kind=UNINDEX_JOB, grace_s=grace_s)
        # Corrections to settle and erasures owed: a lost message or a killed owner.
        owed = count_due_jobs(conn, kind=SETTLE_JOB, grace_s=grace_s) + due_requests(conn)
        # A stored memory waits a few relay periods for the write hook's link task first.
        unlinked = unlinked_ids(
            conn,
            older_than_s=ctx.settings.relay_interval_s * 4,
            limit=ctx.settings.sweep_batch_size,
        )
    if due:
        publish_quietly(TaskName.DRAIN_EMBEDDINGS)
    if owed:
        publish_quietly(TaskName.SETTLE_OWNERSHIP)
    if unlinked:
        publish_quietly(TaskName.LINK_MEMORIES, memory_ids=[str(i) for i in unlinked])
    return {"due_jobs": due, "owed": owed, "unlinked": len(unlinked)}
