"""Task checkpoints for agents: save where the task is, resume exactly there after a crash.

``CheckpointService`` joins the pure format and rules of ``pipelines.checkpoint`` to the SQL
of ``workers.state.sql``. ``MemoryClient.checkpoint / resume / rollback`` delegate here.

Parents: each checkpoint links to the one its state grew from (the previous save of this
service for the task, or the checkpoint a resume or a rollback returned). The service keeps
that head per task in memory and asks PostgreSQL only on the first save of a task, so a
save is one round trip. One agent drives a task at a time; a second writer to the same task
only makes the parent links less useful for fall-backs, never loses a save.
"""

from __future__ import annotations

import builtins
import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from psycopg_pool import ConnectionPool

from pipelines.errors import CheckpointFormatError, InvalidInput, LLMError
from pipelines.records import check_id
from pipelines.state.calibration import (
    CalibrationLLM,
    ResumeCalibration,
    apply_calibration,
    offline_calibration,
)
from pipelines.state.codec import decode_checkpoint, new_checkpoint
from pipelines.state.migrations import FORMAT_VERSION
from pipelines.state.models import (
    CHECKPOINT_LIST_MAX,
    TaskCheckpoint,
    TaskState,
    WorkingMemory,
)
from workers.state.sql import (
    StoredCheckpoint,
    fetch_by_id,
    fetch_head_id,
    fetch_newest,
    fetch_newest_before,
    list_checkpoints,
    save_checkpoint,
)

log = logging.getLogger(__name__)

# Twenty saves reach back over several nodes of work at the default policy (a save per node
# and per ten iterations); phase transitions are kept on top of these, however old.
DEFAULT_KEEP_LAST = 20


class BillableCalibration(CalibrationLLM, Protocol):
    """What the checkpoint service asks of the engine: its name, resume calibration, and a
    view of it billed to a tenant (``workers.ledger.BillableLLM`` is one). Narrow on purpose:
    the client builds this service, and the whole composed port would load every cognitive
    pipeline's models into each agent that imports ``memharness``."""

    @property
    def name(self) -> str: ...

    def billed_to(self, tenant_id: str) -> BillableCalibration: ...


@dataclass(frozen=True)
class Fallback:
    """A checkpoint a resume skipped, and why."""

    checkpoint_id: uuid.UUID
    reason: str


class CheckpointNotFound(LookupError):
    """No such checkpoint for this tenant and task (never saved, or pruned by retention)."""


class NoUsableCheckpoint(LookupError):
    """The task has checkpoints but none of them passes its checks."""

    def __init__(self, tenant_id: str, task_id: str, fallbacks: tuple[Fallback, ...]) -> None:
        self.fallbacks = fallbacks
        detail = "; ".join(f"{f.checkpoint_id}: {f.reason}" for f in fallbacks)
        super().__init__(f"no usable checkpoint for task {tenant_id}/{task_id}: {detail}")


@dataclass(frozen=True)
class ResumeResult:
    """``checkpoint`` is exactly what was saved; ``resumed`` is what to continue from: the
    same state with verification nodes inserted before pending actions when the
    calibration asked for them (otherwise the two are equal)."""

    checkpoint: TaskCheckpoint
    resumed: TaskCheckpoint
    fell_back_from: tuple[Fallback, ...]
    calibration: ResumeCalibration
    calibrated_by: str
    elapsed_s: float

    @property
    def state(self) -> TaskState:
        return self.resumed.state

    @property
    def working_memory(self) -> WorkingMemory:
        return self.resumed.state.working_memory


@dataclass(frozen=True)
class VerifyReport:
    checkpoint_id: uuid.UUID
    format_version: int
    size_bytes: int
    ok: bool
    error_kind: str | None = None
    error: str | None = None


def _utc_now() -> datetime:
    return datetime.now(UTC)


