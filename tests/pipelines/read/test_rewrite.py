"""Query rewriting into literal, intent and associative variants."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from pipelines.errors import MalformedLLMOutput
from pipelines.read.rewrite import (
    QueryVariants,
    extract_entities,
    extract_keywords,
    offline_rewrite,
    rewrite_query,
)


def test_entities_are_names_identifiers_and_quotes() -> None:
    assert extract_entities("When did Caroline go to the LGBTQ support group?") == [
        "Caroline",
        "LGBTQ",
    ]
    assert extract_entities("What did Melanie paint in New York?") == ["Melanie", "New York"]
    assert extract_entities("Why did we move config/app.yaml to port 8080?") == [
        "config/app.yaml",
        "8080",
    ]
    assert extract_entities('what is "the rollout plan" for max_retries') == [
        "the rollout plan",
        "max_retries",
    ]


def test_question_words_are_not_names() -> None:
    assert extract_entities("What is the plan? When do we ship? How long?") == []


def test_possessives_end_a_name() -> None:
    assert extract_entities("What is Caroline's identity?") == ["Caroline"]


def test_keywords_drop_grammar_and_keep_order() -> None:
    assert extract_keywords("What did Caroline research about adoption agencies?") == [
        "Caroline",
        "research",
        "adoption",
        "agencies",
    ]


def test_offline_variants_differ_in_the_intended_ways() -> None:
    # given a pseudo-relevance feedback source
    def related(text: str) -> list[str]:
        return ["adopt", "agency", "caroline", "kids"]

    # when a question is rewritten
    variants = offline_rewrite("What did Caroline research about adoption?", related)
    # then literal is the question, intent its content words, associative adds new terms
    assert variants.literal == "What did Caroline research about adoption?"
    assert variants.intent == "Caroline research adoption"
    assert variants.associative.startswith("Caroline research adoption")
    assert "kids" in variants.associative.split()
    assert "caroline" not in variants.associative.split()  # already present, not repeated
    assert variants.entities == ("Caroline",)
    assert variants.source == "offline"


def test_query_of_only_stopwords_keeps_the_literal_everywhere() -> None:
    variants = offline_rewrite("what is it?")
    assert variants.intent == variants.literal == "what is it?"
    assert [name for name, _ in variants.items()] == ["literal"]


def test_items_skip_duplicate_texts() -> None:
    variants = offline_rewrite("Caroline adoption")
    assert [name for name, _ in variants.items()] == ["literal"]


class FakeRewriter:
    def __init__(self, answers: list[QueryVariants | Exception]) -> None:
        self.answers = answers
        self.calls = 0

    @property
    def name(self) -> str:
        return "fake-llm"

    def rewrite_query(self, query: str, phase: str | None, focus: Sequence[str]) -> QueryVariants:
        answer = self.answers[self.calls]
        self.calls += 1
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_llm_variants_are_used_and_tagged() -> None:
    llm = FakeRewriter(
        [QueryVariants(literal="q", intent="adoption research", associative="adopt agency")]
    )
    variants = rewrite_query("What did Caroline research?", llm=llm)
    assert variants.intent == "adoption research"
    assert variants.source == "fake-llm"
    assert variants.entities == ("Caroline",)  # filled from the rules when the LLM omits them


def test_malformed_llm_answer_is_retried_then_rules_decide() -> None:
    llm = FakeRewriter([MalformedLLMOutput("not json"), MalformedLLMOutput("still not")])
    variants = rewrite_query("What did Caroline research?", llm=llm)
    assert llm.calls == 2
    assert variants.source == "offline-fallback"
    assert variants.intent == "Caroline research"


# Chinese: no spaces and no capitals. Each rule above, in Chinese.


def test_chinese_keywords_are_the_phrases_between_function_words() -> None:
    assert extract_keywords("认证模块的JWT迁移有什么约束？") == ["认证模块", "JWT", "迁移", "约束"]
    assert extract_keywords("支付模块的负责人是谁？") == ["支付模块", "负责人"]


@pytest.mark.parametrize(
    ("query", "keywords"),
    [
        ("支付模块为什么延期？", ["支付模块", "延期"]),
        ("哪些模块受影响？", ["模块受影响"]),
        ("怎么部署支付服务？", ["部署支付服务"]),
        ("是否需要回滚？", ["回滚"]),
        ("认证模块什么时候上线？", ["认证模块", "上线"]),
        ("周报用什么样的格式？", ["周报用", "格式"]),
        ("有没有报错？", ["报错"]),
    ],
)
def test_chinese_question_words_are_dropped(query: str, keywords: list[str]) -> None:
    assert extract_keywords(query) == keywords


def test_chinese_keywords_keep_order_and_come_once() -> None:
    assert extract_keywords("支付模块和认证模块，支付模块") == ["支付模块", "认证模块"]


def test_latin_words_touching_chinese_are_keywords_and_entities_of_their_own() -> None:
    assert extract_keywords("JWT迁移和OAuth升级") == ["JWT", "迁移", "OAuth", "升级"]
    # two Latin names either side of a Chinese word are two names, not one
    assert extract_entities("JWT迁移和OAuth升级") == ["JWT", "OAuth"]
    assert extract_entities("工单PAY-12已完成，见 auth/login.py") == ["PAY-12", "auth/login.py"]
    assert extract_entities("本项目统一使用 TypeScript + Node.js + PostgreSQL") == [
        "Node.js",
        "TypeScript",
        "PostgreSQL",
    ]


def test_chinese_quotes_and_brackets_are_entities() -> None:
    assert extract_entities("“JWT 迁移”的方案") == ["JWT 迁移", "JWT"]
    assert extract_entities("「灰度发布」和《设计文档》") == ["灰度发布", "设计文档"]


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("张工负责什么？", ["张工"]),
        ("支付模块负责人是张工", ["张工"]),  # 是 opens the phrase
        ("和李工一起评审", ["李工"]),
        ("找张工确认一下", ["张工"]),  # 找 introduces a person
        ("王经理对周报有什么要求？", ["王经理"]),
        ("老李和小王负责联调", ["老李", "小王"]),
        ("张工程师说过", ["张工程师"]),
        # a title inside a word names nobody
        ("紧张工作了一周", []),
        ("周工作计划", []),
        ("李总结了一下", []),
    ],
)
def test_chinese_people_are_named_with_a_title(text: str, names: list[str]) -> None:
    assert extract_entities(text) == names


def test_chinese_question_words_are_not_entities() -> None:
    assert extract_entities("什么时候上线？为什么延期？谁负责？") == []


def test_offline_variants_of_a_chinese_question() -> None:
    # given a pseudo-relevance feedback source
    def related(text: str) -> list[str]:
        return ["网关", "张工"]

    # when a Chinese question is rewritten
    variants = offline_rewrite("张工负责什么？", related)
    # then intent is its phrases without the question word, the name already in them is not
    # repeated, and associative adds the new terms only
    assert variants.literal == "张工负责什么？"
    assert variants.intent == "张工负责"
    assert variants.associative == "张工负责 网关"
    assert variants.keywords == ("张工负责",)
    assert variants.entities == ("张工",)


def test_chinese_query_of_only_function_words_keeps_the_literal_everywhere() -> None:
    variants = offline_rewrite("这是什么？")
    assert variants.intent == variants.literal == "这是什么？"
    assert [name for name, _ in variants.items()] == ["literal"]


def test_items_skip_duplicate_chinese_texts() -> None:
    variants = offline_rewrite("支付模块 延期")
    assert [name for name, _ in variants.items()] == ["literal"]


def test_malformed_llm_answer_falls_back_to_chinese_rules() -> None:
    llm = FakeRewriter([MalformedLLMOutput("not json"), MalformedLLMOutput("still not")])
    variants = rewrite_query("支付模块为什么延期？", llm=llm)
    assert variants.source == "offline-fallback"
    assert variants.intent == "支付模块 延期"
