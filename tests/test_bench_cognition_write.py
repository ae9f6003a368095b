"""``memharness.bench.cognition_write.run``: the write decision over the labeled set, through
the LLM port it is given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memharness.bench.cognition_write import run
from pipelines.errors import TransientLLMError
from pipelines.records import MemoryType
from pipelines.write.decide import WriteJudgement
from workers.adapters.llm_offline import OfflineLLM

DATA_DIR = Path(__file__).resolve().parent / "data" / "cognition"


def test_the_offline_rules_drop_no_fact_and_keep_no_chatter_in_either_language() -> None:
    result = run(OfflineLLM(), DATA_DIR)

    assert result["llm"] == "offline"
    assert result["errors"] == []
    for lang in ("en", "zh"):
        figures = result["languages"][lang]
        assert figures["keep_labeled"] >= 60 and figures["drop_labeled"] >= 60
        assert figures["turns"] == figures["keep_labeled"] + figures["drop_labeled"]
        assert (figures["facts_dropped"], figures["facts_dropped_ids"]) == (0, [])
        assert (figures["drops_kept"], figures["drops_kept_ids"]) == (0, [])
        assert figures["keep_precision"] == figures["keep_recall"] == 1.0
        # every drop is accounted for by the tier that took it
        assert sum(figures["dropped_by_tier"].values()) == figures["drop_labeled"]


class KeepsEverything:
    """A port that keeps whatever passes tier 1, and fails on one turn."""

    name = "keeps-everything"

    def judge_write(self, content: str, type_hint: MemoryType | None) -> WriteJudgement:
        if content == "the model times out here":
            raise TransientLLMError("timed out")
        return WriteJudgement(
            keep=True, type=MemoryType.OBSERVATION, confidence=0.9, reason="keeps all"
        )

    def deep_judge_write(
        self, content: str, type_hint: MemoryType | None, first: WriteJudgement
    ) -> WriteJudgement:
        raise AssertionError("a confident tier 2 never asks tier 3")


def test_figures_count_what_the_given_llm_decided(tmp_path: Path) -> None:
    # given four turns: a fact, an acknowledgement tier 1 drops, chatter the model keeps,
    # and one the model fails on
    turns = [
        ("en-1", "keep", "I'm allergic to peanuts."),
        ("en-2", "drop", "ok"),
        ("en-3", "drop", "haha nice one"),
        ("en-4", "keep", "the model times out here"),
    ]
    lines = [
        json.dumps({"id": i, "lang": "en", "category": "x", "label": label, "content": text})
        for i, label, text in turns
    ]
    (tmp_path / "write_filter.jsonl").write_text("\n".join(lines) + "\n", "utf-8")

    # when the set runs through that model
    result = run(KeepsEverything(), tmp_path)

    # then the figures are the model's, the failed turn is an error, not a figure
    en = result["languages"]["en"]
    assert en["turns"] == 3
    assert (en["keep_precision"], en["keep_recall"]) == (0.5, 1.0)
    assert (en["drops_kept"], en["drops_kept_ids"]) == (1, ["en-3"])
    assert en["dropped_by_tier"] == {"tier1": 1}
    assert result["errors"] == [{"id": "en-4", "error": "TransientLLMError: timed out"}]
    assert result["languages"]["zh"]["turns"] == 0


def test_a_malformed_line_is_refused(tmp_path: Path) -> None:
    (tmp_path / "write_filter.jsonl").write_text('{"id": "x", "lang": "en"}\n', "utf-8")
    with pytest.raises(ValueError, match=r"write_filter\.jsonl:1"):
        run(OfflineLLM(), tmp_path)