class CheckpointService:
    def __init__(
        self,
        pool: ConnectionPool,
        llm: BillableCalibration,
        *,
        keep_last: int = DEFAULT_KEEP_LAST,
        clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        if keep_last < 1:
            raise ValueError(f"keep_last must be at least 1, got {keep_last}")
        self._pool = pool
        self._llm = llm
        self._keep_last = keep_last
        self._clock = clock
        self._heads: dict[tuple[str, str], uuid.UUID] = {}
        self._lock = threading.Lock()

    # -- saving ------------------------------------------------------------------------------

    def checkpoint(
        self, tenant_id: str, task_id: str, state: TaskState, *, phase_transition: bool = False
    ) -> uuid.UUID:
        """Save ``state`` as the task's newest checkpoint (one transaction, retention
        included). Saving the same state on the same parent again returns the same id."""
        tenant, task = _scope(tenant_id, task_id)
        if not isinstance(state, TaskState):
            raise TypeError(f"state must be a TaskState, got {type(state).__name__}")
        with self._lock:
            parent = self._heads.get((tenant, task))
        if parent is None:
            with self._pool.connection() as conn:
                parent = fetch_head_id(conn, tenant, task)
        return self._save(tenant, task, state, parent, phase_transition).checkpoint_id

    def _save(
        self,
        tenant: str,
        task: str,
        state: TaskState,
        parent: uuid.UUID | None,
        phase_transition: bool,
    ) -> TaskCheckpoint:
        checkpoint, body = new_checkpoint(
            tenant, task, state, parent_id=parent, created_at=self._clock()
        )
        with self._pool.connection() as conn:
            pruned = save_checkpoint(
                conn,
                checkpoint_id=checkpoint.checkpoint_id,
                tenant_id=tenant,
                task_id=task,
                parent_id=parent,
                created_at=checkpoint.created_at,
                format_version=FORMAT_VERSION,
                is_phase_transition=phase_transition,
                iteration=state.iteration,
                body=body,
                keep_last=self._keep_last,
            )
        self._set_head(tenant, task, checkpoint.checkpoint_id)
        if pruned:
            log.debug("task %s/%s: pruned %s old checkpoints", tenant, task, pruned)
        return checkpoint

    def _set_head(self, tenant: str, task: str, checkpoint_id: uuid.UUID) -> None:
        with self._lock:
            self._heads[(tenant, task)] = checkpoint_id

    # -- resuming ----------------------------------------------------------------------------

    def load_newest(
        self, tenant_id: str, task_id: str
    ) -> tuple[TaskCheckpoint, tuple[Fallback, ...]] | None:
        """The newest checkpoint that passes its checks, and the newer ones it skipped.

        A corrupted checkpoint falls back to its parent (from the row: its own bytes cannot
        be trusted); when the parent is gone (pruned), to the next older one of the task.
        """
        tenant, task = _scope(tenant_id, task_id)
        fallbacks: list[Fallback] = []
        tried: set[uuid.UUID] = set()
        with self._pool.connection() as conn:
            row = fetch_newest(conn, tenant, task)
            if row is None:
                return None
            oldest_seq = row.seq
            while row is not None:
                try:
                    return _decode(row, tenant, task), tuple(fallbacks)
                except CheckpointFormatError as exc:
                    fallbacks.append(Fallback(row.id, str(exc)))
                    tried.add(row.id)
                    oldest_seq = min(oldest_seq, row.seq)
                    log.warning(
                        "task %s/%s: checkpoint %s is unusable (%s); falling back to %s",
                        tenant,
                        task,
                        row.id,
                        exc,
                        row.parent_id or "the next older checkpoint",
                    )
                parent = row.parent_id
                row = None
                if parent is not None and parent not in tried:
                    row = fetch_by_id(conn, tenant, task, parent)
                if row is None:
                    row = fetch_newest_before(conn, tenant, task, oldest_seq)
        raise NoUsableCheckpoint(tenant, task, tuple(fallbacks))

    def resume(self, tenant_id: str, task_id: str) -> ResumeResult | None:
        """Load the newest good checkpoint, rebuild its working memory, and let the LLM port
        (offline: rules) decide which pending actions to verify first. None: nothing saved.
        """
        loaded = self.load_newest(tenant_id, task_id)
        if loaded is None:
            return None
        checkpoint, fallbacks = loaded
        elapsed_s = max(0.0, (self._clock() - checkpoint.created_at).total_seconds())
        verdict, calibrated_by = self._calibrate(checkpoint, elapsed_s)
        resumed = apply_calibration(checkpoint, verdict)
        self._set_head(checkpoint.tenant_id, checkpoint.task_id, checkpoint.checkpoint_id)
        if fallbacks:
            log.warning(
                "task %s/%s resumed from %s after skipping %s corrupted checkpoint(s)",
                checkpoint.tenant_id,
                checkpoint.task_id,
                checkpoint.checkpoint_id,
                len(fallbacks),
            )
        return ResumeResult(
            checkpoint=checkpoint,
            resumed=resumed,
            fell_back_from=fallbacks,
            calibration=verdict,
            calibrated_by=calibrated_by,
            elapsed_s=elapsed_s,
        )

    def _calibrate(
        self, checkpoint: TaskCheckpoint, elapsed_s: float
    ) -> tuple[ResumeCalibration, str]:
        try:
            llm = self._llm.billed_to(checkpoint.tenant_id)
            verdict = llm.calibrate_resume(checkpoint, elapsed_s)
        except LLMError as exc:
            # A resume must not wait for the model: the rules are a safe answer.
            log.warning(
                "resume calibration by %s failed (%s); using the rules", self._llm.name, exc
            )
            return offline_calibration(checkpoint, elapsed_s), f"offline (fallback: {exc})"
        known = {action.action_id for action in checkpoint.state.pending_actions}
        unknown = [check.action_id for check in verdict.checks if check.action_id not in known]
        if unknown:
            log.warning(
                "resume calibration by %s names unknown action %s; using the rules",
                self._llm.name,
                unknown[0],
            )
            return (
                offline_calibration(checkpoint, elapsed_s),
                f"offline (fallback: {self._llm.name} named unknown action {unknown[0]!r})",
            )
        return verdict, self._llm.name

    def rollback(self, tenant_id: str, task_id: str, checkpoint_id: uuid.UUID | str) -> uuid.UUID:
        """Make an earlier checkpoint's state the task's newest again.

        Nothing is deleted: a new checkpoint with exactly the target's state and the target
        as its parent becomes the head, so the abandoned branch stays inspectable until
        retention prunes it. Returns the id of that new head (the target's own id when it
        is the head already). A corrupted target is refused with its reason.
        """
        tenant, task = _scope(tenant_id, task_id)
        target_id = _as_uuid(checkpoint_id)
        with self._pool.connection() as conn:
            row = fetch_by_id(conn, tenant, task, target_id)
            head = fetch_head_id(conn, tenant, task)
        if row is None:
            raise CheckpointNotFound(
                f"no checkpoint {target_id} for task {tenant}/{task} (never saved, or pruned "
                f"by retention, which keeps the last {self._keep_last} and phase transitions)"
            )
        target = _decode(row, tenant, task)
        if head == target.checkpoint_id:
            self._set_head(tenant, task, head)
            return head
        saved = self._save(tenant, task, target.state, target.checkpoint_id, False)
        log.info(
            "task %s/%s rolled back to %s (new head %s)",
            tenant,
            task,
            target.checkpoint_id,
            saved.checkpoint_id,
        )
        return saved.checkpoint_id

    # -- inspection --------------------------------------------------------------------------

    def list(self, tenant_id: str, task_id: str, *, limit: int = 50) -> list[StoredCheckpoint]:
        """Newest first, without bodies."""
        tenant, task = _scope(tenant_id, task_id)
        with self._pool.connection() as conn:
            return list_checkpoints(conn, tenant, task, limit=_limit(limit))

    def show(self, tenant_id: str, task_id: str, checkpoint_id: uuid.UUID | str) -> TaskCheckpoint:
        """One checkpoint, fully verified and decoded (CheckpointFormatError if it is not)."""
        tenant, task = _scope(tenant_id, task_id)
        target_id = _as_uuid(checkpoint_id)
        with self._pool.connection() as conn:
            row = fetch_by_id(conn, tenant, task, target_id)
        if row is None:
            raise CheckpointNotFound(f"no checkpoint {target_id} for task {tenant}/{task}")
        return _decode(row, tenant, task)

    def verify(
        self,
        tenant_id: str,
        task_id: str,
        checkpoint_id: uuid.UUID | str | None = None,
        *,
        limit: int = 1000,
    ) -> builtins.list[VerifyReport]:  # ``list`` is the method above in this scope
        """Check one checkpoint, or the task's newest ``limit``: checksum, format, schema."""
        tenant, task = _scope(tenant_id, task_id)
        with self._pool.connection() as conn:
            if checkpoint_id is None:
                rows = list_checkpoints(conn, tenant, task, limit=_limit(limit), with_body=True)
            else:
                one = fetch_by_id(conn, tenant, task, _as_uuid(checkpoint_id))
                if one is None:
                    raise CheckpointNotFound(
                        f"no checkpoint {checkpoint_id} for task {tenant}/{task}"
                    )
                rows = [one]
        reports = []
        for row in rows:
            try:
                _decode(row, tenant, task)
            except CheckpointFormatError as exc:
                reports.append(
                    VerifyReport(
                        row.id, row.format_version, row.size_bytes, False, exc.kind, str(exc)
                    )
                )
            else:
                reports.append(VerifyReport(row.id, row.format_version, row.size_bytes, True))
        return reports


def _decode(row: StoredCheckpoint, tenant: str, task: str) -> TaskCheckpoint:
    assert row.body is not None, "a decode needs a query that fetches the body"
    checkpoint = decode_checkpoint(row.body)
    # A healthy frame under the wrong row (a restore script, a bad copy) is still wrong.
    if (checkpoint.checkpoint_id, checkpoint.tenant_id, checkpoint.task_id) != (
        row.id,
        tenant,
        task,
    ):
        raise CheckpointFormatError(
            "mismatch",
            f"row {row.id} of task {tenant}/{task} holds checkpoint {checkpoint.checkpoint_id} "
            f"of task {checkpoint.tenant_id}/{checkpoint.task_id}",
        )
    return checkpoint


def _scope(tenant_id: str, task_id: str) -> tuple[str, str]:
    tenant = check_id("tenant_id", tenant_id)
    task = check_id("task_id", task_id)
    assert tenant is not None and task is not None
    return tenant, task


def _as_uuid(value: uuid.UUID | str) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise InvalidInput("checkpoint_id", f"is not a UUID: {str(value)[:40]!r}") from None


def _limit(limit: int) -> int:
    if not 1 <= limit <= CHECKPOINT_LIST_MAX:
        raise InvalidInput(
            "limit",
            f"must be between 1 and {CHECKPOINT_LIST_MAX}, got {limit}",
            str(CHECKPOINT_LIST_MAX),
        )
    return limit
