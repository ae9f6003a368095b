"""Statements of fact against chatter, over the hand-labeled write-filter set in both
languages: ``carries_fact``, the whole offline write decision (tier 1, then tiers 2 and 3 as
the write workers take them) and the importance each kept turn gets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.records import MemoryType
from pipelines.write.decide import (
    CHATTER_IMPORTANCE_CAP,
    FACT_IMPORTANCE_FLOOR,
    decide_write,
    estimate_importance,
    offline_judge,
)
from pipelines.write.facts import carries_fact
from pipelines.write.filter import tier1_filter
from workers.adapters.llm_offline import OfflineLLM

DATA = Path(__file__).resolve().parents[2] / "data" / "cognition" / "write_filter.jsonl"
TURNS = [json.loads(line) for line in DATA.read_text("utf-8").splitlines() if line.strip()]
LANGUAGES = ("en", "zh")


def of(lang: str, label: str) -> list[dict[str, str]]:
    return [turn for turn in TURNS if turn["lang"] == lang and turn["label"] == label]


def test_the_set_is_large_enough_and_well_formed() -> None:
    # at least 60 of each label per language, ids unique, no exact repeat in a language
    assert len({turn["id"] for turn in TURNS}) == len(TURNS)
    for lang in LANGUAGES:
        for label in ("keep", "drop"):
            assert len(of(lang, label)) >= 60, (lang, label)
        contents = [turn["content"] for turn in TURNS if turn["lang"] == lang]
        assert len(set(contents)) == len(contents)
    assert {turn["category"] for turn in TURNS} >= {
        "ack", "small_talk", "noise", "personal_fact", "setting", "choice", "plan", "event",
        "number", "constraint", "long",
    }  # fmt: skip


@pytest.mark.parametrize("lang", LANGUAGES)
def test_the_whole_offline_decision_keeps_every_fact_and_drops_every_chatter(lang: str) -> None:
    # given every labeled turn of one language
    llm = OfflineLLM()

    # when each goes through tier 1 and then, as in the write workers, tiers 2 and 3
    def kept(content: str) -> bool:
        return tier1_filter(content).keep and decide_write(content, None, llm).keep

    facts_dropped = [t["id"] for t in of(lang, "keep") if not kept(t["content"])]
    drops_kept = [t["id"] for t in of(lang, "drop") if kept(t["content"])]

    # then no statement of fact is discarded and every acknowledgement, chatter and noise is
    assert facts_dropped == []
    assert drops_kept == []


@pytest.mark.parametrize("lang", LANGUAGES)
def test_carries_fact_agrees_with_every_label(lang: str) -> None:
    turns = [t for t in TURNS if t["lang"] == lang]
    wrong = [t["id"] for t in turns if carries_fact(t["content"]) != (t["label"] == "keep")]
    assert wrong == []


@pytest.mark.parametrize("lang", LANGUAGES)
def test_every_kept_fact_scores_above_the_eviction_line_and_chatter_stays_low(lang: str) -> None:
    # given the offline judge's importance for every turn, as it would be stored
    for turn in of(lang, "keep"):
        outcome = decide_write(turn["content"], None, OfflineLLM())
        # then a fact is never a candidate for eviction by importance
        assert outcome.importance >= FACT_IMPORTANCE_FLOOR, turn
    for turn in of(lang, "drop"):
        judgement = offline_judge(turn["content"], None)
        assert judgement.importance <= CHATTER_IMPORTANCE_CAP, turn


def test_the_personal_fact_the_decay_sweep_evicted_now_scores_above_the_line() -> None:
    # given a personal fact stated as an observation (base 0.4)
    bowl = (
        "Caroline: This is my hand-painted bowl. A friend made it for my 18th birthday ten "
        "years ago, and I still use it every morning."
    )
    verdict = offline_judge(bowl, None)
    assert verdict.keep
    assert verdict.importance >= FACT_IMPORTANCE_FLOOR


@pytest.mark.parametrize(
    ("content", "fact"),
    [
        # a name said to someone is chatter; a name stated, placed or acting is not
        ("Thanks, Melanie!", False),
        ("Bye Nate!", False),
        # an acknowledgement to someone too; "okay" or "sure" before a name may be an answer
        ("Gotcha, Jon!", False),
        ("Noted, Priya.", False),
        ("Okay, Monday.", True),
        ("Sure, Postgres.", True),
        ("I'm Priya.", True),
        ("What do you love about Seattle?", True),
        ("Aww so cute! Toby looks happy!", True),
        ("谢谢张工！", False),
        ("小李早", False),
        ("张工。", True),
        ("我是小李", True),
        # a number is never chatter, except the slang 666
        ("ok, port 5433", True),
        ("666", False),
        ("哈哈，666", False),
        # a question that is not small talk asks about something
        ("Is the deploy done?", True),
        ("认证模块的JWT迁移有什么约束？", True),
        ("How are you doing?", False),
        ("最近好吗？", False),
    ],
)
def test_carries_fact_on_the_edges(content: str, fact: bool) -> None:
    assert carries_fact(content) is fact


def test_importance_of_a_chatter_line_typed_by_the_caller_stays_under_the_line() -> None:
    assert estimate_importance("thanks, talk soon!", MemoryType.DECISION) <= CHATTER_IMPORTANCE_CAP
