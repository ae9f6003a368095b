"""The OpenAI-compatible LLM adapter over real HTTP, against the local stub server.

Nothing is patched: ``OpenAILLM`` builds the real ``openai`` client, which talks HTTP to
``tests.support.openai_stub``; faults are scripted on the stub, and the tests check how each
one surfaces through the port (transient, malformed or permanent) and what
``decide_write`` does with it.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from config import Settings
from pipelines.errors import LLMError, MalformedLLMOutput, TransientLLMError
from pipelines.ports import LLM
from pipelines.records import MemoryType
from pipelines.write.decide import decide_write, offline_judge
from pipelines.write.summary import extractive_summary
from tests.support.openai_stub import OpenAIStub, serve_stub
from workers.adapters import build_llm
from workers.adapters.llm_openai import OpenAILLM

DECISION = "We decided to use PostgreSQL for the outbox because it commits with the memory."
# No cues, no identifiers, a few words: the offline rules give 0.55, inside the uncertain band.
PLAIN = "The office coffee machine was replaced"
LONG = " ".join(
    [
        "We reviewed the billing rewrite today.",
        "The team decided to keep invoices in PostgreSQL because the ledger needs transactions.",
        "Alice prefers small pull requests and asked for one per module.",
        "The migration script lives in scripts/migrate_invoices.py and runs nightly at 02:00.",
        "Status: the payments module is blocked on SEC-12 until the audit finishes.",
        "Bob will write the rollback plan and share it on Friday with the whole group.",
    ]
)

LLMFactory = Callable[..., LLM]


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with serve_stub() as running:
        yield running


@pytest.fixture
def make_llm(stub: OpenAIStub) -> LLMFactory:
    """The adapter as a worker builds it: ``build_llm`` from Settings pointing at the stub."""

    def make(**overrides: Any) -> LLM:
        fields: dict[str, Any] = {
            "llm_provider": "openai",
            "llm_base_url": stub.url,
            "llm_api_key": stub.api_key,
            "llm_model_fast": "fast-model",
            "llm_model_deep": "deep-model",
            "llm_timeout_s": 5.0,
        }
        fields.update(overrides)
        return build_llm(Settings(**fields))

    return make


@pytest.fixture
def llm(make_llm: LLMFactory) -> LLM:
    return make_llm()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# -- normal answers --------------------------------------------------------------------------


def test_build_llm_gives_the_openai_adapter_named_after_the_fast_model(llm: LLM) -> None:
    assert isinstance(llm, OpenAILLM)
    assert llm.name == "openai:fast-model"


def test_judge_write_returns_the_models_judgement(llm: LLM, stub: OpenAIStub) -> None:
    judgement = llm.judge_write(DECISION, None)

    assert judgement.keep is True
    assert judgement.type is MemoryType.DECISION
    assert judgement.confidence == pytest.approx(0.85)
    assert judgement.reason == "stub model: offline rules: decision cues"
    # and the request is the fast model, deterministic, in JSON mode, with the key
    [request] = stub.stats()["requests"]
    assert request["kind"] == "judge"
    assert request["model"] == "fast-model"
    assert request["temperature"] == 0.0
    assert request["response_format"] == {"type": "json_object"}
    assert request["authorization"] == "Bearer test-key"


def test_judge_write_sends_the_agents_type_hint(llm: LLM) -> None:
    # given content the rules alone would call chatter and drop
    assert offline_judge("looks fine to me", None).keep is False

    # when the agent labelled it a preference
    judgement = llm.judge_write("looks fine to me", MemoryType.PREFERENCE)

    # then the model saw the label (the stub decides with it) and kept it
    assert judgement.keep is True
    assert judgement.type is MemoryType.PREFERENCE


def test_deep_judge_write_uses_the_deep_model_and_sees_the_first_verdict(
    llm: LLM, stub: OpenAIStub
) -> None:
    first = llm.judge_write(PLAIN, None)
    assert 0.3 <= first.confidence <= 0.7

    second = llm.deep_judge_write(PLAIN, None, first)

    assert second.keep is True
    assert second.type is first.type
    assert second.reason == "stub model: offline deep rules: states something"
    kinds = [(r["kind"], r["model"]) for r in stub.stats()["requests"]]
    assert kinds == [("judge", "fast-model"), ("deep", "deep-model")]


def test_summarize_returns_the_summary_at_the_summary_temperature(
    llm: LLM, stub: OpenAIStub
) -> None:
    summary = llm.summarize(LONG, 30)

    assert summary == extractive_summary(LONG, 30)
    assert len(summary.split()) <= 30
    [request] = stub.stats()["requests"]
    assert (request["kind"], request["model"]) == ("summary", "deep-model")
    assert request["temperature"] == pytest.approx(0.3)


# -- transient failures: worth retrying ------------------------------------------------------


def test_a_slow_model_times_out_at_the_configured_timeout(
    make_llm: LLMFactory, stub: OpenAIStub
) -> None:
    # given a model that takes 5 s and a client that waits 0.3 s
    stub.control("slow", delay_s=5.0)
    llm = make_llm(llm_timeout_s=0.3)

    # when the adapter asks
    started = time.monotonic()
    with pytest.raises(TransientLLMError, match="timeout"):
        llm.judge_write(DECISION, None)
    elapsed_s = time.monotonic() - started

    # then it gave up at its own timeout, once (no hidden client retries), long before 5 s
    assert elapsed_s < 2.0
    assert stub.count("chat") == 1


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("http500", r"server error \(HTTP 500\)"),
        ("http503", r"server error \(HTTP 503\)"),
        ("http429", r"rate limited \(HTTP 429\)"),
    ],
)
def test_server_errors_and_rate_limits_are_transient(
    llm: LLM, stub: OpenAIStub, mode: str, message: str
) -> None:
    stub.control(mode)

    with pytest.raises(TransientLLMError, match=message):
        llm.judge_write(DECISION, None)
    assert stub.count("chat") == 1


def test_an_unreachable_endpoint_is_transient(make_llm: LLMFactory) -> None:
    llm = make_llm(llm_base_url=f"http://127.0.0.1:{free_port()}/v1", llm_timeout_s=2.0)

    with pytest.raises(TransientLLMError, match="connection failed"):
        llm.judge_write(DECISION, None)


def test_the_fault_ends_after_the_scripted_number_of_calls(llm: LLM, stub: OpenAIStub) -> None:
    stub.control("http429", times=1)

    with pytest.raises(TransientLLMError):
        llm.judge_write(DECISION, None)
    assert llm.judge_write(DECISION, None).keep is True
    assert stub.stats()["counts"] == {
        "chat": 2,
        "chat:judge": 2,
        "mode:http429": 1,
        "mode:ok": 1,
    }


# -- malformed answers -----------------------------------------------------------------------


def test_an_answer_that_is_not_json_is_malformed(llm: LLM, stub: OpenAIStub) -> None:
    stub.control("invalid_json")

    with pytest.raises(MalformedLLMOutput, match="invalid JSON: 'Sure! Here is"):
        llm.judge_write(DECISION, None)


def test_json_that_breaks_the_schema_is_malformed(llm: LLM, stub: OpenAIStub) -> None:
    stub.control("bad_schema")

    with pytest.raises(MalformedLLMOutput, match=r"^schema: keep: "):
        llm.judge_write(DECISION, None)


def test_a_summary_under_the_wrong_key_is_malformed(llm: LLM, stub: OpenAIStub) -> None:
    stub.control("bad_schema")

    with pytest.raises(MalformedLLMOutput, match="schema: summary: missing or empty"):
        llm.summarize(LONG, 30)


def test_every_call_caps_its_answer_at_the_configured_max_tokens(
    make_llm: LLMFactory, stub: OpenAIStub
) -> None:
    make_llm(llm_max_tokens=256).judge_write(DECISION, None)

    [request] = stub.stats()["requests"]
    assert request["max_tokens"] == 256


def test_an_answer_cut_at_max_tokens_is_malformed_and_says_so(
    make_llm: LLMFactory, stub: OpenAIStub
) -> None:
    # given a model whose answer stops at the token limit, half a JSON object
    stub.control("truncated")

    # then the adapter names the cut rather than the JSON error it causes
    with pytest.raises(MalformedLLMOutput, match=r"answer cut at max_tokens \(64\)"):
        make_llm(llm_max_tokens=64).judge_write(DECISION, None)


def test_decide_write_falls_back_to_the_rules_when_every_answer_is_cut(
    llm: LLM, stub: OpenAIStub
) -> None:
    stub.control("truncated")

    [verdict] = decide_write(DECISION, None, llm).verdicts

    assert verdict.source == "offline-fallback"
    assert "answer cut at max_tokens" in verdict.reason


def test_the_schema_goes_beside_json_object_only_when_asked_for(
    make_llm: LLMFactory, stub: OpenAIStub
) -> None:
    # given the default (DeepSeek documents json_object alone) and a llama.cpp setup
    make_llm().judge_write(DECISION, None)
    make_llm(llm_send_schema=True).judge_write(DECISION, None)

    # then only the second request carries the judgement's schema
    plain, constrained = stub.stats()["requests"]
    assert plain["response_format"] == {"type": "json_object"}
    assert constrained["response_format"]["type"] == "json_object"
    schema = constrained["response_format"]["schema"]
    assert set(schema["required"]) == {"keep", "type", "confidence", "reason"}


def test_the_schema_sent_has_no_bound_a_grammar_would_unroll(
    make_llm: LLMFactory, stub: OpenAIStub
) -> None:
    # given the correction answer's reason (maxLength 2,000 kills llama-cpp-python's server)
    from workers.adapters.llm_openai import grammar_safe

    schema = {"properties": {"r": {"type": "string", "maxLength": 2000, "minLength": 1}}}
    assert grammar_safe(schema) == {"properties": {"r": {"type": "string", "minLength": 1}}}
    assert grammar_safe({"maxItems": 64, "items": [{"maxItems": 3}]}) == {
        "items": [{"maxItems": 3}]
    }

    # when the judge asks with its schema, then no maxLength travels
    make_llm(llm_send_schema=True).judge_write(DECISION, None)
    [request] = stub.stats()["requests"]
    assert "maxLength" not in str(request["response_format"]["schema"])


def test_the_rerank_schema_asks_for_one_score_per_memory(
    make_llm: LLMFactory, stub: OpenAIStub
) -> None:
    from datetime import UTC, datetime

    from pipelines.read.focus import decide_focus
    from pipelines.read.rerank import RerankItem

    items = [
        RerankItem(id=str(n), content=f"memory {n}", timestamp=datetime.now(UTC), type=None)
        for n in range(3)
    ]
    make_llm(llm_send_schema=True).rerank("why?", items, phase=None, focus=decide_focus("why?"))

    [request] = stub.stats()["requests"]
    scores = request["response_format"]["schema"]["properties"]["scores"]
    assert (scores["minItems"], scores["maxItems"]) == (3, 3)


# -- permanent failures: retrying cannot help ------------------------------------------------


@pytest.mark.parametrize("status", [400, 401, 403, 404])
def test_a_refused_request_is_a_permanent_error(llm: LLM, stub: OpenAIStub, status: int) -> None:
    stub.control(f"http{status}")

    with pytest.raises(LLMError, match=rf"refused the request \(HTTP {status}\)") as caught:
        llm.judge_write(DECISION, None)
    assert not isinstance(caught.value, TransientLLMError | MalformedLLMOutput)


# -- decide_write through the adapter --------------------------------------------------------


def test_decide_write_falls_back_to_the_offline_rules_after_two_malformed_answers(
    llm: LLM, stub: OpenAIStub
) -> None:
    # given a model that answers prose twice
    stub.control("invalid_json", times=2)

    # when tier 2 asks it
    outcome = decide_write(DECISION, None, llm)

    # then it asked twice, then the offline rules decided, and the record says so
    assert stub.count("chat:judge") == 2
    [verdict] = outcome.verdicts
    assert verdict.source == "offline-fallback"
    assert verdict.reason.startswith("offline rules: decision cues (fallback: openai:fast-model")
    assert "invalid JSON" in verdict.reason
    assert outcome.keep is True
    assert outcome.type is MemoryType.DECISION


def test_decide_write_keeps_the_models_second_answer_after_one_malformed_one(
    llm: LLM, stub: OpenAIStub
) -> None:
    stub.control("bad_schema", times=1)

    outcome = decide_write(DECISION, None, llm)

    [verdict] = outcome.verdicts
    assert verdict.source == "openai:fast-model"
    assert verdict.reason == "stub model: offline rules: decision cues"
    assert stub.count("chat:judge") == 2


def test_decide_write_asks_the_deep_model_when_tier_two_is_unsure(
    llm: LLM, stub: OpenAIStub
) -> None:
    outcome = decide_write(PLAIN, None, llm)

    assert [(v.tier, v.source) for v in outcome.verdicts] == [
        (2, "openai:fast-model"),
        (3, "openai:fast-model"),
    ]
    assert outcome.keep is True
    assert outcome.reason.startswith("stub model: offline deep rules")
    assert (stub.count("chat:judge"), stub.count("chat:deep")) == (1, 1)


def test_decide_write_lets_a_transient_error_through_for_the_job_to_retry(
    llm: LLM, stub: OpenAIStub
) -> None:
    stub.control("http500")

    with pytest.raises(TransientLLMError, match="HTTP 500"):
        decide_write(DECISION, None, llm)
    assert stub.count("chat") == 1
