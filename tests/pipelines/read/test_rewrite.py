"""Query rewriting into literal, intent and associative variants."""

from __future__ import annotations

from collections.abc import Sequence

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
