"""``memharness.bench.cognition_causal.run``: affected_by() over the labeled dependency chains,
through the causal proposer it is given."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from memharness.bench.cognition_causal import load_chains, run
from pipelines.cognition.causal import CausalBatch, parse_causal
from pipelines.records import EpisodicMemory
from workers.adapters.llm_offline import OfflineLLM

DATA_DIR = Path(__file__).resolve().parent / "data" / "cognition"


def test_the_labeled_chains_are_well_formed_in_both_languages() -> None:
    chains = load_chains(DATA_DIR)
    for lang in ("en", "zh"):
        mine = [c for c in chains if c["lang"] == lang]
        assert len(mine) >= 12
        assert sum(c.get("split") == "holdout" for c in mine) >= 4
        # two-hop chains are part of each language's set
        assert sum(len(c["expect"]) >= 2 for c in mine) >= 4


def test_the_offline_rules_reach_every_dependent_and_nothing_else() -> None:
    result = run(OfflineLLM(), DATA_DIR)

    assert result["llm"] == "offline" and result["errors"] == []
    for lang in ("en", "zh"):
        figures = result["languages"][lang]
        assert figures["missed"] == [] and figures["reached_wrongly"] == []
        assert figures["precision"] == figures["recall"] == figures["complete_rate"] == 1.0
        assert figures["holdout"]["recall"] == 1.0
        assert result["headline"][f"recall_{lang}"] == 1.0


class NoCauses:
    """A model that answers valid JSON proposing nothing: the rules are not consulted."""

    name = "no-causes"

    def propose_causal(
        self, memory: EpisodicMemory, candidates: Sequence[EpisodicMemory]
    ) -> CausalBatch:
        return parse_causal(json.dumps({"edges": []}))


def test_a_model_that_proposes_nothing_is_scored_as_it_answers() -> None:
    result = run(NoCauses(), DATA_DIR)
    for lang in ("en", "zh"):
        figures = result["languages"][lang]
        assert figures["recall"] == 0.0 and figures["complete"] == 0
        assert len(figures["missed"]) == figures["chains"]


def test_a_malformed_file_is_refused_with_its_line(tmp_path: Path) -> None:
    (tmp_path / "causal.jsonl").write_text(
        json.dumps({"id": "x", "lang": "en", "turns": [], "query": "q", "expect": ["a"]}) + "\n",
        encoding="utf-8",
    )
    with pytest.raises(ValueError, match=r"causal\.jsonl:1"):
        load_chains(tmp_path)
