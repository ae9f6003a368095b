"""``RemoteMemoryClient``: ``MemoryClient`` over the HTTP API, for an agent that has a URL
and an API key and no way to PostgreSQL or Redis.

The methods, arguments, return types and exceptions are ``MemoryClient``'s; each sends one
request built by ``memharness.remote.calls`` and reads the answer there. The tenant is the
key's: a ``tenant_id`` argument is kept so that code written for ``MemoryClient`` runs
unchanged, and naming another tenant raises :class:`AuthError` (the server refuses it in a
body; for a read the client checks it against the key's, learned once from ``/v1/whoami``).
``actor`` arguments are not sent: the server records the key (``api:<prefix>``) as the
actor, so the audit log names who really acted.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Generator, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

import httpx

from memharness.remote import calls
from memharness.remote.errors import Unavailable
from pipelines.records import MemoryStatus, MemoryType, Modality
from workers.write.plan import WriteReceipt

if TYPE_CHECKING:
    from pipelines.own.export_format import ExportCounts
    from pipelines.own.history import MemoryHistory, TraceItem
    from pipelines.own.listing import MemoryPage, SemanticPage
    from pipelines.read.assemble import AssembledContext
    from pipelines.read.recall import KnowledgeView
    from pipelines.records import EpisodicMemory
    from pipelines.state.models import TaskState
    from workers.own.correct import CorrectionReceipt, UndoReceipt
    from workers.own.export import Progress as ExportProgress
    from workers.own.forget import ForgetReceipt
    from workers.read.affected import Traversal
    from workers.state.service import ResumeResult

T = TypeVar("T")

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "POLL_INTERVAL_S",
    "LastLine",
    "RemoteMemoryClient",
    "counts_of_export",
]

# A write answers in milliseconds and a context within the server's own context timeout
# (10 s by default); 30 s only bounds a server that stopped answering.
DEFAULT_TIMEOUT_S = 30.0
# The waits poll over HTTP: a request per pending id per round, so rounds are slower than
# the local client's 50 ms SQL polls.
POLL_INTERVAL_S = 0.2


def counts_of_export(last_line: str) -> ExportCounts:
    """The counts of an export's end line; a stream without one was cut off."""
    from pipelines.own.export_format import ExportCounts

    try:
        end = json.loads(last_line)
    except ValueError:
        end = None
    if not isinstance(end, dict) or end.get("kind") != "end":
        raise Unavailable("the export stream ended before its end line; retry it")
    return ExportCounts.model_validate(end["counts"])


class LastLine:
    """Follows a stream of text chunks: how many lines ended, and the last line."""

    def __init__(self) -> None:
        self.lines = 0
        self._done = ""
        self._open = ""

    def feed(self, chunk: str) -> None:
        *ended, self._open = (self._open + chunk).split("\n")
        self.lines += len(ended)
        if ended:
            self._done = ended[-1]

    @property
    def last(self) -> str:
        return self._open if self._open.strip() else self._done


def transport_error(exc: httpx.HTTPError, url: str) -> Exception:
    """A request that got no answer: a timeout is ``TimeoutError``, anything else (refused,
    reset, unresolvable) means the server is unreachable."""
    if isinstance(exc, httpx.TimeoutException):
        return TimeoutError(f"{url} did not answer in time ({type(exc).__name__})")
    return Unavailable(f"{url} is unreachable ({type(exc).__name__}: {exc})")


