"""Checks of correct/forget calls, and knowledge re-derived when its sources change."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from pipelines.cognition.knowledge import KnowledgeBatch, KnowledgeItem, KnowledgeKind
from pipelines.errors import InvalidInput
from pipelines.own.versions import (
    ForgetTarget,
    KnowledgeAction,
    RetiredKnowledge,
    check_forget_call,
    correction_id,
    rederive,
    replacement_knowledge,
    restated,
)

A, B, C = (uuid.uuid4() for _ in range(3))


def test_a_forget_call_names_exactly_one_target() -> None:
    call = check_forget_call(tenant_id="acme", reason=" user  asked ", actor="dana", task_id="t1")
    assert (call.target, call.target_id, call.reason) == (ForgetTarget.TASK, "t1", "user asked")
    whole = check_forget_call(tenant_id="acme", reason="closed", actor="ops", whole_tenant=True)
    assert (whole.target, whole.target_id) == (ForgetTarget.TENANT, "acme")
    with pytest.raises(InvalidInput, match="target") as none:
        check_forget_call(tenant_id="acme", reason="x", actor="a")
    assert none.value.limit == "one target"
    with pytest.raises(InvalidInput, match="memory_id, task_id"):
        check_forget_call(tenant_id="acme", reason="x", actor="a", memory_id=A, task_id="t")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"reason": ""}, "reason"),
        ({"reason": "x" * 501}, "reason"),
        ({"reason": 3}, "reason"),
        ({"actor": ""}, "actor"),
        ({"memory_id": "nope"}, "memory_id"),
        ({"tenant_id": "bad id"}, "tenant_id"),
        ({"session_id": "a b"}, "session_id"),
    ],
)
def test_bad_forget_calls_name_the_field(kwargs: dict[str, object], field: str) -> None:
    call: dict[str, object] = {"tenant_id": "acme", "reason": "why", "actor": "a"}
    call.update(kwargs)
    if not {"memory_id", "session_id"} & set(kwargs):
        call["task_id"] = "t"
    with pytest.raises(InvalidInput) as error:
        check_forget_call(**call)  # type: ignore[arg-type]
    assert error.value.field == field


def test_a_replayed_correction_gets_the_same_id() -> None:
    assert correction_id(A, b"x") == correction_id(A, b"x")
    assert correction_id(A, b"x") != correction_id(A, b"y") != correction_id(B, b"x")


def test_knowledge_losing_sources_keeps_the_rest_with_recomputed_confidence() -> None:
    plan = rederive((A, B, C), 0.875, {A}, erased=True)
    assert plan.action is KnowledgeAction.KEEP and plan.source_ids == (B, C)
    # three sources of equal weight gave 0.875 = 1 - 0.5**3; two give 1 - 0.5**2
    assert plan.confidence == pytest.approx(0.75, abs=1e-3)


def test_knowledge_losing_every_source_is_retired_or_erased() -> None:
    assert rederive((A,), 0.6, {A}, erased=False).action is KnowledgeAction.RETIRE
    assert rederive((A, B), 0.6, {A, B}, erased=True).action is KnowledgeAction.ERASE


def item(statement: str, kind: KnowledgeKind, *sources: uuid.UUID) -> KnowledgeItem:
    return KnowledgeItem(kind=kind, statement=statement, confidence=0.8, source_ids=list(sources))


def test_a_correction_states_the_knowledge_again_from_its_own_words() -> None:
    retired = RetiredKnowledge(
        id=A,
        tenant_id="acme",
        kind="preference",
        scope="user:dana",
        user_id="dana",
        agent_id=None,
        correcting_ids=(B,),
    )
    batch = KnowledgeBatch(
        items=[
            item("Uses snake_case for files.", KnowledgeKind.CONVENTION, B),
            item("I now prefer spaces for indentation.", KnowledgeKind.PREFERENCE, B),
        ]
    )
    now = datetime(2026, 12, 3, tzinfo=UTC)
    new = replacement_knowledge(retired, batch, now)
    assert new is not None and new.content == "I now prefer spaces for indentation."
    assert new.source_memory_ids == (B,) and new.scope == "user:dana"
    assert new.confidence == pytest.approx(0.64)
    unrelated = KnowledgeBatch(items=[item("Something else.", KnowledgeKind.PREFERENCE, C)])
    assert replacement_knowledge(retired, unrelated, now) is None


def test_knowledge_worded_by_an_erased_memory_is_worded_by_the_sources_left() -> None:
    batch = KnowledgeBatch(
        items=[
            item("I prefer brief answers.", KnowledgeKind.PREFERENCE, B),
            item("Deploys happen on Tuesday.", KnowledgeKind.CONVENTION, B),
        ]
    )
    old = "I prefer brief answers with the commands first (zebracorn)."
    assert restated(old, None, "preference", batch) == "I prefer brief answers."
    assert restated(old, None, "convention", batch) is None
