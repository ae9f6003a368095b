"""``MemoryClient``: what an agent process holds. The write path is synchronous and fast:
validate → tier-1 rules → one INSERT of the memory and its outbox row (autocommit: one round
trip, one transaction) → publish after COMMIT → return the id. The slow work is the workers'.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import redis
from celery import Celery
from psycopg.rows import dict_row

from config import Settings, get_settings
from memharness.checkpoints import CheckpointService, ResumeResult
from pipelines.checkpoint import TaskState
from pipelines.records import (
    EpisodicMemory,
    InvalidInput,
    MemoryStatus,
    MemoryType,
    Modality,
    NewMemory,
    check_id,
    check_text,
    prepare_write,
)
from pipelines.write_filter import tier1_filter
from workers.db import open_pool
from workers.db.cognition import row_to_memory
from workers.db.writes import (
    INSERT_DECISION,
    INSERT_MEMORY_WITH_JOB,
    conflict_outcome,
    drop_params,
    find_conflict,
    funnel,
    memory_params,
)
from workers.working_memory import WorkingMemoryPool, queue_push, turn_record
from workers.write_service import DRAIN_FLAG, queue_drain_flag, send_drain

if TYPE_CHECKING:
    from pipelines.assemble import AssembledContext
    from pipelines.tokens import TokenCounter
    from workers.cognition_service import Traversal
    from workers.read_service import ReadStores

log = logging.getLogger(__name__)

ReceiptStatus = Literal["accepted", "duplicate", "dropped"]


@dataclass(frozen=True)
class WriteReceipt:
    """What ``record`` did. ``memory_id`` is stable: a retried call returns the same one."""

    memory_id: uuid.UUID
    status: ReceiptStatus
    reason: str


class MemoryClient:
    def __init__(self, settings: Settings | None = None, *, app: Celery | None = None) -> None:
        self.settings = settings or get_settings()
        self._pool = open_pool(self.settings, name="memharness-client")
        self._redis = redis.Redis.from_url(
            self.settings.redis_url, socket_timeout=2, socket_connect_timeout=2
        )
        if app is None:
            from workers.app import create_app

            app = create_app(self.settings)
        self._app = app
        self._checkpoints: CheckpointService | None = None
        self._working_memory = WorkingMemoryPool(
            self._redis,
            max_turns=self.settings.working_memory_max_turns,
            ttl_s=self.settings.working_memory_ttl_s,
        )
        self._counter: TokenCounter | None = None
        self._local_reads: ReadStores | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        if self._local_reads is not None:
            self._local_reads.vectors.close()
        self._pool.close()
        self._redis.close()

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
        new = prepare_write(
            content,
            tenant_id=tenant_id,
            task_id=task_id,
            session_id=session_id,
            type=type,
            user_id=user_id,
            agent_id=agent_id,
            timestamp=timestamp,
            modality=modality,
            metadata=dict(metadata) if metadata is not None else None,
            idempotency_key=idempotency_key,
            content_max_bytes=self.settings.content_max_bytes,
            metadata_max_bytes=self.settings.metadata_max_bytes,
        )
        return self._write(new)

    def record_many(self, items: Iterable[Mapping[str, Any]]) -> list[WriteReceipt]:
        """Record several interactions; each item takes ``record``'s keyword arguments.

        Every item is validated before anything is written, so one bad item writes nothing.
        The inserts share one pipelined round trip and the batch publishes one drain.
        """
        prepared: list[NewMemory] = []
        for index, item in enumerate(items):
            fields = dict(item)
            try:
                content = fields.pop("content")
            except KeyError:
                raise InvalidInput(f"items[{index}].content", "is required") from None
            try:
                prepared.append(
                    prepare_write(
                        content,
                        content_max_bytes=self.settings.content_max_bytes,
                        metadata_max_bytes=self.settings.metadata_max_bytes,
                        **fields,
                    )
                )
            except InvalidInput as exc:
                raise InvalidInput(
                    f"items[{index}].{exc.field}", str(exc).split(": ", 1)[1], exc.limit
                ) from None
            except TypeError as exc:
                raise InvalidInput(f"items[{index}]", str(exc)) from None
        return self._write_many(prepared)

    def _write(self, new: NewMemory) -> WriteReceipt:
        verdict = tier1_filter(new.content)
        with self._pool.connection() as conn:
            if not verdict.keep:
                conn.execute(INSERT_DECISION, drop_params(new, verdict.reason))
                self._after_commit([new], publish_id=None)
                return WriteReceipt(new.id, "dropped", verdict.reason)
            row = conn.execute(INSERT_MEMORY_WITH_JOB, memory_params(new)).fetchone()
            if row is None:
                return self._resolve_conflict(conn, new)
        self._after_commit([new], publish_id=new.id)
        return WriteReceipt(new.id, "accepted", "queued for the write workers")

    def _write_many(self, batch: Sequence[NewMemory]) -> list[WriteReceipt]:
        receipts: list[WriteReceipt | None] = [None] * len(batch)
        inserted: list[int] = []
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
                    receipts[index] = WriteReceipt(new.id, "accepted", "queued for the workers")
                else:
                    receipts[index] = self._resolve_conflict(conn, new)
        self._after_commit(
            [
                new
                for new, receipt in zip(batch, receipts, strict=True)
                if receipt is not None and receipt.status != "duplicate"
            ],
            publish_id=batch[inserted[0]].id if inserted else None,
        )
        return [receipt for receipt in receipts if receipt is not None]

    def _resolve_conflict(self, conn: Any, new: NewMemory) -> WriteReceipt:
        conflict = find_conflict(conn, new)
        if conflict is None:  # deleted between the insert and this look: write it again
            row = conn.execute(INSERT_MEMORY_WITH_JOB, memory_params(new)).fetchone()
            if row is not None:
                self._after_commit([], publish_id=new.id)
                return WriteReceipt(new.id, "accepted", "queued for the write workers")
            raise RuntimeError(f"memory {new.id} conflicts but cannot be found")
        existing, reason, record_drop = conflict_outcome(new, conflict)
        if record_drop:
            conn.execute(INSERT_DECISION, drop_params(new, reason))
        return WriteReceipt(existing, "duplicate", reason)

    def _after_commit(self, turns: Sequence[NewMemory], *, publish_id: uuid.UUID | None) -> None:
        """One Redis round trip after COMMIT: the turns into their sessions' working-memory
        windows and, when a write was inserted, the drain flag; a drain is published only if
        no other was queued. Failures are logged, never raised: the rows are durable, and the
        outbox relay publishes what was not.

        Dropped turns go into the window too: it is the conversation as it happened.
        """
        try:
            pipe = self._redis.pipeline(transaction=False)
            queue_push(
                pipe,
                [turn_record(new) for new in turns],
                max_turns=self._working_memory.max_turns,
                ttl_s=self._working_memory.ttl_s,
            )
            if publish_id is not None:
                queue_drain_flag(pipe, str(publish_id))
            flag_set = pipe.execute()[-1] if publish_id is not None else False
        except redis.RedisError as exc:
            log.warning("after-commit Redis round trip failed (%s); the relay will publish", exc)
            return
        if flag_set:
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
        from pipelines.assemble import QUERY_MAX_BYTES
        from workers.cognition_service import affected_by

        check_id("tenant_id", tenant_id)
        check_text("query", query, QUERY_MAX_BYTES)
        if not 1 <= max_hops <= 10:
            raise InvalidInput("max_hops", f"must be between 1 and 10, got {max_hops}", "10")
        return affected_by(self._pool, tenant_id, query, max_hops=max_hops)

    def complete_task(self, tenant_id: str, task_id: str) -> None:
        """The task is finished: its memories get an L3 task summary in the background."""
        check_id("tenant_id", tenant_id)
        check_id("task_id", task_id)
        self._app.send_task(
            "memory.compress.complete_task",
            kwargs={"tenant_id": tenant_id, "task_id": task_id},
            queue="compress",
        )

    # -- task checkpoints -------------------------------------------------------------------

    @property
    def checkpoints(self) -> CheckpointService:
        """The checkpoint store (list, show, verify besides the three calls below)."""
        if self._checkpoints is None:
            from workers.adapters import build_llm

            self._checkpoints = CheckpointService(
                self._pool, build_llm(self.settings), keep_last=self.settings.checkpoint_keep_last
            )
        return self._checkpoints

    def checkpoint(
        self, tenant_id: str, task_id: str, state: TaskState, *, phase_transition: bool = False
    ) -> uuid.UUID:
        """Save where the agent is: one transaction; returns the checkpoint id."""
        return self.checkpoints.checkpoint(
            tenant_id, task_id, state, phase_transition=phase_transition
        )

    def resume(self, tenant_id: str, task_id: str) -> ResumeResult | None:
        """The newest checkpoint whose checksum holds, calibrated; None if none was saved."""
        return self.checkpoints.resume(tenant_id, task_id)

    def rollback(self, tenant_id: str, task_id: str, checkpoint_id: uuid.UUID | str) -> uuid.UUID:
        """Make an earlier checkpoint the newest again; returns the new checkpoint's id."""
        return self.checkpoints.rollback(tenant_id, task_id, checkpoint_id)

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
    ) -> list[dict[str, Any]]:
        """Dense recall inside the tenant's scope, answered by the store's owner process."""
        text = prepare_write(
            query, tenant_id=tenant_id, task_id=task_id or "recall", session_id="recall"
        ).content
        if not 1 <= limit <= 100:
            raise InvalidInput("limit", f"must be between 1 and 100, got {limit}", "100")
        result = self._app.send_task(
            "memory.recall.search",
            kwargs={"tenant_id": tenant_id, "query": text, "task_id": task_id, "limit": limit},
            queue="recall",
        )
        hits: list[dict[str, Any]] = result.get(timeout=timeout_s)
        return hits

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
        ``recall`` queue). With a Qdrant server the pipeline runs here, bound the same way.
        """
        from workers.read_service import check_context_call, layout_of

        call = check_context_call(
            tenant_id=tenant_id,
            task_id=task_id,
            query=query,
            budget_tokens=budget_tokens,
            phase=phase,
            focus=focus,
            session_id=session_id,
            system=system,
            task_context=task_context,
            variables=variables,
            scratch=scratch,
            counter=self._token_counter(),
            layout=layout_of(self.settings),
            content_max_bytes=self.settings.content_max_bytes,
        )
        if self.settings.qdrant_url:
            from workers.read_service import context_answer

            answer = context_answer(self._read_stores(), call.to_json(), self._publish_touch)
        else:
            result = self._app.send_task(
                "memory.recall.context", kwargs=call.to_json(), queue="recall"
            )
            answer = result.get(timeout=timeout_s or self.settings.context_timeout_s)
        return self._context_from(answer)

    def _context_from(self, answer: Any) -> AssembledContext:
        from pipelines.assemble import AssembledContext

        if not isinstance(answer, dict):
            raise RuntimeError(f"memory.recall.context answered {type(answer).__name__}")
        error = answer.get("error")
        if isinstance(error, dict):
            message = str(error.get("message", "invalid"))
            field = str(error.get("field", "arguments"))
            prefix = f"{field}: "
            raise InvalidInput(
                field,
                message[len(prefix) :] if message.startswith(prefix) else message,
                error.get("limit"),
            )
        return AssembledContext.model_validate(answer["context"])

    def _token_counter(self) -> TokenCounter:
        if self._counter is None:
            from workers.adapters.tokenizer import load_token_counter

            self._counter = load_token_counter(self.settings.tokenizer)
        return self._counter

    def _read_stores(self) -> ReadStores:
        """Server mode: the read path bound in this process (the Qdrant server is shared)."""
        if self._local_reads is None:
            from workers.adapters import build_embedder, build_llm, build_vector_index
            from workers.read_service import ReadStores

            self._local_reads = ReadStores(
                settings=self.settings,
                pool=self._pool,
                vectors=build_vector_index(self.settings),
                embedder=build_embedder(self.settings),
                llm=build_llm(self.settings),
                counter=self._token_counter(),
                working_memory=self._working_memory,
                collection=f"{self.settings.collection_prefix}_episodic",
            )
        return self._local_reads

    def _publish_touch(self, tenant_id: str, memory_ids: list[str], accessed_at: datetime) -> None:
        self._app.send_task(
            "memory.maintenance.touch_memories",
            kwargs={
                "tenant_id": tenant_id,
                "memory_ids": memory_ids,
                "accessed_at": accessed_at.isoformat(),
            },
            queue="maintenance",
        )

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
