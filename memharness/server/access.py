"""What a route may do for the key that opened the door: its scopes, its tenant, its agent.

A key bound to an agent reads what its tenant knows (agents of one tenant share memory) but
changes only what its own agent wrote: it corrects, undoes, forgets and reads the history of
its agent's memories, and another agent's memory answers the 404 of an id that does not exist
(so a bound key cannot even learn that it exists). Erasing a task or a session, which hold
other agents' memories too, needs a key bound to no agent.

``ApiError`` is a refusal with its status and JSON body; the app turns it into a response.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from memharness.server.errors import body
from memharness.server.keys import KeyRecord, Scope
from memharness.server.runtime import Runtime
from pipelines.errors import NotFound

if TYPE_CHECKING:
    from memharness.client import MemoryClient

# Documents the scheme in OpenAPI (/docs); the gate has already checked the key.
_bearer = HTTPBearer(auto_error=False, description="An API key: `memharness keys create`.")


class ApiError(Exception):
    def __init__(self, status: int, payload: dict[str, Any]) -> None:
        self.status = status
        self.payload = payload
        super().__init__(payload.get("message", ""))


def forbidden(field: str, message: str) -> ApiError:
    return ApiError(403, body("forbidden", field, message))


def key_of(request: Request, scope: Scope) -> KeyRecord:
    """The request's key, if it holds ``scope`` (admin holds every scope)."""
    record: KeyRecord = request.scope["state"]["key"]
    if not record.allows(scope):
        raise forbidden("scope", f"this key lacks the {scope.value} scope")
    return record


def needs(scope: Scope) -> Callable[..., Awaitable[KeyRecord]]:
    """A dependency: the request's key, if it holds ``scope`` (admin holds every scope)."""

    async def check(
        request: Request,
        _: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
    ) -> KeyRecord:
        return key_of(request, scope)

    return check


Reader = Annotated[KeyRecord, Depends(needs(Scope.READ))]
Writer = Annotated[KeyRecord, Depends(needs(Scope.WRITE))]


def runtime_of(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def own_tenant(key: KeyRecord, named: object) -> str:
    """The key's tenant; a body naming another is refused without saying anything of it."""
    if named is not None and named != key.tenant_id:
        raise forbidden("tenant_id", "a key acts for its own tenant only")
    return key.tenant_id


def own_agent(key: KeyRecord, named: Any) -> Any:
    """The agent a write is recorded for: the key's, when it is bound to one."""
    if key.agent_id is None:
        return named
    if named is not None and named != key.agent_id:
        raise forbidden("agent_id", "this key is bound to another agent")
    return key.agent_id


def own_memory(client: MemoryClient, key: KeyRecord, memory_id: object) -> None:
    """Refuse a bound key another agent's memory with the 404 of an unknown id (see the module
    docstring). A memory's agent never changes (a correction's version inherits it, a
    tombstone keeps it), so checking before the call cannot race with it."""
    if key.agent_id is None or memory_id is None:
        return
    from pipelines.own.versions import check_memory_id

    parsed = check_memory_id(memory_id)
    memory = client.get(parsed, tenant_id=key.tenant_id)
    if memory is None or memory.agent_id != key.agent_id:
        raise NotFound("memory_id", str(parsed))


def whole_memories_only(key: KeyRecord, memory_id: object) -> None:
    """A bound key erases memories one at a time: a task or a session is every agent's."""
    if key.agent_id is not None and memory_id is None:
        raise forbidden(
            "agent_id",
            "a key bound to an agent forgets its agent's memories one memory_id at a time; "
            "a task, a session or the tenant needs a key bound to no agent",
        )
