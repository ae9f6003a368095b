"""The OpenAI-compatible adapter's cognition methods over real HTTP, against the stub server
(which answers with the offline rules): annotate, compress, extract knowledge, propose causal
links; a malformed answer falls back to the offline rules, a 5xx is transient."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from config import Settings
from pipelines.cognition.causal import propose_causal_offline
from pipelines.cognition.compress import compress_group
from pipelines.cognition.knowledge import extract_offline
from pipelines.cognition.protocol import SourceMemory
from pipelines.errors import TransientLLMError
from pipelines.own.contradict import Verdict, confirm, contradicted
from pipelines.ports import LLM
from pipelines.records import EpisodicMemory, Level
from pipelines.text.words import word_count
from tests.support.openai_stub import OpenAIStub, serve_stub
from workers.adapters import build_llm

WHEN = datetime(2026, 11, 3, 9, tzinfo=UTC)
TURNS = [
    "Dana: Ran the integration suite on branch feature/oauth-2: 114 tests passed.",
    "Agent: We decided to use PKCE for the mobile client because the app cannot keep a secret.",
    "Dana: Thanks, that helps!",
    "Dana: I prefer brief answers with the commands first.",
]


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with serve_stub() as running:
        yield running


@pytest.fixture
def llm(stub: OpenAIStub) -> LLM:
    return build_llm(
        Settings(
            llm_provider="openai",
            llm_base_url=stub.url,
            llm_api_key=stub.api_key,
            llm_timeout_s=5.0,
        )
    )


def memories() -> list[EpisodicMemory]:
    return [
        EpisodicMemory(
            id=uuid.uuid5(uuid.NAMESPACE_URL, text),
            tenant_id="acme",
            task_id="auth",
            session_id="s1",
            timestamp=WHEN + timedelta(minutes=i),
            content=text,
        )
        for i, text in enumerate(TURNS)
    ]


def sources() -> list[SourceMemory]:
    return [
        SourceMemory(
            id=m.id,
            tenant_id=m.tenant_id,
            task_id=m.task_id,
            session_id=m.session_id,
            timestamp=m.timestamp,
            content=m.content,
            source_words=word_count(m.content),
        )
        for m in memories()
    ]


def test_compression_through_the_model_matches_the_protocol(llm: LLM, stub: OpenAIStub) -> None:
    # when a group is compressed through the model
    result = compress_group(sources(), Level.L1, llm, version=2)

    # then both stages were answered by the model and agree with the offline rules
    offline = compress_group(sources(), Level.L1, None, version=2)
    assert (result.draft.annotated_by, result.draft.compressed_by) == (llm.name, llm.name)
    assert result.draft.content == offline.draft.content
    assert result.draft.malformed_answers == 0
    assert stub.count("chat:annotate") == 1 and stub.count("chat:compress") == 1


def test_a_malformed_answer_is_retried_once_then_the_offline_rules_answer(
    llm: LLM, stub: OpenAIStub
) -> None:
    # given a model that answers with the wrong schema
    stub.control("bad_schema")

    # when a group is compressed
    result = compress_group(sources(), Level.L1, llm)

    # then each stage asked twice and fell back to the rules, and says so
    assert result.draft.annotated_by == "offline-fallback"
    assert result.draft.compressed_by == "offline-fallback"
    assert result.draft.malformed_answers == 4
    assert result.draft.content == compress_group(sources(), Level.L1, None).draft.content


def test_knowledge_and_causal_edges_through_the_model(llm: LLM) -> None:
    batch = llm.extract_knowledge(memories())
    assert batch == extract_offline(memories())
    assert any(item.kind.value == "preference" for item in batch.items)

    delay, blocked = (
        EpisodicMemory(
            id=uuid.uuid4(),
            tenant_id="acme",
            task_id="auth",
            session_id="s1",
            timestamp=WHEN,
            content=text,
        )
        for text in (
            "Agent: Status: the auth module is delayed to 2027-01-15 because of SEC-12.",
            "Agent: The mobile release is blocked by the auth module delay.",
        )
    )
    edges = llm.propose_causal(blocked, [delay])
    assert edges == propose_causal_offline(blocked, [delay])
    assert [(e.cause_id, e.effect_id) for e in edges.edges] == [(delay.id, blocked.id)]


def test_a_server_error_is_transient(llm: LLM, stub: OpenAIStub) -> None:
    stub.control("http503")
    with pytest.raises(TransientLLMError):
        llm.extract_knowledge(memories())


def _deadline_pair() -> tuple[EpisodicMemory, EpisodicMemory]:
    old, new = (
        EpisodicMemory(
            id=uuid.uuid4(),
            tenant_id="acme",
            task_id="auth",
            session_id="s1",
            timestamp=WHEN + timedelta(days=day),
            type="decision",
            content=text,
        )
        for day, text in (
            (0, "The auth module deadline is May 3."),
            (6, "The auth module deadline is May 10."),
        )
    )
    return old, new


@pytest.mark.parametrize(
    ("mode", "verdict", "said"),
    [
        ("ok", Verdict.SUPERSEDE, "confirmed: stub model: offline rules"),
        ("bad_schema", Verdict.CONFLICT, "not confirmed (malformed answer"),
        ("invalid_json", Verdict.CONFLICT, "not confirmed (malformed answer"),
        ("http503", Verdict.CONFLICT, "not confirmed (TransientLLMError"),
    ],
)
def test_a_correction_is_confirmed_by_the_model_or_both_are_kept(
    llm: LLM, stub: OpenAIStub, mode: str, verdict: Verdict, said: str
) -> None:
    # given the rule's proposal on a moved deadline
    old, new = _deadline_pair()
    proposals = contradicted(new, [old])
    assert [p.verdict for p in proposals] == [Verdict.SUPERSEDE]
    if mode != "ok":
        stub.control(mode)

    # when the model is asked to confirm it
    [answer] = confirm(llm, new, [old], proposals)

    # then it supersedes only on the model's word; without an answer both stay
    assert answer.verdict is verdict
    assert said in answer.reason
    [request, *_] = stub.stats()["requests"]
    assert request["kind"] == "confirm"
