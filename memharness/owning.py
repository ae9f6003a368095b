"""What a memory's owner can do with it: ``correct``, ``forget``, see its ``history``, and
``explain`` an assembled context. Mixed into :class:`memharness.MemoryClient`; every method
is a thin call into ``workers.own`` over the client's PostgreSQL pool, then a publish after
COMMIT for the store's owner to settle the rest (the relay re-publishes a lost message).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pipelines.errors import InvalidInput
from pipelines.records import MemoryType, check_id
from pipelines.requests.base import Limits
from workers.publish import publish
from workers.queues import TaskName
from workers.write.wake import send_drain

if TYPE_CHECKING:
    from celery import Celery
    from psycopg_pool import ConnectionPool

    from config import Settings
    from pipelines.own.history import MemoryHistory, TraceItem
    from pipelines.read.assemble import AssembledContext
    from pipelines.requests.own import CorrectArgs, ForgetArgs, HistoryArgs, UndoArgs
    from workers.own.correct import CorrectionReceipt, UndoReceipt
    from workers.own.forget import ForgetReceipt
    from workers.own.inspector import Neighbourhood, PairView

log = logging.getLogger(__name__)


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


class Owning:
    """Corrections, erasures, history and traces (see the module docstring)."""

    settings: Settings
    _pool: ConnectionPool

    @property
    def _app(self) -> Celery:
        raise NotImplementedError

    def correct(
        self,
        memory_id: uuid.UUID | str,
        new_content: str,
        *,
        tenant_id: str,
        reason: str,
        actor: str = "client",
        type: MemoryType | str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> CorrectionReceipt:
        """Replace what a memory says: a new version (``supersedes`` the old one, which stays
        reachable through :meth:`history` and is never recalled again), in one transaction.
        The store's owner then deletes the old version's vector points, corrects its turn in
        the session window, marks the summaries that carry it stale (the compress sweep
        re-summarises) and re-derives the knowledge built on it. The type and metadata stay
        the old ones unless given. Raises :class:`InvalidInput`, :class:`NotFound` (no such
        memory in ``tenant_id``) or :class:`Conflict` (forgotten, or already corrected: correct
        the current version)."""
        from pipelines.requests.own import CorrectArgs

        args = CorrectArgs.parse(
            {
                "memory_id": memory_id,
                "new_content": new_content,
                "tenant_id": tenant_id,
                "reason": reason,
                "actor": actor,
                "type": type,
                "metadata": metadata,
            },
            Limits(
                content_max_bytes=self.settings.content_max_bytes,
                metadata_max_bytes=self.settings.metadata_max_bytes,
            ),
        )
        return self.run_correct(args)

    def run_correct(self, args: CorrectArgs) -> CorrectionReceipt:
        from workers.own.correct import correct_memory

        with self._pool.connection() as conn:
            receipt = correct_memory(
                conn,
                args.memory_id,
                args.new_content,
                tenant_id=args.tenant_id,
                reason=args.reason,
                actor=args.actor,
                type=args.type,
                metadata=args.metadata,
                content_max_bytes=self.settings.content_max_bytes,
                metadata_max_bytes=self.settings.metadata_max_bytes,
            )
        if receipt.status != "replay":
            self._after_ownership(drain=True)
        return receipt

    def undo_correction(
        self,
        memory_id: uuid.UUID | str,
        *,
        tenant_id: str,
        reason: str,
        actor: str = "client",
    ) -> UndoReceipt:
        """Undo an automatic supersession: the memory the background marked corrected is
        recalled again beside the one that superseded it, and the pair is not proposed again.
        ``memory_id`` is the superseded memory (its :meth:`history` names the supersession).
        A person's correction is not undone this way (correct the current version instead).
        Raises :class:`InvalidInput`, :class:`NotFound` or :class:`Conflict`."""
        from pipelines.requests.own import UndoArgs

        args = UndoArgs.parse(
            {"memory_id": memory_id, "tenant_id": tenant_id, "reason": reason, "actor": actor}
        )
        return self.run_undo_correction(args)

    def run_undo_correction(self, args: UndoArgs) -> UndoReceipt:
        from workers.own.correct import undo_supersession

        with self._pool.connection() as conn:
            receipt = undo_supersession(
                conn, args.memory_id, tenant_id=args.tenant_id, reason=args.reason, actor=args.actor
            )
        if receipt.status != "replay":
            from workers.metrics import count_automatic_corrections

            count_automatic_corrections("undone")
            try:
                publish(TaskName.DRAIN_EMBEDDINGS, app=self._app)
            except Exception as exc:
                log.warning("publish after commit failed (%s); the relay will retry", exc)
        return receipt

    def forget(
        self,
        *,
        tenant_id: str,
        reason: str,
        memory_id: uuid.UUID | str | None = None,
        task_id: str | None = None,
        session_id: str | None = None,
        whole_tenant: bool = False,
        actor: str = "client",
    ) -> ForgetReceipt:
        """Erase one memory (every version of it), a task, a session or ``whole_tenant``.

        On return the rows are tombstones (id, scope, times and ``reason`` kept; content,
        summary and metadata gone), so no PostgreSQL read returns the text; the store's owner
        then reaches every other copy (summaries, knowledge, links, vector points of every
        generation, the Redis windows, queued answers) and verifies it:
        :meth:`wait_until_forgotten` waits for that. Forgetting again returns the earlier
        receipt with ``already=True``. The request is the audit log: who (``actor``), what
        (ids), when and why, never the content. Raises :class:`InvalidInput` or
        :class:`NotFound`."""
        from pipelines.requests.own import ForgetArgs

        args = ForgetArgs.parse(
            {
                "tenant_id": tenant_id,
                "reason": reason,
                "actor": actor,
                "memory_id": memory_id,
                "task_id": task_id,
                "session_id": session_id,
                "whole_tenant": whole_tenant,
            }
        )
        return self.run_forget(args)

    def run_forget(self, args: ForgetArgs) -> ForgetReceipt:
        from workers.own.forget import request_forget

        with self._pool.connection() as conn:
            receipt = request_forget(conn, args.call())
        if receipt.status != "done":
            self._after_ownership(drain=False)
        return receipt

    def forget_status(self, request_id: uuid.UUID | str, *, tenant_id: str) -> ForgetReceipt:
        """Where a forget request stands: ``pending``/``running``, ``done`` (verified) or
        ``dead`` (retries ran out; its reason is in ``memharness stats``)."""
        from pipelines.own.versions import check_memory_id
        from workers.own.forget import forget_receipt

        check_id("tenant_id", tenant_id)
        with self._pool.connection() as conn:
            return forget_receipt(conn, tenant_id, check_memory_id(request_id, "request_id"))

    def wait_until_forgotten(
        self, receipt: ForgetReceipt, *, tenant_id: str, timeout_s: float = 30.0
    ) -> ForgetReceipt:
        """Block until the erasure settled (every copy reached and verified)."""
        deadline = time.monotonic() + timeout_s
        while True:
            status = self.forget_status(receipt.request_id, tenant_id=tenant_id)
            if status.status in ("done", "dead"):
                return status
            if time.monotonic() > deadline:
                raise TimeoutError(f"forget request {receipt.request_id} still {status.status}")
            time.sleep(0.05)

    def history(self, memory_id: uuid.UUID | str, *, tenant_id: str) -> MemoryHistory:
        """Every version of a memory and what happened to each, with times and reasons:
        written, corrected and superseded, compressed, rolled back, evicted, cited by
        knowledge, forgotten. Raises :class:`NotFound` for an id not in ``tenant_id``."""
        from pipelines.requests.own import HistoryArgs

        return self.run_history(HistoryArgs.parse({"memory_id": memory_id, "tenant_id": tenant_id}))

    def run_history(self, args: HistoryArgs) -> MemoryHistory:
        from workers.own.history import memory_history

        with self._pool.connection() as conn:
            return memory_history(conn, args.tenant_id, args.memory_id)

    def explain(self, context: AssembledContext, *, tenant_id: str) -> list[TraceItem]:
        """Which memories an assembled context came from (ids, levels, versions) and why each
        was chosen (how it was recalled, its scores, relevance and priority)."""
        from pipelines.own.history import trace_context

        check_id("tenant_id", tenant_id)
        items = trace_context(context)
        ids = [i.id for i in items if _is_uuid(i.id)]
        if not ids:
            return items
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT id::text, version, level FROM memories "
                "WHERE id = ANY(%s::uuid[]) AND tenant_id = %s",
                (ids, tenant_id),
            ).fetchall()
        found = {row[0]: (int(row[1]), int(row[2])) for row in rows}
        return [
            i.model_copy(update={"memory_version": found[i.id][0], "level": found[i.id][1]})
            if i.id in found
            else i
            for i in items
        ]

    def links(
        self, memory_id: uuid.UUID | str, *, tenant_id: str, max_hops: int = 2
    ) -> Neighbourhood:
        """The memories linked to ``memory_id`` (entity, similar, causal) up to ``max_hops``
        away, as nodes and links: what the inspector draws around a memory."""
        from pipelines.own.versions import check_memory_id
        from workers.own.inspector import memory_neighbourhood

        check_id("tenant_id", tenant_id)
        if not 1 <= max_hops <= 3:
            raise InvalidInput("max_hops", f"must be between 1 and 3, got {max_hops}", "3")
        return memory_neighbourhood(
            self._pool, tenant_id, check_memory_id(memory_id), max_hops=max_hops
        )

    def conflicts(self, *, tenant_id: str, limit: int = 100) -> list[PairView]:
        """The tenant's recorded conflicts (both memories kept) and automatic corrections
        (one superseded by the other; ``undoable`` while :meth:`undo_correction` applies),
        newest first."""
        from workers.own.inspector import conflicts_and_supersessions

        check_id("tenant_id", tenant_id)
        if not 1 <= limit <= 500:
            raise InvalidInput("limit", f"must be between 1 and 500, got {limit}", "500")
        return conflicts_and_supersessions(self._pool, tenant_id, limit=limit)

    def _after_ownership(self, *, drain: bool) -> None:
        """After COMMIT: the owner settles the change; a lost message is the relay's."""
        try:
            if drain:
                send_drain(self._app, None)
            publish(TaskName.SETTLE_OWNERSHIP, app=self._app)
        except Exception as exc:
            log.warning("publish after commit failed (%s); the relay will retry", exc)
