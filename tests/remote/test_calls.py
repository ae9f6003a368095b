"""The remote clients' mapping of answers to exceptions, against httpx's mock transport: no
server, no services. (tests/integration/test_clients.py runs the same calls end to end.)"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from memharness import AsyncRemoteMemoryClient, AuthError, RemoteMemoryClient, Unavailable
from memharness.remote import RateLimited, RemoteError
from memharness.remote.client import LastLine
from pipelines.errors import Conflict, InvalidInput, NotFound, UnknownCursor

SCOPE = {"tenant_id": "acme", "task_id": "billing", "session_id": "s-1"}
Handler = Callable[[httpx.Request], httpx.Response]


def refusal(status: int, error: str, field: str | None, message: str, limit: str | None = None,
            headers: dict[str, str] | None = None) -> httpx.Response:  # fmt: skip
    body = {"error": error, "field": field, "message": message, "limit": limit}
    return httpx.Response(status, json=body, headers=headers)


def client_for(handler: Handler, seen: list[httpx.Request] | None = None) -> RemoteMemoryClient:
    def recorded(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        if request.url.path == "/v1/whoami":
            return httpx.Response(200, json={"tenant_id": "acme", "agent_id": None,
                                             "scopes": ["read"]})  # fmt: skip
        return handler(request)

    return RemoteMemoryClient(
        "http://memory.test/", "mh_key", transport=httpx.MockTransport(recorded)
    )


def test_each_refusal_becomes_the_local_clients_exception() -> None:
    cases: list[tuple[httpx.Response, type[Exception], dict[str, Any]]] = [
        (refusal(422, "invalid_input", "content", "is 70000 bytes of UTF-8; the limit is "
                 "65536 bytes", "65536 bytes"), InvalidInput,
         {"field": "content", "limit": "65536 bytes"}),
        (refusal(413, "too_large", "body", "is over 1048576 bytes", "1048576 bytes"),
         InvalidInput, {"field": "body", "limit": "1048576 bytes"}),
        (refusal(404, "not_found", "memory_id", "no memory 'abc' in this tenant"), NotFound,
         {"field": "memory_id", "value": "abc"}),
        (refusal(404, "not_found", "cursor", "is malformed: not a cursor this listing "
                 "returned"), UnknownCursor, {"field": "cursor"}),
        (refusal(409, "conflict", "memory_id", "was corrected already"), Conflict,
         {"field": "memory_id", "message": "was corrected already"}),
        (refusal(401, "unauthorized", "authorization", "no valid API key"), AuthError,
         {"status": 401, "field": "authorization"}),
        (refusal(403, "forbidden", "scope", "this key lacks the write scope"), AuthError,
         {"status": 403, "field": "scope"}),
        (refusal(503, "unavailable", None, "PostgreSQL is unreachable",
                 headers={"Retry-After": "5"}),
         Unavailable, {"retry_after_s": 5.0}),
        (refusal(429, "rate_limited", None, "slow down", headers={"Retry-After": "2"}),
         RateLimited, {"retry_after_s": 2.0}),
        (refusal(504, "timeout", None, "the recall answer took over 10 s"), TimeoutError, {}),
        (refusal(500, "internal", None, "the server failed; see its log"), RemoteError,
         {"status": 500}),
        (httpx.Response(502, text="<html>bad gateway</html>"), Unavailable,
         {"retry_after_s": None}),
    ]  # fmt: skip
    for response, kind, attributes in cases:
        with (
            client_for(lambda _, r=response: r) as memory,  # type: ignore[misc]
            pytest.raises(kind) as raised,
        ):
            memory.record("We bill in cents.", **SCOPE)
        for name, value in attributes.items():
            assert getattr(raised.value, name) == value, (kind, name)


def test_statuses_that_are_answers_read_as_the_local_clients_results() -> None:
    missing = refusal(404, "not_found", "memory_id", "no memory 'x' in this tenant")
    with client_for(lambda _: missing) as memory:
        assert memory.get("0b8f9d39-6f3c-4b43-9f0a-1d2a3c4b5d6e", tenant_id="acme") is None
    gone = refusal(404, "not_found", "task_id", "no task 'parser' in this tenant")
    with client_for(lambda _: gone) as memory:
        assert memory.resume("acme", "parser") is None


def test_another_tenant_is_refused_before_a_read_is_sent() -> None:
    seen: list[httpx.Request] = []
    with (
        client_for(lambda _: httpx.Response(200, json={}), seen) as memory,
        pytest.raises(AuthError) as refused,
    ):
        memory.history("0b8f9d39-6f3c-4b43-9f0a-1d2a3c4b5d6e", tenant_id="globex")
    assert (refused.value.status, refused.value.field) == (403, "tenant_id")
    assert [r.url.path for r in seen] == ["/v1/whoami"]


def test_what_json_cannot_carry_is_refused_before_sending() -> None:
    seen: list[httpx.Request] = []
    with client_for(lambda _: httpx.Response(500), seen) as memory:
        with pytest.raises(InvalidInput) as undecodable:
            memory.record(b"\xff", **SCOPE)
        with pytest.raises(InvalidInput) as nan:
            memory.record("x", metadata={"score": float("nan")}, **SCOPE)
        with pytest.raises(InvalidInput) as bad_task:
            memory.complete_task("acme", "")
    assert (undecodable.value.field, nan.value.field, bad_task.value.field) == (
        "content", "metadata", "task_id")  # fmt: skip
    assert seen == []


def test_a_server_that_does_not_answer_is_unavailable() -> None:
    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    with client_for(refused) as memory, pytest.raises(Unavailable) as down:
        memory.record("We bill in cents.", **SCOPE)
    assert down.value.retry_after_s is None
    with client_for(slow) as memory, pytest.raises(TimeoutError):
        memory.record("We bill in cents.", **SCOPE)


def test_the_request_carries_the_key_the_body_and_the_idempotency_key() -> None:
    seen: list[httpx.Request] = []
    answer = {"memory_id": "0b8f9d39-6f3c-4b43-9f0a-1d2a3c4b5d6e", "status": "accepted",
              "reason": "queued"}  # fmt: skip
    with client_for(lambda _: httpx.Response(202, json=answer), seen) as memory:
        receipt = memory.record("We bill in cents.", idempotency_key="k-1", type="decision",
                                **SCOPE)  # fmt: skip
        memory.complete_task("acme", "team/billing+v2")
    assert (receipt.status, str(receipt.memory_id)) == ("accepted", answer["memory_id"])
    sent = seen[0]
    assert sent.headers["authorization"] == "Bearer mh_key"
    assert sent.headers["idempotency-key"] == "k-1"
    body = json.loads(sent.content)
    assert body["content"] == "We bill in cents." and body["type"] == "decision"
    assert seen[1].url.raw_path == b"/v1/tasks/team/billing%2Bv2/complete"


def test_the_export_counts_come_from_its_end_line() -> None:
    lines = [{"kind": "header"}, {"kind": "memory"}, {"kind": "end", "counts": {"memory": 1}}]
    text = "".join(json.dumps(line) + "\n" for line in lines)
    with client_for(lambda _: httpx.Response(200, text=text)) as memory:
        out = io.StringIO()
        assert memory.export("acme", out).memory == 1
    assert out.getvalue() == text
    cut = "".join(json.dumps(line) + "\n" for line in lines[:2])
    with (
        client_for(lambda _: httpx.Response(200, text=cut)) as memory,
        pytest.raises(Unavailable, match="end line"),
    ):
        memory.export("acme", io.StringIO())
    tail = LastLine()
    for chunk in ('{"a":1}\n{"kind":', '"end"}\n'):
        tail.feed(chunk)
    assert (tail.lines, tail.last) == (2, '{"kind":"end"}')


def test_the_async_client_maps_the_same_way() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return refusal(422, "invalid_input", "metadata", "must be an object")

    async def run() -> InvalidInput:
        transport = httpx.MockTransport(handler)
        async with AsyncRemoteMemoryClient("http://memory.test", "mh_key",
                                           transport=transport) as memory:  # fmt: skip
            with pytest.raises(InvalidInput) as raised:
                await memory.record("x", metadata=[1], **SCOPE)  # type: ignore[arg-type]
            return raised.value

    assert asyncio.run(run()).field == "metadata"
