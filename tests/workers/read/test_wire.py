"""The direct read path's wire format: what the owner accepts and what it refuses."""

from __future__ import annotations

import json

import pytest

from workers.read.wire import DirectRequest, reply_json

REPLY = "memharness:reply:" + "ab" * 16


def test_a_request_round_trips() -> None:
    request = DirectRequest("memory.recall.context", {"tenant_id": "acme"}, REPLY, 12.5)
    assert DirectRequest.from_json(request.to_json()) == request


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ("not json", "not JSON"),
        ([1, 2], "not a JSON object"),
        ({"task": "memory.write.drain", "kwargs": {}, "reply": REPLY, "deadline": 1}, "task:"),
        ({"task": "memory.recall.search", "kwargs": [], "reply": REPLY, "deadline": 1}, "kwargs:"),
        ({"task": "memory.recall.search", "kwargs": {}, "reply": "write", "deadline": 1},
         "reply:"),
        ({"task": "memory.recall.search", "kwargs": {}, "reply": REPLY + "0", "deadline": 1},
         "reply:"),
        ({"task": "memory.recall.search", "kwargs": {}, "reply": REPLY, "deadline": "soon"},
         "deadline:"),
        ({"task": "memory.recall.search", "kwargs": {}, "reply": REPLY, "deadline": True},
         "deadline:"),
    ],
)  # fmt: skip
def test_a_request_of_the_wrong_shape_is_refused_naming_the_field(data: object, field: str) -> None:
    raw = data if isinstance(data, str) else json.dumps(data)
    with pytest.raises(ValueError, match=field):
        DirectRequest.from_json(raw)


def test_the_reply_puts_the_trace_beside_the_encoded_body() -> None:
    reply = json.loads(reply_json({"picked": 1.0}, '{"result":{"hits":[]}}'))
    assert reply == {"trace": {"picked": 1.0}, "result": {"hits": []}}
