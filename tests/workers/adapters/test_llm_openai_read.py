"""The read path's LLM calls (focus, rewrite, rerank) over real HTTP, against the local stub.

The real ``openai`` client talks to ``tests.support.openai_stub``, which answers these prompts
with the offline adapter's rules; scripted faults check how each call surfaces through the
port and what the pipeline does with it (one retry on a malformed answer, then the rules).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from config import Settings
from pipelines.errors import MalformedLLMOutput, TransientLLMError
from pipelines.ports import LLM
from pipelines.read.focus import InfoKind, decide_focus, directive_from_kinds, offline_focus
from pipelines.read.rerank import RerankItem
from pipelines.read.rewrite import offline_rewrite, rewrite_query
from pipelines.records import MemoryType, TaskPhase
from tests.support.openai_stub import OpenAIStub, serve_stub
from workers.adapters import build_llm
from workers.adapters.llm_offline import OfflineLLM

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
QUESTION = "Why did we decide to keep invoices in PostgreSQL?"
ITEMS = [
    RerankItem(
        id="a",
        content="We decided to keep invoices in PostgreSQL because the ledger needs transactions.",
        timestamp=NOW - timedelta(hours=3),
        type=MemoryType.DECISION,
    ),
    RerankItem(
        id="b",
        content="The reminder job sends e-mails at 09:00 UTC.",
        timestamp=NOW - timedelta(hours=1),
        type=MemoryType.ACTION,
    ),
    RerankItem(id="c", content="thanks!", timestamp=NOW, type=None),
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
            llm_model_fast="fast-model",
            llm_timeout_s=5.0,
        )
    )


def test_both_adapters_implement_the_read_methods_of_the_port(llm: LLM) -> None:
    for adapter in (llm, OfflineLLM()):
        for method in ("focus_directive", "rewrite_query", "rerank"):
            assert callable(getattr(adapter, method)), (adapter.name, method)
            assert hasattr(LLM, method)


def test_focus_directive_over_http_is_the_models_ranking(llm: LLM, stub: OpenAIStub) -> None:
    directive = llm.focus_directive(QUESTION, TaskPhase.PLANNING, None)

    # the stub answers with the offline rules: the same kinds, renormalised by the adapter
    offline = offline_focus(QUESTION, TaskPhase.PLANNING, None)
    assert [k.kind for k in directive.kinds] == [k.kind for k in offline.kinds]
    assert directive.top is InfoKind.DECISIONS
    assert sum(k.weight for k in directive.kinds) == pytest.approx(1.0)
    assert directive.source == "openai:fast-model"
    assert "PostgreSQL" in directive.terms
    [request] = stub.stats()["requests"]
    assert (request["kind"], request["model"], request["temperature"]) == (
        "focus",
        "fast-model",
        0.0,
    )


def test_rewrite_query_over_http_gives_three_variants(llm: LLM, stub: OpenAIStub) -> None:
    variants = llm.rewrite_query(QUESTION, "planning", ["decisions"])

    expected = offline_rewrite(QUESTION)
    assert (variants.literal, variants.intent) == (expected.literal, expected.intent)
    assert "PostgreSQL" in variants.entities
    assert variants.source == "openai:fast-model"
    assert [r["kind"] for r in stub.stats()["requests"]] == ["rewrite"]


def test_rerank_over_http_scores_each_item_in_order(llm: LLM, stub: OpenAIStub) -> None:
    focus = directive_from_kinds([InfoKind.DECISIONS, InfoKind.FACTS], ["invoices"])

    scores = llm.rerank(QUESTION, ITEMS, phase=TaskPhase.PLANNING, focus=focus)

    assert len(scores) == 3
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert scores[0] > max(scores[1:])  # the decision, for a question about a decision
    assert [r["kind"] for r in stub.stats()["requests"]] == ["rerank"]
    assert llm.rerank(QUESTION, [], phase=None, focus=focus) == []


@pytest.mark.parametrize("call", ["focus", "rewrite", "rerank"])
def test_a_bad_schema_is_malformed_output(llm: LLM, stub: OpenAIStub, call: str) -> None:
    stub.control("bad_schema")
    focus = directive_from_kinds([InfoKind.FACTS], [])
    with pytest.raises(MalformedLLMOutput, match="schema"):
        if call == "focus":
            llm.focus_directive(QUESTION, None, None)
        elif call == "rewrite":
            llm.rewrite_query(QUESTION, None, [])
        else:
            llm.rerank(QUESTION, ITEMS[:2], phase=None, focus=focus)


def test_a_server_error_is_transient(llm: LLM, stub: OpenAIStub) -> None:
    stub.control("http503", times=1)
    with pytest.raises(TransientLLMError):
        llm.focus_directive(QUESTION, None, None)
    # and the next call is answered
    assert llm.focus_directive(QUESTION, None, None).top is InfoKind.DECISIONS


def test_the_pipeline_retries_a_malformed_answer_once_then_uses_the_rules(
    llm: LLM, stub: OpenAIStub
) -> None:
    # given a model that answers one malformed focus, then well
    stub.control("invalid_json", times=1)
    directive = decide_focus(QUESTION, phase=TaskPhase.PLANNING, llm=llm)
    assert directive.source == "openai:fast-model"
    assert stub.count("chat:focus") == 2

    # given a model that keeps answering garbage
    stub.reset()
    stub.control("bad_schema")
    variants = rewrite_query(QUESTION, llm=llm)
    assert variants.source == "offline-fallback"
    assert stub.count("chat:rewrite") == 2
