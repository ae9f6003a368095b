"""The MCP server's face: its tools' schemas and descriptions, and bad calls as tool errors.

The SDK's own client talks to the server in process; the server holds a real
``MemoryClient`` on the test database (no workers: every call here is refused, or answered,
before a worker would be asked).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from celery.exceptions import TimeoutError as CeleryTimeout
from mcp import Client
from mcp_types import CallToolResult
from pydantic import BaseModel, Field, ValidationError

from memharness.mcp_server.server import error_payload, tool_error
from pipelines.errors import Conflict, InvalidInput, NotFound

TOOLS = {"remember", "recall", "get_context", "checkpoint", "resume", "forget"}


def run(server: Any, body: Callable[[Client], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with Client(server) as client:
            return await body(client)

    return anyio.run(main)


def error_of(result: CallToolResult) -> dict[str, Any]:
    """The error object of a failed call, read from its text as a model would read it."""
    assert result.is_error, result
    text = result.content[0].text  # type: ignore[union-attr]
    payload: dict[str, Any] = json.loads(text)
    assert result.structured_content == payload
    return payload


def call(server: Any, name: str, arguments: dict[str, Any]) -> CallToolResult:
    async def body(client: Client) -> CallToolResult:
        return await client.call_tool(name, arguments)

    result: CallToolResult = run(server, body)
    return result


# -- schemas ---------------------------------------------------------------------------------


def test_every_tool_is_listed_with_a_description_and_input_and_output_schemas(server) -> None:  # type: ignore[no-untyped-def]
    async def body(client: Client) -> Any:
        return await client.list_tools()

    tools = {tool.name: tool for tool in run(server, body).tools}

    assert set(tools) >= TOOLS
    for tool in tools.values():
        assert len(tool.description or "") > 100, tool.name
        assert tool.output_schema is not None, tool.name
        for name, prop in tool.input_schema["properties"].items():
            assert prop.get("description") or prop.get("$ref") or name == "state", (tool, name)
    remember = tools["remember"]
    assert remember.input_schema["required"] == ["content", "task_id"]
    assert "queued" in (remember.description or "")
    assert "65536 bytes" in (remember.description or "")
    assert remember.annotations is not None and remember.annotations.idempotent_hint is True
    limit = tools["recall"].input_schema["properties"]["limit"]
    assert (limit["minimum"], limit["maximum"], limit["default"]) == (1, 100, 5)
    budget = tools["get_context"].input_schema["properties"]["budget_tokens"]
    assert (budget["minimum"], budget["maximum"]) == (4000, 1_048_576)
    assert set(tools["get_context"].input_schema["required"]) == {
        "task_id",
        "query",
        "budget_tokens",
    }
    phases = tools["get_context"].input_schema["$defs"]["TaskPhase"]["enum"]
    assert phases == ["planning", "execution", "debugging", "review", "reflection"]
    state = tools["checkpoint"].input_schema["$defs"]["TaskState"]
    assert {"tree", "current_node_id", "pending_actions", "working_memory"} <= set(
        state["properties"]
    )
    assert tools["resume"].annotations is not None
    assert tools["resume"].annotations.read_only_hint is True


# -- bad calls -------------------------------------------------------------------------------


def test_an_empty_content_is_a_tool_error_naming_the_field(server) -> None:  # type: ignore[no-untyped-def]
    error = error_of(call(server, "remember", {"content": "   ", "task_id": "t-1"}))
    assert error == {
        "error": "invalid_input",
        "field": "content",
        "message": "is empty or only whitespace",
        "limit": None,
    }


def test_an_oversized_content_names_the_limit(server) -> None:  # type: ignore[no-untyped-def]
    error = error_of(call(server, "remember", {"content": "x" * 70_000, "task_id": "t-1"}))
    assert (error["field"], error["limit"]) == ("content", "65536 bytes")


def test_a_malformed_task_id_is_refused_with_the_rule(server) -> None:  # type: ignore[no-untyped-def]
    error = error_of(call(server, "remember", {"content": "hello", "task_id": "has space"}))
    assert (error["field"], error["limit"]) == ("task_id", "128 chars")
    assert "letters, digits" in error["message"]


def test_a_missing_argument_is_named(server) -> None:  # type: ignore[no-untyped-def]
    error = error_of(call(server, "remember", {"content": "hello"}))
    assert error == {
        "error": "invalid_input",
        "field": "task_id",
        "message": "is required",
        "limit": None,
    }


def test_schema_bounds_come_back_with_the_bound(server) -> None:  # type: ignore[no-untyped-def]
    error = error_of(call(server, "recall", {"query": "billing", "limit": 500}))
    assert (error["field"], error["limit"]) == ("limit", "<= 100")
    error = error_of(
        call(server, "get_context", {"task_id": "t", "query": "q", "budget_tokens": 10})
    )
    assert (error["field"], error["limit"]) == ("budget_tokens", ">= 4000")
    error = error_of(call(server, "remember", {"content": "c", "task_id": "t", "importance": 2}))
    assert (error["field"], error["limit"]) == ("importance", "<= 1.0")


def test_an_unknown_enum_value_lists_the_allowed_ones(server) -> None:  # type: ignore[no-untyped-def]
    arguments = {"task_id": "t", "query": "q", "budget_tokens": 8000, "phase": "coding"}
    error = error_of(call(server, "get_context", arguments))
    assert error["field"] == "phase"
    assert "planning" in error["message"] and "reflection" in error["message"]


def test_metadata_that_is_not_an_object_is_refused(server) -> None:  # type: ignore[no-untyped-def]
    error = error_of(call(server, "remember", {"content": "c", "task_id": "t", "metadata": [1, 2]}))
    assert error["field"] == "metadata"


def test_an_inconsistent_task_state_names_the_node(server) -> None:  # type: ignore[no-untyped-def]
    state = {"tree": [{"id": "b", "title": "child", "parent_id": "a"}]}
    error = error_of(call(server, "checkpoint", {"task_id": "t", "state": state}))
    assert error["field"] == "state"
    assert "tree.0" in error["message"] and "'a'" in error["message"]
    state = {"tree": [{"id": "a", "title": "x", "colour": "red"}]}
    error = error_of(call(server, "checkpoint", {"task_id": "t", "state": state}))
    assert (error["field"], error["message"]) == ("state.tree[0].colour", "is not a known field")


def test_an_unknown_tool_stays_the_sdks_error(server) -> None:  # type: ignore[no-untyped-def]
    result = call(server, "teleport", {})
    assert result.is_error
    assert "teleport" in result.content[0].text  # type: ignore[union-attr]


def test_resume_of_a_task_never_saved_says_so(server) -> None:  # type: ignore[no-untyped-def]
    result = call(server, "resume", {"task_id": "never-saved"})
    assert not result.is_error
    assert result.structured_content is not None
    assert result.structured_content["found"] is False
    assert "no checkpoint saved" in result.structured_content["message"]


def test_forget_of_a_malformed_id_or_an_empty_reason_names_the_field(server) -> None:  # type: ignore[no-untyped-def]
    error = error_of(call(server, "forget", {"memory_id": "not-a-uuid", "reason": "wrong"}))
    assert (error["error"], error["field"]) == ("invalid_input", "memory_id")
    error = error_of(call(server, "forget", {"memory_id": str(uuid.uuid4()), "reason": " "}))
    assert (error["error"], error["field"]) == ("invalid_input", "reason")


def test_forget_answers_alike_for_an_unknown_id_and_another_tenants(server, memory) -> None:  # type: ignore[no-untyped-def]
    # given a memory of another tenant (the server acts for acme)
    theirs = memory.record("globex's secret plan", tenant_id="globex", task_id="t", session_id="s")
    unknown = uuid.uuid4()

    # when the agent tries to forget it, and an id nobody has
    errors = [
        error_of(call(server, "forget", {"memory_id": str(memory_id), "reason": "cleanup"}))
        for memory_id in (theirs.memory_id, unknown)
    ]

    # then both are the same not_found, and the other tenant's memory is untouched
    assert [(e["error"], e["field"]) for e in errors] == [("not_found", "memory_id")] * 2
    assert errors[0]["message"] == f"no memory '{theirs.memory_id}' in this tenant"
    assert errors[1]["message"] == f"no memory '{unknown}' in this tenant"
    assert memory.get(theirs.memory_id, tenant_id="globex").content == "globex's secret plan"


def test_remember_answers_at_once_with_no_worker_running(server, memory) -> None:  # type: ignore[no-untyped-def]
    # given no worker at all: nothing will decide on the write while the test runs
    arguments = {"content": "Deploy the billing service on Friday.", "task_id": "deploy"}

    # when the agent remembers: the receipt says queued, and the row waits for the workers
    receipt = call(server, "remember", arguments).structured_content
    assert receipt is not None and receipt["status"] == "accepted"
    stored = memory.get(receipt["memory_id"], tenant_id="acme")
    assert (stored.status, stored.agent_id, stored.session_id) == (
        "pending",
        "agent-7",
        "mcp-20261203T210000Z",
    )
    # then the same call again is the same memory, not a second one
    again = call(server, "remember", arguments).structured_content
    assert again is not None
    assert (again["memory_id"], again["status"]) == (receipt["memory_id"], "duplicate")


# -- the mapping itself ----------------------------------------------------------------------


class _Limits(BaseModel):
    limit: int = Field(ge=1, le=100)
    name: str = Field(max_length=3)


def test_error_payload_of_each_typed_error() -> None:
    assert error_payload(InvalidInput("limit", "must be between 1 and 100", "100")) == {
        "error": "invalid_input",
        "field": "limit",
        "message": "must be between 1 and 100",
        "limit": "100",
    }
    assert error_payload(NotFound("memory_id", "0000")) == {
        "error": "not_found",
        "field": "memory_id",
        "message": "no memory '0000' in this tenant",
        "limit": None,
    }
    assert error_payload(Conflict("memory_id", "already forgotten")) == {
        "error": "conflict",
        "field": "memory_id",
        "message": "already forgotten",
        "limit": None,
    }
    unavailable = error_payload(CeleryTimeout("late"))
    assert unavailable is not None and unavailable["error"] == "unavailable"
    assert error_payload(RuntimeError("boom")) is None


def test_error_payload_of_a_validation_error_names_the_first_field_and_counts_the_rest() -> None:
    try:
        _Limits.model_validate({"limit": 0, "name": "abcdef"})
    except ValidationError as exc:
        payload = error_payload(exc)
    assert payload == {
        "error": "invalid_input",
        "field": "limit",
        "message": "Input should be greater than or equal to 1 (and 1 more error)",
        "limit": ">= 1",
    }


def test_a_tool_error_is_an_is_error_result_with_the_object_as_text_and_data() -> None:
    result = tool_error({"error": "conflict", "field": "x", "message": "m", "limit": None})
    assert result.is_error
    assert json.loads(result.content[0].text) == result.structured_content  # type: ignore[union-attr]


# -- strict arguments, as strict as the HTTP API's bodies ------------------------------------


def test_a_number_sent_as_text_is_refused(server) -> None:  # type: ignore[no-untyped-def]
    error = error_of(call(server, "recall", {"query": "billing", "limit": "5"}))
    assert (error["error"], error["field"]) == ("invalid_input", "limit")
    error = error_of(
        call(server, "get_context", {"task_id": "t", "query": "q", "budget_tokens": "8000"})
    )
    assert error["field"] == "budget_tokens"


def test_an_unknown_argument_is_refused(server) -> None:  # type: ignore[no-untyped-def]
    error = error_of(call(server, "recall", {"query": "billing", "tenant_id": "other"}))
    assert (error["error"], error["field"]) == ("invalid_input", "tenant_id")


def test_every_input_schema_forbids_unknown_arguments(server) -> None:  # type: ignore[no-untyped-def]
    async def body(client: Client) -> Any:
        return await client.list_tools()

    listed = run(server, body)
    assert {tool.name: tool.input_schema.get("additionalProperties") for tool in listed.tools} == {
        name: False for name in TOOLS
    }
