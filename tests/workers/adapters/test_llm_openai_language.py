"""The language rule of the OpenAI-compatible adapter: every prompt whose answer holds text
from memories says to answer in the memories' language and to keep identifiers verbatim, and
Chinese memories go through the model (the local stub, which answers with the offline rules)
and come back in Chinese with their identifiers as written."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from config import Settings
from pipelines.cognition.causal import propose_causal_offline
from pipelines.cognition.compress import compress_group
from pipelines.cognition.knowledge import KnowledgeKind, extract_offline
from pipelines.cognition.protocol import SourceMemory
from pipelines.ports import LLM
from pipelines.records import EpisodicMemory, Level
from pipelines.text.words import has_han, word_count
from tests.support.openai_stub import OpenAIStub, serve_stub
from workers.adapters import build_llm
from workers.adapters.llm_openai import (
    ANNOTATE_PROMPT,
    CAUSAL_PROMPT,
    COMPRESS_PROMPT,
    KNOWLEDGE_PROMPT,
    LANGUAGE_RULE,
    REWRITE_PROMPT,
    SUMMARY_PROMPT,
)

WHEN = datetime(2026, 11, 3, 9, tzinfo=UTC)
TURNS_ZH = [
    "王经理：在分支 feature/pay-2 上跑了集成测试：114 个用例通过，"
    "tests/test_gateway.py 里有 2 个不稳定。",
    "助手：我们决定用 Redis 存会话，因为它自带过期机制，不用自己写清理任务。",
    "王经理：收到，谢谢",
    "王经理：周报请用简洁的要点式，先写结论再写细节。",
    "助手：状态：工单 PAY-2 已完成。",
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


def memories(turns: list[str]) -> list[EpisodicMemory]:
    return [
        EpisodicMemory(
            id=uuid.uuid5(uuid.NAMESPACE_URL, text),
            tenant_id="acme-cn",
            task_id="payment-rewrite",
            session_id="s1",
            timestamp=WHEN + timedelta(minutes=i),
            content=text,
        )
        for i, text in enumerate(turns)
    ]


def sources(turns: list[str]) -> list[SourceMemory]:
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
        for m in memories(turns)
    ]


@pytest.mark.parametrize(
    "prompt",
    [SUMMARY_PROMPT, ANNOTATE_PROMPT, COMPRESS_PROMPT, KNOWLEDGE_PROMPT, CAUSAL_PROMPT],
    ids=["summary", "annotate", "compress", "knowledge", "causal"],
)
def test_prompts_that_restate_memories_carry_the_language_rule(prompt: str) -> None:
    assert prompt.endswith(LANGUAGE_RULE)
    assert "language of the memories" in LANGUAGE_RULE
    assert "identifiers verbatim" in LANGUAGE_RULE


def test_the_rewrite_prompt_keeps_the_question_language_and_identifiers() -> None:
    assert "question's language" in REWRITE_PROMPT
    assert "identifier" in REWRITE_PROMPT and "verbatim" in REWRITE_PROMPT


def test_the_summary_budget_travels_with_the_content_after_a_fixed_prompt(
    llm: LLM, stub: OpenAIStub
) -> None:
    # The word budget varies by caller (the window's chunks): in the system message it would
    # break the prefix a context cache serves, so it goes in the user message.
    assert (
        "in at most\nmax_words words" in SUMMARY_PROMPT and '{"summary": "..."}' in SUMMARY_PROMPT
    )
    assert SUMMARY_PROMPT.endswith(LANGUAGE_RULE)
    llm.summarize("Dana decided to ship the billing rewrite on Friday after the audit.", 42)
    [request] = [r for r in stub.stats()["requests"] if r["endpoint"] == "chat"]
    system, user = (m["content"] for m in request["messages"])
    assert system == SUMMARY_PROMPT
    assert json.loads(user)["max_words"] == 42


def test_a_chinese_group_compresses_through_the_model_in_chinese(
    llm: LLM, stub: OpenAIStub
) -> None:
    # when a Chinese session is compressed through the model
    result = compress_group(sources(TURNS_ZH), Level.L1, llm, version=2)

    # then the model answered both stages (the stub knew the prompts carrying the rule),
    # and the summary is the rules' summary: in Chinese, verbatim where the protocol says
    # so, identifiers as written, chatter gone
    assert (result.draft.annotated_by, result.draft.compressed_by) == (llm.name, llm.name)
    assert stub.count("chat:annotate") == 1 and stub.count("chat:compress") == 1
    assert stub.count("chat:unknown") == 0
    offline = compress_group(sources(TURNS_ZH), Level.L1, None, version=2)
    assert result.draft.content == offline.draft.content
    content = result.draft.content
    assert has_han(content)
    assert "我们决定用 Redis 存会话，因为它自带过期机制，不用自己写清理任务。" in content
    assert "状态：工单 PAY-2 已完成。" in content
    for identifier in ("feature/pay-2", "tests/test_gateway.py", "PAY-2", "Redis"):
        assert identifier in content
    assert "收到" not in content


def test_chinese_knowledge_and_causal_edges_through_the_model(llm: LLM) -> None:
    # given the preference in Chinese, and a causal chain in Chinese
    rows = memories(TURNS_ZH)
    delay, postponed = memories(
        [
            "助手：状态：认证模块延期到 2027 年 1 月 15 日，因为安全审计 SEC-12 没有通过。",
            "助手：支付模块的联调因为认证模块延期而推迟，预计晚两周。",
        ]
    )

    # when knowledge and causal edges are asked of the model
    batch = llm.extract_knowledge(rows)
    edges = llm.propose_causal(postponed, [delay])

    # then they are the rules' answers, with the statements as the memories wrote them
    assert batch == extract_offline(rows)
    preferences = [i.statement for i in batch.items if i.kind is KnowledgeKind.PREFERENCE]
    assert preferences == ["周报请用简洁的要点式，先写结论再写细节。"]
    assert edges == propose_causal_offline(postponed, [delay])
    assert [(e.cause_id, e.effect_id) for e in edges.edges] == [(delay.id, postponed.id)]


def test_a_chinese_summary_through_the_model_keeps_its_identifiers(llm: LLM) -> None:
    text = "支付模块负责人是张工。签名密钥每 30 天轮换一次，原因是安全规范 SEC-7 的硬性要求。"
    summary = llm.summarize(text, 60)
    assert has_han(summary)
    assert "SEC-7" in summary and "张工" in summary