class RemoteMemoryClient:
    """An agent's handle on its memory through ``memharness serve``: ``record`` what
    happens, ask for the ``context`` of the next step, ``checkpoint`` / ``resume`` where
    the task is. ``RemoteMemoryClient("http://memory:8000", "mh_...")``; use it as a context
    manager, or call :meth:`close`. One per process is enough (httpx pools connections and
    is thread-safe).
    """

    def __init__(
        self,
        url: str,
        api_key: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=timeout_s,
            transport=transport,
        )
        self._key_tenant: str | None = None
        self._lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RemoteMemoryClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- the driver --------------------------------------------------------------------------

    @property
    def tenant_id(self) -> str:
        """The key's tenant (asked once)."""
        if self._key_tenant is None:
            tenant = str(self._send(calls.whoami())["tenant_id"])
            with self._lock:
                self._key_tenant = tenant
        return self._key_tenant

    def _send(self, call: calls.Call[T]) -> T:
        if call.tenant is not None and call.tenant != self.tenant_id:
            raise calls.other_tenant()
        try:
            response = self._http.request(
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

    # -- the write path ----------------------------------------------------------------------

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
        """Record one interaction (``MemoryClient.record``); returns after the server's
        COMMIT. Raises :class:`InvalidInput` naming the field and limit."""
        return self._send(
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

    def record_many(self, items: Iterable[Mapping[str, Any]]) -> list[WriteReceipt]:
        """Record several interactions in one request; one bad item writes nothing."""
        return self._send(calls.record_many(items))

    # -- links and task lifecycle ----------------------------------------------------------

    def affected_by(self, query: str, *, tenant_id: str, max_hops: int = 3) -> Traversal:
        return self._send(calls.affected_by(query, tenant_id=tenant_id, max_hops=max_hops))

    def complete_task(self, tenant_id: str, task_id: str) -> None:
        self._send(calls.complete_task(tenant_id, task_id))

    def set_golden_queries(self, tenant_id: str, queries: Sequence[object]) -> int:
        return self._send(calls.set_golden_queries(tenant_id, queries))

    # -- task checkpoints ------------------------------------------------------------------

    def checkpoint(
        self, tenant_id: str, task_id: str, state: TaskState, *, phase_transition: bool = False
    ) -> uuid.UUID:
        return self._send(
            calls.checkpoint(tenant_id, task_id, state, phase_transition=phase_transition)
        )

    def resume(self, tenant_id: str, task_id: str) -> ResumeResult | None:
        return self._send(calls.resume(tenant_id, task_id))

    def rollback(self, tenant_id: str, task_id: str, checkpoint_id: uuid.UUID | str) -> uuid.UUID:
        return self._send(calls.rollback(tenant_id, task_id, checkpoint_id))

    # -- reads -------------------------------------------------------------------------------

    def get(self, memory_id: uuid.UUID | str, *, tenant_id: str) -> EpisodicMemory | None:
        return self._send(calls.get(memory_id, tenant_id=tenant_id))

    def recall(
        self,
        query: str,
        *,
        tenant_id: str,
        task_id: str | None = None,
        limit: int = 5,
        timeout_s: float = 10.0,
    ) -> list[dict[str, Any]]:
        """Dense recall; ``timeout_s`` bounds the HTTP wait (the server's own is
        ``MEMHARNESS_CONTEXT_TIMEOUT_S``: past it the answer is a ``TimeoutError``)."""
        return self._send(
            calls.recall(query, tenant_id=tenant_id, task_id=task_id, limit=limit,
                         timeout_s=timeout_s)
        )  # fmt: skip

    def knowledge(
        self,
        *,
        tenant_id: str,
        kind: str | None = None,
        query: str | None = None,
        limit: int = 50,
    ) -> list[KnowledgeView]:
        return self._send(calls.knowledge(tenant_id=tenant_id, kind=kind, query=query, limit=limit))

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
        """The context of the agent's next step within ``budget_tokens``
        (``MemoryClient.context``)."""
        return self._send(
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

    def explain(self, context: AssembledContext, *, tenant_id: str) -> list[TraceItem]:
        return self._send(calls.explain(context, tenant_id=tenant_id))

    def stats(self, tenant_id: str | None = None) -> dict[str, int]:
        return self._send(calls.stats(tenant_id))

    def wait_until_settled(
        self, memory_ids: Iterable[uuid.UUID], *, timeout_s: float = 30.0
    ) -> dict[str, int]:
        """Block until none of ``memory_ids`` is pending; returns the count per status."""
        tenant = self.tenant_id
        pending = [str(memory_id) for memory_id in memory_ids]
        settled: dict[str, int] = {}
        deadline = time.monotonic() + timeout_s
        while True:
            still: list[str] = []
            for memory_id in pending:
                memory = self.get(memory_id, tenant_id=tenant)
                if memory is None:
                    continue
                if memory.status == MemoryStatus.PENDING:
                    still.append(memory_id)
                else:
                    settled[str(memory.status)] = settled.get(str(memory.status), 0) + 1
            pending = still
            if not pending:
                return settled
            if time.monotonic() > deadline:
                counts = {**settled, MemoryStatus.PENDING.value: len(pending)}
                raise TimeoutError(f"still pending after {timeout_s:.0f}s: {counts}")
            time.sleep(POLL_INTERVAL_S)

    # -- ownership ---------------------------------------------------------------------------

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
        """``MemoryClient.correct``; the actor recorded is the key."""
        return self._send(
            calls.correct(memory_id, new_content, tenant_id=tenant_id, reason=reason,
                          type=type, metadata=metadata)
        )  # fmt: skip

    def undo_correction(
        self,
        memory_id: uuid.UUID | str,
        *,
        tenant_id: str,
        reason: str,
        actor: str = "client",
    ) -> UndoReceipt:
        return self._send(calls.undo_correction(memory_id, tenant_id=tenant_id, reason=reason))

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
        """``MemoryClient.forget``; ``whole_tenant`` needs a key with the admin scope."""
        return self._send(
            calls.forget(tenant_id=tenant_id, reason=reason, memory_id=memory_id,
                         task_id=task_id, session_id=session_id, whole_tenant=whole_tenant)
        )  # fmt: skip

    def forget_status(self, request_id: uuid.UUID | str, *, tenant_id: str) -> ForgetReceipt:
        return self._send(calls.forget_status(request_id, tenant_id=tenant_id))

    def wait_until_forgotten(
        self, receipt: ForgetReceipt, *, tenant_id: str, timeout_s: float = 30.0
    ) -> ForgetReceipt:
        deadline = time.monotonic() + timeout_s
        while True:
            status = self.forget_status(receipt.request_id, tenant_id=tenant_id)
            if status.status in ("done", "dead"):
                return status
            if time.monotonic() > deadline:
                raise TimeoutError(f"forget request {receipt.request_id} still {status.status}")
            time.sleep(POLL_INTERVAL_S)

    def history(self, memory_id: uuid.UUID | str, *, tenant_id: str) -> MemoryHistory:
        return self._send(calls.history(memory_id, tenant_id=tenant_id))

    # -- listing and export ----------------------------------------------------------------

    def list_memories(self, tenant_id: str, **filters: Any) -> MemoryPage:
        return self._send(calls.list_memories(tenant_id, filters))

    def list_semantic(self, tenant_id: str, **filters: Any) -> SemanticPage:
        return self._send(calls.list_semantic(tenant_id, filters))

    def export(
        self, tenant_id: str, out: TextIO, *, progress: ExportProgress | None = None
    ) -> ExportCounts:
        """Write the tenant's ``memharness.export/1`` JSON Lines to ``out``; the counts of
        the end line. ``progress(lines, None)`` follows the lines as they arrive."""
        tail = LastLine()
        for chunk in self.export_chunks(tenant_id):
            out.write(chunk)
            tail.feed(chunk)
            if progress is not None:
                progress(tail.lines, None)
        out.flush()
        return counts_of_export(tail.last)

    def export_chunks(self, tenant_id: str) -> Generator[str, None, None]:
        """The export as text chunks, as the server streams them (closing the iterator
        early closes the connection, which ends the server's snapshot)."""
        call = calls.export(tenant_id)
        if call.tenant != self.tenant_id:
            raise calls.other_tenant()
        return self._stream(call)

    def _stream(self, call: calls.Call[None]) -> Generator[str, None, None]:
        try:
            with self._http.stream(call.method, call.path) as response:
                if response.status_code != 200:
                    response.read()
                    calls.settle(
                        call, response.status_code, calls.payload_of(response), response.headers
                    )
                yield from response.iter_text()
        except httpx.HTTPError as exc:
            raise transport_error(exc, self.url) from exc
