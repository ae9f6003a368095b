"""What the integrations call on a memory client, as a Protocol: ``MemoryClient`` (in the
agent's process) and ``RemoteMemoryClient`` (over the HTTP API) both provide it, so an
integration takes either."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pipelines.records import EpisodicMemory
    from workers.own.correct import CorrectionReceipt
    from workers.own.forget import ForgetReceipt
    from workers.write.plan import WriteReceipt

__all__ = ["StoreClient"]


class StoreClient(Protocol):
    """What the store calls on its client: ``MemoryClient`` and ``RemoteMemoryClient``
    both provide it."""

    def record(
        self,
        content: str | bytes,
        *,
        tenant_id: str,
        task_id: str,
        session_id: str,
        agent_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> WriteReceipt: ...

    def correct(
        self,
        memory_id: uuid.UUID | str,
        new_content: str,
        *,
        tenant_id: str,
        reason: str,
        actor: str = "client",
    ) -> CorrectionReceipt: ...

    def get(self, memory_id: uuid.UUID | str, *, tenant_id: str) -> EpisodicMemory | None: ...

    def forget(
        self,
        *,
        tenant_id: str,
        reason: str,
        memory_id: uuid.UUID | str | None = None,
        actor: str = "client",
    ) -> ForgetReceipt: ...

    def recall(
        self,
        query: str,
        *,
        tenant_id: str,
        task_id: str | None = None,
        limit: int = 5,
        timeout_s: float = 10.0,
    ) -> list[dict[str, Any]]: ...

    def wait_until_settled(
        self, memory_ids: Iterable[uuid.UUID], *, timeout_s: float = 30.0
    ) -> dict[str, int]: ...

    def close(self) -> None: ...
