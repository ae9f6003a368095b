"""Access bumps, off the read path: a context that delivered memories counts one access each."""

from __future__ import annotations

from typing import TYPE_CHECKING

from workers.publish import publish
from workers.queues import TaskName

if TYPE_CHECKING:
    from celery import Celery

from collections.abc import Sequence
from datetime import datetime

from psycopg_pool import ConnectionPool

# -- access bumps, off the read path -----------------------------------------------------------

# A replay of the same bump finds last_accessed_at already equal to its time and changes
# nothing; a bump delivered late (after a newer one) still counts and never moves the time
# backwards. Only a replay that arrives after a newer bump counts twice.
TOUCH_SQL = """
    UPDATE memories
    SET access_count = access_count + 1,
        last_accessed_at = GREATEST(last_accessed_at, %(at)s)
    WHERE id = ANY(%(ids)s::uuid[]) AND tenant_id = %(tenant)s
      AND last_accessed_at IS DISTINCT FROM %(at)s
"""


def touch_memories(
    pool: ConnectionPool, tenant_id: str, memory_ids: Sequence[str], accessed_at: datetime
) -> int:
    """Count one access of each memory at ``accessed_at``; returns the rows bumped."""
    if not memory_ids:
        return 0
    with pool.connection() as conn:
        cursor = conn.execute(
            TOUCH_SQL, {"ids": list(memory_ids), "tenant": tenant_id, "at": accessed_at}
        )
        return cursor.rowcount


def publish_touch(
    tenant_id: str, memory_ids: list[str], accessed_at: datetime, *, app: Celery | None = None
) -> None:
    """Queue the bump of the memories a context delivered (``memory.maintenance`` queue)."""
    publish(
        TaskName.TOUCH_MEMORIES,
        app=app,
        tenant_id=tenant_id,
        memory_ids=memory_ids,
        accessed_at=accessed_at.isoformat(),
    )
