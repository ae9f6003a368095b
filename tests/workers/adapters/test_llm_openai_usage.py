"""What each model call costs and how it is asked, over real HTTP against the local stub.

For every call kind of the port: the usage the stub reports (DeepSeek's cache fields,
OpenAI's, none) reaches the ledger under the tenant the adapter is bound to and the call's
name; two calls about different memories send the same leading message byte for byte (the
prefix a context cache serves) with the memories only after it; and a reasoning model's
answer parses whether the JSON is in ``content`` or only at the end of its thinking, with
nothing of the thinking returned.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from config import Settings
from pipelines.cognition.protocol import (
    AnnotateRequest,
    CompressRequest,
    Segment,
    SegmentAnnotation,
    SegmentKind,
)
from pipelines.own.contradict import CorrectionRequest, CorrectionStatement
from pipelines.read.focus import InfoKind, directive_from_kinds
from pipelines.read.rerank import RerankItem
from pipelines.records import EpisodicMemory, Level, MemoryType, TaskPhase
from pipelines.state.codec import new_checkpoint
from pipelines.state.models import ActionEffect, PendingAction, TaskNode, TaskState
from pipelines.write.decide import WriteJudgement
from tests.support.openai_stub import REASONING_MARK, OpenAIStub, serve_stub
from workers.adapters import build_llm
from workers.adapters.llm_offline import OfflineLLM
from workers.adapters.llm_wire import last_json_object
from workers.ledger import UNATTRIBUTED, BillableLLM, LLMCall, MemoryLedger, Prices, TokenUsage

WHEN = datetime(2026, 12, 7, 9, tzinfo=UTC)
# Two memories' worth of content per call kind: what differs between the two calls.
CONTENTS = (
    "Dana decided to keep invoices in PostgreSQL because the ledger needs transactions.",
    "Bob prefers small pull requests; the auth module is blocked on SEC-12 until Friday.",
)


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with serve_stub() as running:
        yield running


@pytest.fixture
def ledger() -> MemoryLedger:
    return MemoryLedger()


@pytest.fixture
def llm(stub: OpenAIStub, ledger: MemoryLedger) -> BillableLLM:
    settings = Settings(
        llm_provider="openai",
        llm_base_url=stub.url,
        llm_api_key=stub.api_key,
        llm_model_fast="fast-model",
        llm_model_deep="deep-model",
        llm_timeout_s=5.0,
    )
    return build_llm(settings, ledger=ledger)


def memory(text: str, minutes: int = 0) -> EpisodicMemory:
    return EpisodicMemory(
        id=uuid.uuid5(uuid.NAMESPACE_URL, text),
        tenant_id="acme",
        task_id="billing",
        session_id="s1",
        timestamp=WHEN + timedelta(minutes=minutes),
        content=text,
    )


def segment(text: str) -> Segment:
    return Segment(
        index=0, memory_id=uuid.uuid5(uuid.NAMESPACE_URL, text), timestamp=WHEN, text=text
    )


def checkpoint_about(text: str) -> Any:
    state = TaskState(
        phase="execution",
        tree=(TaskNode(id="n1", title=text),),
        current_node_id="n1",
        pending_actions=(
            PendingAction(
                action_id="act-1",
                node_id="n1",
                tool="send_mail",
                effect=ActionEffect.EXTERNAL_WRITE,
            ),
        ),
    )
    checkpoint, _ = new_checkpoint("acme", "billing", state, parent_id=None, created_at=WHEN)
    return checkpoint


def statement(text: str, days: int) -> CorrectionStatement:
    day = (WHEN + timedelta(days=days)).date().isoformat()
    return CorrectionStatement(content=text, date=day, type="preference")


FIRST = WriteJudgement(
    keep=True, type=MemoryType.DECISION, confidence=0.5, importance=0.5, reason="unsure"
)
FOCUS = directive_from_kinds([InfoKind.DECISIONS], [])

# Every call of the port, made about ``text``: the call kind the ledger names it by.
CALLS: dict[LLMCall, Callable[[BillableLLM, str], object]] = {
    LLMCall.JUDGE: lambda llm, text: llm.judge_write(text, MemoryType.DECISION),
    LLMCall.DEEP_JUDGE: lambda llm, text: llm.deep_judge_write(text, None, FIRST),
    LLMCall.SUMMARY: lambda llm, text: llm.summarize(text, 12),
    LLMCall.CALIBRATE: lambda llm, text: llm.calibrate_resume(checkpoint_about(text), 60.0),
    LLMCall.FOCUS: lambda llm, text: llm.focus_directive(text, TaskPhase.PLANNING, None),
    LLMCall.REWRITE: lambda llm, text: llm.rewrite_query(text, None, []),
    LLMCall.RERANK: lambda llm, text: llm.rerank(
        "why?", [RerankItem(id="a", content=text, timestamp=WHEN, type=None)],
        phase=None, focus=FOCUS,
    ),
    LLMCall.ANNOTATE: lambda llm, text: llm.annotate_segments(
        AnnotateRequest(segments=(segment(text),))
    ),
    LLMCall.COMPRESS: lambda llm, text: llm.compress_segments(
        CompressRequest(
            level=Level.L1, target_words=20, segments=(segment(text),),
            annotations=(
                SegmentAnnotation(index=0, kind=SegmentKind.DECISION_RATIONALE, resolved=text),
            ),
        )
    ),
    LLMCall.KNOWLEDGE: lambda llm, text: llm.extract_knowledge([memory(text)]),
    LLMCall.CAUSAL: lambda llm, text: llm.propose_causal(
        memory(text, 5), [memory("The audit started on Monday.")]
    ),
    LLMCall.CONFIRM: lambda llm, text: llm.confirm_correction(
        CorrectionRequest(older=statement("Dana owns billing.", 0), newer=statement(text, 3))
    ),
}  # fmt: skip


def chat_requests(stub: OpenAIStub) -> list[dict[str, Any]]:
    return [r for r in stub.stats()["requests"] if r["endpoint"] == "chat"]


def test_every_call_kind_of_the_port_is_covered() -> None:
    assert set(CALLS) == set(LLMCall)


@pytest.mark.parametrize("call", list(LLMCall), ids=[c.value for c in LLMCall])
def test_two_calls_about_different_memories_share_their_leading_message(
    call: LLMCall, llm: BillableLLM, stub: OpenAIStub
) -> None:
    # when the same kind of call is made about two different memories
    for text in CONTENTS:
        CALLS[call](llm, text)

    # then the model answered both (the stub knew the prompt), and the system message, the
    # prefix a context cache serves, is the same bytes; the memories come only after it
    first, second = chat_requests(stub)
    assert first["kind"] != "unknown" and first["mode"] == "ok"
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert first["messages"][0] == second["messages"][0]
    assert first["messages"][0]["content"].encode() == second["messages"][0]["content"].encode()
    for request, text in zip((first, second), CONTENTS, strict=True):
        assert text not in request["messages"][0]["content"]
        assert text in request["messages"][-1]["content"]
    assert first["messages"][-1] != second["messages"][-1]


@pytest.mark.parametrize("call", list(LLMCall), ids=[c.value for c in LLMCall])
def test_each_call_is_recorded_under_its_tenant_and_kind_with_deepseek_cache_hits(
    call: LLMCall, llm: BillableLLM, ledger: MemoryLedger, stub: OpenAIStub
) -> None:
    # when a call is made twice for tenant acme (the stub caches the repeated system message)
    acme = llm.billed_to("acme")
    for text in CONTENTS:
        CALLS[call](acme, text)

    # then the ledger has both calls under acme and the call's kind, with the tokens the stub
    # reported: the second prompt's system message came from the cache
    assert set(ledger.rows) == {("acme", call.value, ledger_model(call))}
    recorded = ledger.rows[("acme", call.value, ledger_model(call))]
    first, second = chat_requests(stub)
    system_tokens = len(first["messages"][0]["content"].split())
    prompt_tokens = sum(
        len(m["content"].split()) for request in (first, second) for m in request["messages"]
    )
    assert recorded.calls == 2
    assert recorded.prompt == prompt_tokens
    assert recorded.cached == system_tokens
    assert recorded.completion > 0 and recorded.reasoning == 0


def ledger_model(call: LLMCall) -> str:
    fast = {LLMCall.JUDGE, LLMCall.CALIBRATE, LLMCall.FOCUS, LLMCall.REWRITE, LLMCall.RERANK,
            LLMCall.CAUSAL}  # fmt: skip
    return "fast-model" if call in fast else "deep-model"


def test_openai_cache_fields_and_no_usage_at_all(
    llm: BillableLLM, ledger: MemoryLedger, stub: OpenAIStub
) -> None:
    # given a server reporting usage as OpenAI does
    stub.control(usage_style="openai")
    for text in CONTENTS:
        llm.billed_to("acme").judge_write(text, None)
    openai_style = ledger.rows[("acme", "judge", "fast-model")]
    assert openai_style.calls == 2 and openai_style.cached > 0
    assert openai_style.cached == len(chat_requests(stub)[0]["messages"][0]["content"].split())

    # and a server that reports none: the call is counted, with no tokens, never a guess
    stub.control(usage_style="none")
    llm.billed_to("globex").judge_write(CONTENTS[0], None)
    assert ledger.rows[("globex", "judge", "fast-model")] == TokenUsage(calls=1)


def test_an_unbound_adapter_records_unattributed_and_binding_keeps_the_client(
    llm: BillableLLM, ledger: MemoryLedger
) -> None:
    llm.judge_write(CONTENTS[0], None)
    bound = llm.billed_to("acme")
    bound.judge_write(CONTENTS[1], None)
    assert {key[0] for key in ledger.rows} == {UNATTRIBUTED, "acme"}
    assert bound.name == llm.name
    assert bound._client is llm._client  # type: ignore[attr-defined]


def test_a_malformed_answer_is_recorded_too(
    llm: BillableLLM, ledger: MemoryLedger, stub: OpenAIStub
) -> None:
    # given a model that answers prose: the provider billed it all the same
    stub.control("invalid_json")
    with pytest.raises(Exception, match="invalid JSON"):
        llm.billed_to("acme").judge_write(CONTENTS[0], None)
    assert ledger.rows[("acme", "judge", "fast-model")].calls == 1
    # and an HTTP error has no usage to record
    stub.control("http500", times=1)
    with pytest.raises(Exception, match="HTTP 500"):
        llm.billed_to("acme").judge_write(CONTENTS[0], None)
    assert ledger.rows[("acme", "judge", "fast-model")].calls == 1


@pytest.mark.parametrize("mode", ["reasoning", "reasoning_only"])
@pytest.mark.parametrize("call", list(LLMCall), ids=[c.value for c in LLMCall])
def test_a_reasoning_models_answer_parses_and_its_thinking_is_never_returned(
    call: LLMCall, mode: str, llm: BillableLLM, ledger: MemoryLedger, stub: OpenAIStub
) -> None:
    # given a reasoning model: its thinking beside the JSON, or the JSON only at its end
    stub.control(mode)

    # when the call is made
    answer = CALLS[call](llm.billed_to("acme"), CONTENTS[0])

    # then the answer is the one the stub's rules gave, without a word of the thinking,
    # and the reasoning tokens are in the ledger as a part of the completion
    stub.control("ok")
    plain = CALLS[call](llm, CONTENTS[0])
    assert answer == plain
    assert REASONING_MARK not in dumped(answer)
    [reasoning] = [r for r in chat_requests(stub) if r["mode"] == mode]
    assert reasoning["kind"] != "unknown"
    recorded = ledger.rows[("acme", call.value, ledger_model(call))]
    assert 0 < recorded.reasoning <= recorded.completion


def dumped(answer: object) -> str:
    if hasattr(answer, "model_dump_json"):
        return str(answer.model_dump_json())
    return json.dumps(answer, default=str)


def test_content_empty_and_no_json_in_the_thinking_is_malformed() -> None:
    from pipelines.errors import MalformedLLMOutput
    from workers.adapters.llm_wire import answer_of

    message = type("M", (), {"content": "", "reasoning_content": "I am not sure what to say."})
    with pytest.raises(MalformedLLMOutput, match="reasoning holds no JSON"):
        answer_of(message())


def test_the_last_json_object_of_a_text_is_the_outermost_one_at_its_end() -> None:
    text = 'draft {"keep": false} then {"a": {"b": 1}, "keep": true} done } {'
    assert last_json_object(text) == {"a": {"b": 1}, "keep": True}
    assert last_json_object("no braces at all") is None


def test_the_offline_adapter_is_its_own_tenant_view_and_spends_nothing() -> None:
    offline = OfflineLLM()
    assert offline.billed_to("acme") is offline


def test_the_cost_estimate_bills_cache_hits_at_the_cache_price() -> None:
    prices = Prices(input_per_mtok=0.27, cached_per_mtok=0.07, output_per_mtok=1.10)
    usage = TokenUsage(prompt=1_000_000, cached=400_000, completion=500_000, reasoning=100_000)
    assert prices.cost_usd(usage) == pytest.approx(0.6 * 0.27 + 0.4 * 0.07 + 0.5 * 1.10)
    defaults = Prices.of(Settings())
    assert (defaults.input_per_mtok, defaults.cached_per_mtok, defaults.output_per_mtok) == (
        0.27, 0.07, 1.10,
    )  # fmt: skip
