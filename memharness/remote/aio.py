"""``AsyncRemoteMemoryClient``: the remote client for asyncio agents.

The same calls as :class:`memharness.remote.RemoteMemoryClient` (built and read by
``memharness.remote.calls``), sent with ``httpx.AsyncClient``: ``AsyncMemoryClient``'s
``record``, ``open`` and ``close`` and the rest of ``MemoryClient``'s methods as coroutines,
so an asyncio agent needs neither a thread nor PostgreSQL. The streamed export is the sync
client's.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

from memharness.remote import calls
from memharness.remote.client import DEFAULT_TIMEOUT_S, POLL_INTERVAL_S, transport_error
from pipelines.records import MemoryStatus, MemoryType, Modality
from workers.write.plan import WriteReceipt

if TYPE_CHECKING:
    from pipelines.own.history import MemoryHistory, TraceItem
    from pipelines.own.listing import MemoryPage, SemanticPage
    from pipelines.read.assemble import AssembledContext
    from pipelines.read.recall import KnowledgeView
    from pipelines.records import EpisodicMemory
    from pipelines.state.models import TaskState
    from workers.own.correct import CorrectionReceipt, UndoReceipt
    from workers.own.forget import ForgetReceipt
    from workers.read.affected import Traversal
    from workers.state.service import ResumeResult

T = TypeVar("T")

__all__ = ["AsyncRemoteMemoryClient"]


class AsyncRemoteMemoryClient:
    """``async with AsyncRemoteMemoryClient(url, api_key) as memory: await memory.record(...)``
    (see :class:`memharness.remote.RemoteMemoryClient` for the tenant and actor rules)."""

    def __init__(
        self,
        url: str,
        api_key: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.url,
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=timeout_s,
            transport=transport,
        )
        self._key_tenant: str | None = None

    async def open(self) -> AsyncRemoteMemoryClient:
        """Nothing to open ahead (httpx connects on the first call); kept so that code
        written for ``AsyncMemoryClient`` runs unchanged."""
        return self

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncRemoteMemoryClient:
        return await self.open()

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def tenant_id(self) -> str:
        """The key's tenant (asked once)."""
        if self._key_tenant is None:
            self._key_tenant = str((await self._send(calls.whoami()))["tenant_id"])
        return self._key_tenant

    async def _send(self, call: calls.Call[T]) -> T:
        if call.tenant is not None and call.tenant != await self.tenant_id():
            raise calls.other_tenant()
        try:
            response = await self._http.request(
                call.method,
                call.path,
                content=call.body,
                params=call.params,
                headers={"Content-Type": "application/json", **call.headers},
                timeout=call.timeout_s if call.timeout_s is not None else httpx.USE_CLIENT_DEFAULT,
            )
        except httpx.HTTPError as exc:
            raise transport_error(exc, self.url) from exc
        return calls.settle(
            call, response.status_code, calls.payload_of(response), response.headers
        )

    async def record(
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
        return await self._send(
            calls.record(
                content,
                tenant_id=tenant_id,
                task_id=task_id,
                session_id=session_id,
                type=type,
                user_id=user_id,
                agent_id=agent_id,
                timestamp=timestamp,
                modality=modality,
                metadata=metadata,
                idempotency_key=idempotency_key,
            )
        )

    async def record_many(self, items: Iterable[Mapping[str, Any]]) -> list[WriteReceipt]:
        return await self._send(calls.record_many(items))

    async def affected_by(self, query: str, *, tenant_id: str, max_hops: int = 3) -> Traversal:
        return await self._send(calls.affected_by(query, tenant_id=tenant_id, max_hops=max_hops))

    async def complete_task(self, tenant_id: str, task_id: str) -> None:
        await self._send(calls.complete_task(tenant_id, task_id))

    async def set_golden_queries(self, tenant_id: str, queries: Sequence[object]) -> int:
        return await self._send(calls.set_golden_queries(tenant_id, queries))

    async def checkpoint(
        self, tenant_id: str, task_id: str, state: TaskState, *, phase_transition: bool = False
    ) -> uuid.UUID:
        return await self._send(
            calls.checkpoint(tenant_id, task_id, state, phase_transition=phase_transition)
        )

    async def resume(self, tenant_id: str, task_id: str) -> ResumeResult | None:
        return await self._send(calls.resume(tenant_id, task_id))

    async def rollback(
        self, tenant_id: str, task_id: str, checkpoint_id: uuid.UUID | str
    ) -> uuid.UUID:
        return await self._send(calls.rollback(tenant_id, task_id, checkpoint_id))

    async def get(self, memory_id: uuid.UUID | str, *, tenant_id: str) -> EpisodicMemory | None:
        return await self._send(calls.get(memory_id, tenant_id=tenant_id))

    async def recall(
        self,
        query: str,
        *,
        tenant_id: str,
        task_id: str | None = None,
        limit: int = 5,
        timeout_s: float = 10.0,
    ) -> list[dict[str, Any]]:
        return await self._send(
            calls.recall(query, tenant_id=tenant_id, task_id=task_id, limit=limit,
                         timeout_s=timeout_s)
        )  # fmt: skip

    async def knowledge(
        self,
        *,
        tenant_id: str,
        kind: str | None = None,
        query: str | None = None,
        limit: int = 50,
    ) -> list[KnowledgeView]:
        return await self._send(
            calls.knowledge(tenant_id=tenant_id, kind=kind, query=query, limit=limit)
        )

    async def context(
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
        return await self._send(
            calls.context(
                task_id,
                query,
                budget_tokens,
                phase,
                focus,
                tenant_id=tenant_id,
                session_id=session_id,
                system=system,
                task_context=task_context,
                variables=variables,
                scratch=scratch,
                timeout_s=timeout_s,
            )
        )

    async def explain(self, context: AssembledContext, *, tenant_id: str) -> list[TraceItem]:
        return await self._send(calls.explain(context, tenant_id=tenant_id))

    async def stats(self, tenant_id: str | None = None) -> dict[str, int]:
        return await self._send(calls.stats(tenant_id))

    async def wait_until_settled(
        self, memory_ids: Iterable[uuid.UUID], *, timeout_s: float = 30.0
    ) -> dict[str, int]:
        """Wait until none of ``memory_ids`` is pending; returns the count per status."""
        tenant = await self.tenant_id()
        pending = [str(memory_id) for memory_id in memory_ids]
        settled: dict[str, int] = {}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            found = await asyncio.gather(*(self.get(m, tenant_id=tenant) for m in pending))
            still: list[str] = []
            for memory_id, memory in zip(pending, found, strict=True):
                if memory is None:
                    continue
                if memory.status == MemoryStatus.PENDING:
                    still.append(memory_id)
                else:
                    settled[str(memory.status)] = settled.get(str(memory.status), 0) + 1
            pending = still
            if not pending:
                return settled
            if loop.time() > deadline:
                counts = {**settled, MemoryStatus.PENDING.value: len(pending)}
                raise TimeoutError(f"still pending after {timeout_s:.0f}s: {counts}")
            await asyncio.sleep(POLL_INTERVAL_S)

    async def correct(
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
        return await self._send(
            calls.correct(memory_id, new_content, tenant_id=tenant_id, reason=reason,
                          type=type, metadata=metadata)
        )  # fmt: skip

    async def undo_correction(
        self,
        memory_id: uuid.UUID | str,
        *,
        tenant_id: str,
        reason: str,
        actor: str = "client",
    ) -> UndoReceipt:
        return await self._send(
            calls.undo_correction(memory_id, tenant_id=tenant_id, reason=reason)
        )

    async def forget(
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
        return await self._send(
            calls.forget(tenant_id=tenant_id, reason=reason, memory_id=memory_id,
                         task_id=task_id, session_id=session_id, whole_tenant=whole_tenant)
        )  # fmt: skip

    async def forget_status(self, request_id: uuid.UUID | str, *, tenant_id: str) -> ForgetReceipt:
        return await self._send(calls.forget_status(request_id, tenant_id=tenant_id))

    async def wait_until_forgotten(
        self, receipt: ForgetReceipt, *, tenant_id: str, timeout_s: float = 30.0
    ) -> ForgetReceipt:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            status = await self.forget_status(receipt.request_id, tenant_id=tenant_id)
            if status.status in ("done", "dead"):
                return status
            if loop.time() > deadline:
                raise TimeoutError(f"forget request {receipt.request_id} still {status.status}")
            await asyncio.sleep(POLL_INTERVAL_S)

    async def history(self, memory_id: uuid.UUID | str, *, tenant_id: str) -> MemoryHistory:
        return await self._send(calls.history(memory_id, tenant_id=tenant_id))

    async def list_memories(self, tenant_id: str, **filters: Any) -> MemoryPage:
        return await self._send(calls.list_memories(tenant_id, filters))

    async def list_semantic(self, tenant_id: str, **filters: Any) -> SemanticPage:
        return await self._send(calls.list_semantic(tenant_id, filters))
