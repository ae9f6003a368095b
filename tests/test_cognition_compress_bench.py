"""The hand-labeled compression segments and their benchmark, with the offline adapter."""

from __future__ import annotations

import json
from pathlib import Path

from memharness.bench.cognition_compress import (
    fact_kept,
    load_segments,
    run,
)
from pipelines.cognition.quality import DatedText, TextIndex
from workers.adapters.llm_offline import OfflineLLM

DATA = Path(__file__).parent / "data" / "cognition"


class WordCounter:
    """Whitespace words: a token counter for tests that need no tokenizer file."""

    name = "whitespace"

    def count(self, text: str) -> int:
        return len(text.split())


def test_the_labeled_set_holds_25_segments_per_language_each_fact_in_its_turns() -> None:
    lines = (DATA / "compression.jsonl").read_text(encoding="utf-8").splitlines()
    assert all(set(json.loads(line)) >= {"id", "lang", "category"} for line in lines)
    segments = load_segments(DATA)
    assert len({s.id for s in segments}) == len(segments)
    for lang in ("en", "zh"):
        assert sum(s.lang == lang for s in segments) >= 25
    for segment in segments:
        # every fact is findable in the raw turns: a lost fact is the summary's doing
        index = TextIndex([DatedText(text=t.content) for t in segment.turns])
        assert all(fact_kept(f, index) for f in segment.facts), segment.id


def test_a_fact_is_kept_by_its_words_or_one_of_its_alternatives() -> None:
    index = TextIndex([DatedText(text="Sam: adopted greyhound Pepper, 3 years, 迁 8 万条消息")])
    assert fact_kept("greyhound", index) and fact_kept("three years", index)
    assert fact_kept(["whippet", "Pepper"], index)
    assert fact_kept("8 万", index)
    assert not fact_kept("Florida", index) and not fact_kept(["whippet", "Lisbon"], index)


def test_offline_compression_of_the_labeled_set_is_smaller_and_keeps_the_facts() -> None:
    # when every segment is compressed by the offline adapter through the production gate
    result = run(OfflineLLM(), DATA, counter=WordCounter())

    # then in each language every summary is smaller than its turns, kept at once, and the
    # facts are kept
    assert result["compressor"] == "offline"
    for lang in ("en", "zh"):
        figures = result["languages"][lang]
        assert figures["segments"] >= 25
        assert figures["smaller_than_source"] == figures["segments"]
        assert figures["ratio"] > 1.0 and figures["ratio_words"] > 1.0
        assert figures["fact_recall"] >= 0.9, figures["lost"]
        assert figures["rollbacks"] == 0 and figures["annotate_only"] == 0
