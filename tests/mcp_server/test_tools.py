"""The tools' plain parts: the binding, validation errors as InvalidInput, the importance
hint, the audit actor, and the command's refusals before it opens anything."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import BaseModel, Field, ValidationError

from config import Settings
from memharness.mcp_server.cli import _is_loopback, run_mcp
from memharness.mcp_server.tools import (
    Binding,
    MemoryTools,
    _with_importance,
    invalid_from_validation,
    parse_state,
)
from pipelines.errors import InvalidInput
from pipelines.state.models import TaskState

STARTED = datetime(2026, 12, 3, 21, 5, 9, tzinfo=UTC)


def test_a_binding_without_a_session_gets_one_per_run() -> None:
    binding = Binding.of("acme", None, None, STARTED)
    assert binding == Binding("acme", None, "mcp-20261203T210509Z")
    assert Binding.of("acme", "coder", "s-1", STARTED) == Binding("acme", "coder", "s-1")


@pytest.mark.parametrize(
    ("tenant", "agent", "field"),
    [("", None, "tenant_id"), ("has space", None, "tenant_id"), ("acme", "a b", "agent_id")],
)
def test_a_binding_refuses_malformed_ids(tenant: str, agent: str | None, field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        Binding.of(tenant, agent, None, STARTED)
    assert caught.value.field == field


def test_the_audit_actor_names_the_agent_within_its_limit() -> None:
    def actor(agent: str | None) -> str:
        return MemoryTools(None, Binding.of("acme", agent, None, STARTED)).actor  # type: ignore[arg-type]

    assert actor(None) == "mcp"
    assert actor("coder") == "mcp:coder"
    assert len(actor("a" * 128)) == 128


class _Nested(BaseModel):
    items: list[int] = Field(max_length=2)


def test_a_validation_error_becomes_invalid_input_at_its_location() -> None:
    with pytest.raises(ValidationError) as caught:
        _Nested.model_validate({"items": [1, 2, 3]})
    error = invalid_from_validation(caught.value, prefix="body")
    assert (error.field, error.limit) == ("body.items", "2 long at most")


def test_parse_state_takes_the_json_object_and_names_the_bad_field() -> None:
    state = parse_state({"tree": [{"id": "a", "title": "root", "status": "done"}]})
    assert isinstance(state, TaskState) and state.completed_node_ids == ("a",)
    assert parse_state(state) is state
    with pytest.raises(InvalidInput) as caught:
        parse_state({"tree": [{"id": "a", "title": "x", "status": "lost"}]})
    assert caught.value.field == "state.tree[0].status"
    assert "pending" in caught.value.message
    with pytest.raises(InvalidInput) as caught:
        parse_state("not an object")
    assert caught.value.field == "state"


def test_the_importance_hint_joins_the_metadata_or_is_refused() -> None:
    assert _with_importance(None, 0.25) == {"importance": 0.25}
    assert _with_importance({"speaker": "u"}, 1) == {"speaker": "u", "importance": 1.0}
    for bad in (1.5, -0.1, float("nan"), True, "high"):
        with pytest.raises(InvalidInput) as caught:
            _with_importance(None, bad)
        assert caught.value.field == "importance"


def test_the_command_refuses_to_start_without_a_tenant_or_with_a_bad_one(capsys) -> None:  # type: ignore[no-untyped-def]
    assert run_mcp(Settings(mcp_tenant_id="")) == 2
    assert "--tenant" in capsys.readouterr().err
    assert run_mcp(Settings(), tenant_id="bad tenant") == 2
    assert "tenant_id" in capsys.readouterr().err


def test_only_loopback_addresses_count_as_private() -> None:
    assert _is_loopback("127.0.0.1") and _is_loopback("::1") and _is_loopback("localhost")
    assert not _is_loopback("0.0.0.0") and not _is_loopback("10.0.0.5")
    assert not _is_loopback("example.org")
