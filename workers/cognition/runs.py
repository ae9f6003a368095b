"""Sweeps as resumable runs: a run (``cognition_runs``) is moved on by short steps, each
working until its deadline and then advancing the run's cursor *from where it started*, so a
replayed step advances nothing and does not requeue. Every sweep takes its clock as an
argument: a run at the same clock over the same rows changes nothing the second time.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pipelines.records import ID_NAMESPACE
from workers.clients import Clients
from workers.db.runs import Run, advance_run, start_run
from workers.metrics import observe_sweep

log = logging.getLogger(__name__)


def utcnow() -> datetime:
    return datetime.now(UTC)


def parse_clock(now: str | None) -> datetime:
    """A task's ``now`` argument (ISO 8601, timezone-aware), or the wall clock."""
    if now is None:
        return utcnow()
    clock = datetime.fromisoformat(now)
    if clock.utcoffset() is None:
        raise ValueError(f"now must be timezone-aware, got {now!r}")
    return clock


def run_id_for(kind: str, tenant_id: str | None, clock: datetime) -> uuid.UUID:
    """One run per (kind, tenant, clock): the same tick published twice is one run."""
    return uuid.uuid5(ID_NAMESPACE, f"run\x1f{kind}\x1f{tenant_id or '*'}\x1f{clock.isoformat()}")


@dataclass
class StepOutcome:
    run_id: uuid.UUID
    cursor: str | None
    requeue: bool
    finished: bool
    stats: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": str(self.run_id),
            "cursor": self.cursor,
            "requeue": self.requeue,
            "finished": self.finished,
            "stats": self.stats,
        }


Body = Callable[[Run, float], tuple[str | None, bool, dict[str, Any]]]


def run_step(
    ctx: Clients,
    kind: str,
    run_id: uuid.UUID,
    clock: datetime,
    tenant_id: str | None,
    body: Body,
) -> StepOutcome:
    """One step of a run: ``body(run, deadline)`` returns (cursor, done, stats)."""
    with ctx.pool.connection() as conn:
        run = start_run(conn, run_id, kind, tenant_id, clock)
    if run.finished:
        return StepOutcome(run_id, run.cursor, requeue=False, finished=True)
    started = time.monotonic()
    deadline = started + ctx.settings.sweep_deadline_s
    cursor, done, stats = body(run, deadline)
    observe_sweep(kind, time.monotonic() - started)
    with ctx.pool.connection() as conn:
        advanced = advance_run(conn, run, cursor=cursor, stats=stats, finished=done)
    if not advanced:
        log.info("%s run %s: step replayed; the run moved on without it", kind, run_id)
    return StepOutcome(run_id, cursor, requeue=advanced and not done, finished=done, stats=stats)


def add_stat(stats: dict[str, Any], key: str, n: int = 1) -> None:
    stats[key] = stats.get(key, 0) + n
