"""The write path of ``record()``, planned once for both clients (sync and asyncio).

``plan_write`` is a generator: it yields the SQL statements to run, one at a time, and is sent
each one's first row back; its return value says what the write did, which turns go into the
working-memory window and whether a drain is due. ``MemoryClient`` and ``AsyncMemoryClient``
are thin drivers that run the statements on their own connections (the structure of httpx's
and redis-py's twin clients): the rules live here once.
"""

from __future__ import annotations

import uuid
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pipelines.write.filter import tier1_filter
from pipelines.write.request import NewMemory
from workers.window import queue_push, turn_record
from workers.write.sql import (
    FIND_CONFLICT,
    INSERT_DECISION,
    INSERT_MEMORY_WITH_JOB,
    conflict_from_row,
    conflict_outcome,
    conflict_params,
    drop_params,
    memory_params,
)
from workers.write.wake import queue_drain_flag

ReceiptStatus = Literal["accepted", "duplicate", "dropped"]
ACCEPTED = "queued for the write workers"


@dataclass(frozen=True)
class WriteReceipt:
    """What ``record`` did. ``memory_id`` is stable: a retried call returns the same one."""

    memory_id: uuid.UUID
    status: ReceiptStatus
    reason: str


@dataclass(frozen=True)
class Statement:
    """One SQL statement of a plan; ``fetch`` says the plan wants its first row back."""

    query: str
    params: tuple[Any, ...]
    fetch: bool


@dataclass(frozen=True)
class WriteOutcome:
    receipt: WriteReceipt
    # Turns for the session windows after COMMIT (a dropped turn too: the window is the
    # conversation as it happened); a duplicate adds none.
    window: tuple[NewMemory, ...]
    # The write that wants a drain published (None: nothing new in the outbox).
    publish_id: uuid.UUID | None


Plan = Generator[Statement, tuple[Any, ...] | None, WriteOutcome]


def plan_write(new: NewMemory) -> Plan:
    """tier-1 rules, then one INSERT of the memory and its outbox row (or the drop decision);
    a conflict is resolved by ``plan_conflict``."""
    verdict = tier1_filter(new.content)
    if not verdict.keep:
        yield Statement(INSERT_DECISION, drop_params(new, verdict.reason), fetch=False)
        return WriteOutcome(WriteReceipt(new.id, "dropped", verdict.reason), (new,), None)
    row = yield Statement(INSERT_MEMORY_WITH_JOB, memory_params(new), fetch=True)
    if row is not None:
        return WriteOutcome(WriteReceipt(new.id, "accepted", ACCEPTED), (new,), new.id)
    return (yield from plan_conflict(new))


def plan_conflict(new: NewMemory) -> Plan:
    """The insert wrote nothing: the same id, or an exact repeat in the session, exists."""
    row = yield Statement(FIND_CONFLICT, conflict_params(new), fetch=True)
    conflict = conflict_from_row(new, row)
    if conflict is None:  # deleted between the insert and this look: write it again
        again = yield Statement(INSERT_MEMORY_WITH_JOB, memory_params(new), fetch=True)
        if again is not None:
            return WriteOutcome(WriteReceipt(new.id, "accepted", ACCEPTED), (), new.id)
        raise RuntimeError(f"memory {new.id} conflicts but cannot be found")
    existing, reason, record_drop = conflict_outcome(new, conflict)
    if record_drop:
        yield Statement(INSERT_DECISION, drop_params(new, reason), fetch=False)
    return WriteOutcome(WriteReceipt(existing, "duplicate", reason), (), None)


def queue_after_commit(
    pipe: Any,
    turns: Sequence[NewMemory],
    publish_id: uuid.UUID | None,
    *,
    max_turns: int,
    ttl_s: int,
) -> None:
    """The one Redis round trip after COMMIT, queued on a pipeline (sync or asyncio): the turns
    into their sessions' windows and, when a write was inserted, the drain flag."""
    queue_push(pipe, [turn_record(new) for new in turns], max_turns=max_turns, ttl_s=ttl_s)
    if publish_id is not None:
        queue_drain_flag(pipe, str(publish_id))


def must_publish(replies: Sequence[Any], publish_id: uuid.UUID | None) -> bool:
    """The flag was set by this writer: no drain was queued, so it publishes one."""
    return publish_id is not None and bool(replies and replies[-1])
