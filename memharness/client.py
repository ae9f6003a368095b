"""``MemoryClient``: what an agent process holds. The write path is synchronous and fast:
validate → tier-1 rules → one INSERT of the memory and its outbox row (autocommit: one round
trip, one transaction) → publish after COMMIT → return the id. The slow work is the workers'.

Importing this module loads no adapter, engine or Celery: the Celery app is built on the first
publish, the read path's adapters only in server mode on the first ``context()``.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Generator, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import redis
from psycopg.rows import dict_row

from config import Settings, get_settings
from memharness.owning import Owning
from pipelines.errors import InvalidInput
from pipelines.records import (
    EpisodicMemory,
    MemoryStatus,
    MemoryType,
    Modality,
)
from pipelines.requests.base import Limits
from pipelines.requests.tasks import CheckpointArgs, CompleteArgs, ResumeArgs, RollbackArgs
from pipelines.requests.write import RecordArgs, RecordManyArgs
from pipelines.state.models import TaskState
from pipelines.write.filter import tier1_filter
from pipelines.write.request import NewMemory
from workers.clients import Clients
from workers.db.rows import row_to_memory
from workers.metrics import count_records
from workers.publish import publish
from workers.queues import TaskName
from workers.read.ask import OwnerReads
from workers.state.service import CheckpointService, ResumeResult
from workers.write.plan import (
    ACCEPTED,
    Plan,
    ReceiptStatus,
    WriteOutcome,
    WriteReceipt,
    must_publish,
    plan_conflict,
    plan_write,
    queue_after_commit,
)
from workers.write.sql import (
    INSERT_DECISION,
    INSERT_MEMORY_WITH_JOB,
    drop_params,
    funnel,
    memory_params,
)
from workers.write.wake import DRAIN_FLAG, send_drain

if TYPE_CHECKING:
    from celery import Celery

    from pipelines.read.assemble import AssembledContext
    from pipelines.read.hits import RecallHits
    from pipelines.read.recall import KnowledgeView
    from pipelines.requests.read import AffectedByArgs, ContextArgs, KnowledgeArgs, RecallArgs
    from workers.read.affected import Traversal

log = logging.getLogger(__name__)

__all__ = ["MemoryClient", "ReceiptStatus", "WriteReceipt"]


def run_plan(conn: Any, plan: Plan) -> WriteOutcome:
    """Drive a write plan on a psycopg connection (the asyncio client has its own twin)."""
    try:
        step = next(plan)
        while True:
            cursor = conn.execute(step.query, step.params)
            step = plan.send(cursor.fetchone() if step.fetch else None)
    except StopIteration as done:
        outcome: WriteOutcome = done.value
        return outcome


class MemoryClient(Owning):
    """An agent's handle on its memory: ``record`` what happens, ask for the ``context`` of
    the next step, ``checkpoint`` / ``resume`` / ``rollback`` where the task is, and
    ``complete_task`` when it is done.

    Writes return after COMMIT (the workers do the slow part); every bad argument raises
    :class:`InvalidInput` naming the field and the limit before anything is stored. One client
    per process is enough: it holds a PostgreSQL pool, a Redis connection and (built on first
    use) this process's Celery app for ``settings``. Use it as a context manager, or call
    :meth:`close`.
    """

    def __init__(self, settings: Settings | None = None, *, app: Celery | None = None) -> None:
        self.settings = settings or get_settings()
        self._clients = Clients(self.settings, name="memharness-client", redis_timeout_s=2.0)
        self._pool = self._clients.pool
        self._redis = self._clients.redis
        self._given_app = app
        self._checkpoints: CheckpointService | None = None
        self._limits: Limits | None = None
        self._reads = OwnerReads(self.settings, lambda: self._app)

    @property
    def limits(self) -> Limits:
        """The limits requests are parsed against (built on first use: a token counter)."""
        if self._limits is None:
            self._limits = Limits.of(self.settings, counter=self._clients.counter)
        return self._limits

    @property
    def write_limits(self) -> Limits:
        """The limits of a write: no token counter is built for it."""
        if self._limits is not None:
            return self._limits
        return Limits(
            content_max_bytes=self.settings.content_max_bytes,
            metadata_max_bytes=self.settings.metadata_max_bytes,
        )

    @property
    def _app(self) -> Celery:
        """The app this client publishes through: the one given, else the process's own."""
        if self._given_app is None:
            from workers.app import get_app

            self._given_app = get_app(self.settings)
        return self._given_app

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        self._reads.close()
        self._clients.close()

    def __enter__(self) -> MemoryClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- the write path ------------------------------------------------------------------------

    def record(
        self,
        content: str | bytes,
        *,
        tenant_id: str,
        task_id: str,
        session_id: str,
        type: MemoryType | str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        timestamp: datetime | None = None,
        modality: Modality | str = Modality.TEXT,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> WriteReceipt:
        """Record one interaction. Raises :class:`InvalidInput` naming the field and limit."""
        args = RecordArgs.parse(
            {
                "content": content,
                "tenant_id": tenant_id,
                "task_id": task_id,
                "session_id": session_id,
                "type": type,
                "user_id": user_id,
                "agent_id": agent_id,
                "timestamp": timestamp,
                "modality": modality,
                "metadata": metadata,
                "idempotency_key": idempotency_key,
            },
            self.write_limits,
        )
        return self.run_record(args)

    def run_record(self, args: RecordArgs) -> WriteReceipt:
        """The write plan of a checked record (what every way in calls once it parsed)."""
        return self._write(args.new_memory())

    def record_many(self, items: Iterable[Mapping[str, Any]]) -> list[WriteReceipt]:
        """Record several interactions; each item takes ``record``'s keyword arguments.

        Every item is validated before anything is written, so one bad item writes nothing.
        The inserts share one pipelined round trip and the batch publishes one drain.
        """
        return self.run_record_many(RecordManyArgs.parse({"items": items}, self.write_limits))

    def run_record_many(self, args: RecordManyArgs) -> list[WriteReceipt]:
        return self._write_many(args.new_memories())

    def _write(self, new: NewMemory) -> WriteReceipt:
        with self._pool.connection() as conn:
            outcome = run_plan(conn, plan_write(new))
        self._after_commit(outcome.window, publish_id=outcome.publish_id)
        count_records((outcome.receipt,))
        return outcome.receipt

    def _write_many(self, batch: Sequence[NewMemory]) -> list[WriteReceipt]:
        receipts: list[WriteReceipt | None] = [None] * len(batch)
        inserted: list[int] = []
        republished: list[uuid.UUID] = []
        with self._pool.connection() as conn:
            with conn.pipeline(), conn.cursor() as cur:
                pending: list[tuple[int, NewMemory]] = []
                for index, new in enumerate(batch):
                    verdict = tier1_filter(new.content)
                    if not verdict.keep:
                        conn.execute(INSERT_DECISION, drop_params(new, verdict.reason))
                        receipts[index] = WriteReceipt(new.id, "dropped", verdict.reason)
                    else:
                        pending.append((index, new))
                cur.executemany(
                    INSERT_MEMORY_WITH_JOB,
                    [memory_params(new) for _, new in pending],
                    returning=True,
                )
                for index, _ in pending:
                    if cur.fetchone() is not None:
                        inserted.append(index)
                    if not cur.nextset():
                        break
            done = set(inserted)
            for index, new in enumerate(batch):
                if receipts[index] is not None:
                    continue
                if index in done:
                    receipts[index] = WriteReceipt(new.id, "accepted", ACCEPTED)
                else:
                    outcome = run_plan(conn, plan_conflict(new))
                    receipts[index] = outcome.receipt
                    if outcome.publish_id is not None:
                        republished.append(outcome.publish_id)
        publish_ids = [batch[index].id for index in inserted[:1]] + republished[:1]
        self._after_commit(
            [
                new
                for new, receipt in zip(batch, receipts, strict=True)
                if receipt is not None and receipt.status != "duplicate"
            ],
            publish_id=publish_ids[0] if publish_ids else None,
        )
        count_records(receipts, batch=True)
        return [receipt for receipt in receipts if receipt is not None]

    def _after_commit(self, turns: Sequence[NewMemory], *, publish_id: uuid.UUID | None) -> None:
        """One Redis round trip after COMMIT (``queue_after_commit``); a drain is published
        only if no other was queued. Failures are logged, never raised: the rows are durable,
        and the outbox relay publishes what was not."""
        if not turns and publish_id is None:
            return
        try:
            pipe = self._redis.pipeline(transaction=False)
            queue_after_commit(
                pipe,
                turns,
                publish_id,
                max_turns=self.settings.working_memory_max_turns,
                ttl_s=self.settings.working_memory_ttl_s,
            )
            replies = pipe.execute()
        except redis.RedisError as exc:
            log.warning("after-commit Redis round trip failed (%s); the relay will publish", exc)
            return
        if must_publish(replies, publish_id):
            try:
                send_drain(self._app, str(publish_id))
            except Exception as exc:
                log.warning("publish after commit failed (%s); the relay will retry", exc)
                with contextlib.suppress(redis.RedisError):
                    self._redis.delete(DRAIN_FLAG)

    # -- links and task lifecycle ----------------------------------------------------------

    def affected_by(self, query: str, *, tenant_id: str, max_hops: int = 3) -> Traversal:
        """Multi-hop: the memories ``query`` is about, then what their causal links reach
        ("what does the delay of the auth module affect?")."""
        from pipelines.requests.read import AffectedByArgs

        args = AffectedByArgs.parse(
            {"query": query, "tenant_id": tenant_id, "max_hops": max_hops}, self.write_limits
        )
        return self.run_affected_by(args)

    def run_affected_by(self, args: AffectedByArgs) -> Traversal:
        from workers.read.affected import affected_by

        return affected_by(self._pool, args.tenant_id, args.query, max_hops=args.max_hops)

    def complete_task(self, tenant_id: str, task_id: str) -> None:
        """The task is finished: its memories get an L3 task summary in the background."""
        args = CompleteArgs.parse({"tenant_id": tenant_id, "task_id": task_id})
        self.run_complete_task(args)

    def run_complete_task(self, args: CompleteArgs) -> None:
        publish(
            TaskName.COMPLETE_TASK, app=self._app, tenant_id=args.tenant_id, task_id=args.task_id
        )

    # -- golden queries (retrieval health) ------------------------------------------------------

    def set_golden_queries(self, tenant_id: str, queries: Sequence[object]) -> int:
        """Set the tenant's golden queries: each ``{"query": ..., "expected_id": ...}`` (or a
        pair), a question and the memory it must find in the top K. Replaces the ones set
        before; until a tenant sets some, they are drawn from its memories. Raises
        :class:`InvalidInput` naming the field and the limit."""
        from workers.health.golden import set_golden_queries

        with self._pool.connection() as conn:
            return set_golden_queries(conn, tenant_id, queries)

    # -- task checkpoints -------------------------------------------------------------------

    @property
    def checkpoints(self) -> CheckpointService:
        """The checkpoint store (list, show, verify besides the three calls below)."""
        if self._checkpoints is None:
            from workers.adapters import build_llm
            from workers.ledger import PostgresLedger

            pool = self._pool
            llm = build_llm(self.settings, ledger=PostgresLedger(lambda: pool))
            self._checkpoints = CheckpointService(
                pool, llm, keep_last=self.settings.checkpoint_keep_last
            )
        return self._checkpoints

    def checkpoint(
        self, tenant_id: str, task_id: str, state: TaskState, *, phase_transition: bool = False
    ) -> uuid.UUID:
        """Save where the agent is: one transaction; returns the checkpoint id."""
        args = CheckpointArgs.parse(
            {
                "tenant_id": tenant_id,
                "task_id": task_id,
                "state": state,
                "phase_transition": phase_transition,
            }
        )
        return self.run_checkpoint(args)

    def run_checkpoint(self, args: CheckpointArgs) -> uuid.UUID:
        return self.checkpoints.checkpoint(
            args.tenant_id, args.task_id, args.state, phase_transition=args.phase_transition
        )

    def resume(self, tenant_id: str, task_id: str) -> ResumeResult | None:
        """The newest checkpoint whose checksum holds, calibrated; None if none was saved."""
        return self.run_resume(ResumeArgs.parse({"tenant_id": tenant_id, "task_id": task_id}))

    def run_resume(self, args: ResumeArgs) -> ResumeResult | None:
        return self.checkpoints.resume(args.tenant_id, args.task_id)

    def rollback(self, tenant_id: str, task_id: str, checkpoint_id: uuid.UUID | str) -> uuid.UUID:
        """Make an earlier checkpoint the newest again; returns the new checkpoint's id."""
        args = RollbackArgs.parse(
            {"tenant_id": tenant_id, "task_id": task_id, "checkpoint_id": checkpoint_id}
        )
        return self.run_rollback(args)

    def run_rollback(self, args: RollbackArgs) -> uuid.UUID:
        return self.checkpoints.rollback(args.tenant_id, args.task_id, args.checkpoint_id)

    # -- reads -----------------------------------------------------------------------------

    def get(self, memory_id: uuid.UUID | str, *, tenant_id: str) -> EpisodicMemory | None:
        with self._pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            cur.execute(
                "SELECT * FROM memories WHERE id = %s AND tenant_id = %s",
                (str(memory_id), tenant_id),
            )
            row = cur.fetchone()
        return None if row is None else row_to_memory(row)

    def recall(
        self,
        query: str,
        *,
        tenant_id: str,
        task_id: str | None = None,
        limit: int = 5,
        timeout_s: float = 10.0,
    ) -> RecallHits:
        """Dense recall inside the tenant's scope, answered by the store's owner process.

        A list of hits; its ``degraded`` is True while the vector index is known to miss
        stored memories (being restored from PostgreSQL): the hits then include PostgreSQL's
        keyword matches, so an incomplete index never answers a silent empty list."""
        from pipelines.requests.read import RecallArgs

        args = RecallArgs.parse(
            {"query": query, "tenant_id": tenant_id, "task_id": task_id, "limit": limit},
            self.write_limits,
        )
        return self.run_recall(args, timeout_s=timeout_s)

    def run_recall(self, args: RecallArgs, *, timeout_s: float = 10.0) -> RecallHits:
        from pipelines.read.hits import recall_hits

        query_kwargs = {
            "tenant_id": args.tenant_id,
            "query": args.query,
            "task_id": args.task_id,
            "limit": args.limit,
        }
        return recall_hits(self._reads.ask(TaskName.RECALL_SEARCH, query_kwargs, timeout_s))

    def knowledge(
        self,
        *,
        tenant_id: str,
        kind: str | None = None,
        query: str | None = None,
        limit: int = 50,
    ) -> list[KnowledgeView]:
        """The tenant's semantic knowledge (what consolidation made of its episodes): each
        item's kind, content, confidence, conditions, sources (episode ids) and status.

        ``kind`` keeps one kind (preference, pattern, mistake, convention, owner, stack);
        ``query`` keeps the items saying some of it, the ones saying most first (else the most
        confident first); at most ``limit`` (1-500). Raises :class:`InvalidInput` naming the
        field and the limit."""
        from pipelines.requests.read import KnowledgeArgs

        args = KnowledgeArgs.parse(
            {"tenant_id": tenant_id, "kind": kind, "query": query, "limit": limit}
        )
        return self.run_knowledge(args)

    def run_knowledge(self, args: KnowledgeArgs) -> list[KnowledgeView]:
        from workers.read.semantic import KnowledgeQuery, list_knowledge

        text = None if args.query is None else " ".join(args.query.split())
        call = KnowledgeQuery(
            tenant_id=args.tenant_id, kind=args.kind, query=text, limit=args.limit
        )
        return list_knowledge(self._pool, call)

    def context(
        self,
        task_id: str,
        query: str,
        budget_tokens: int,
        phase: str | None = None,
        focus: str | Sequence[str] | None = None,
        *,
        tenant_id: str,
        session_id: str | None = None,
        system: str = "",
        task_context: Sequence[str] | None = None,
        variables: Mapping[str, Any] | None = None,
        scratch: Sequence[str] | None = None,
        timeout_s: float | None = None,
    ) -> AssembledContext:
        """The context of the agent's next step, laid out in partitions within ``budget_tokens``.

        ``phase`` is the task phase (planning, execution, debugging, review, reflection);
        ``focus`` a text hint or a list of information kinds, most needed first. The recent
        interactions are ``session_id``'s window (default: the task's latest session). Raises
        :class:`InvalidInput` naming the field and the limit, before anything is sent.

        Embedded mode: the store's owner assembles it (``memory.recall.context`` on the
        ``recall`` queue). With a Qdrant server the pipeline runs here, on this client's own
        clients. Either way the call is checked here, once.
        """
        from pipelines.requests.read import ContextArgs

        args = ContextArgs.parse(
            {
                "tenant_id": tenant_id,
                "task_id": task_id,
                "query": query,
                "budget_tokens": budget_tokens,
                "phase": phase,
                "focus": focus,
                "session_id": session_id,
                "system": system,
                "task_context": task_context,
                "variables": variables,
                "scratch": scratch,
            },
            self.limits,
        )
        return self.run_context(args, timeout_s=timeout_s)

    def run_context(self, args: ContextArgs, *, timeout_s: float | None = None) -> AssembledContext:
        """The context of a checked request: answered here with a Qdrant server, by the
        store's owner in embedded mode (the call crosses the queue as JSON, unchecked)."""
        call = args.call()
        if not self.settings.store_is_embedded:
            from workers.read.context import answer_call
            from workers.read.touch import publish_touch

            app = self._app
            return answer_call(
                self._clients,
                call,
                lambda tenant, ids, at: publish_touch(tenant, ids, at, app=app),
            )
        timeout_s = timeout_s or self.settings.context_timeout_s
        answer = self._reads.ask(TaskName.RECALL_CONTEXT, call.to_json(), timeout_s)
        return self._context_from(answer)

    def _context_from(self, answer: Any) -> AssembledContext:
        """The owner's JSON answer: the context, or the typed error it refused the call with."""
        from pipelines.read.assemble import AssembledContext

        if not isinstance(answer, dict):
            raise RuntimeError(f"memory.recall.context answered {type(answer).__name__}")
        error = answer.get("error")
        if isinstance(error, dict):
            raise InvalidInput.from_json(error)
        return AssembledContext.model_validate(answer["context"])

    # -- listing and export ------------------------------------------------------------------

    if TYPE_CHECKING:
        from typing import TextIO

        from pipelines.own.export_format import ExportCounts
        from pipelines.own.listing import MemoryPage, SemanticPage
        from workers.own.export import Progress as ExportProgress
        from workers.own.imports import ImportCounts

    def list_memories(self, tenant_id: str, **filters: Any) -> MemoryPage:
        """A page of the tenant's memories, newest first (``workers.own.listing``): filters
        task_id, type, level, status (default ``stored``; ``any`` adds tombstones), since,
        cursor, limit (1-500). ``next_cursor`` is None on the last page."""
        from workers.own.listing import list_memories

        return list_memories(self._pool, tenant_id, **filters)

    def list_semantic(self, tenant_id: str, **filters: Any) -> SemanticPage:
        """A page of the tenant's semantic knowledge: filters kind, status, cursor, limit."""
        from workers.own.listing import list_semantic

        return list_semantic(self._pool, tenant_id, **filters)

    def export(
        self, tenant_id: str, out: TextIO, *, progress: ExportProgress | None = None
    ) -> ExportCounts:
        """Write the tenant as ``memharness.export/1`` JSON Lines to ``out``; the counts."""
        from workers.own.export import export_tenant

        return export_tenant(self._pool, tenant_id, out, progress=progress)

    def export_chunks(self, tenant_id: str) -> Generator[str, None, None]:
        """The same export as text chunks from one snapshot, for a caller that streams it
        (closing the iterator early ends the snapshot)."""
        from workers.own.export import export_chunks

        return export_chunks(self._pool, tenant_id)

    def import_file(
        self, lines: Iterable[str | bytes], *, progress: ExportProgress | None = None
    ) -> ImportCounts:
        """Import an export file all or nothing; stored memories are re-embedded here."""
        from workers.own.imports import import_file

        return import_file(self._pool, lines, progress=progress, app=self._app)

    def wait_until_settled(
        self, memory_ids: Iterable[uuid.UUID], *, timeout_s: float = 30.0
    ) -> dict[str, int]:
        """Block until none of ``memory_ids`` is pending; returns the count per status."""
        ids = [str(memory_id) for memory_id in memory_ids]
        deadline = time.monotonic() + timeout_s
        while True:
            with self._pool.connection() as conn:
                rows = conn.execute(
                    "SELECT status, count(*) FROM memories WHERE id = ANY(%s::uuid[]) GROUP BY 1",
                    (ids,),
                ).fetchall()
            counts = {str(status): int(n) for status, n in rows}
            if counts.get(MemoryStatus.PENDING.value, 0) == 0:
                return counts
            if time.monotonic() > deadline:
                raise TimeoutError(f"still pending after {timeout_s:.0f}s: {counts}")
            time.sleep(0.05)

    def stats(self, tenant_id: str | None = None) -> dict[str, int]:
        with self._pool.connection() as conn:
            return funnel(conn, tenant_id)
