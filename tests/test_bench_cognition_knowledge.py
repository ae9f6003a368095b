"""``memharness.bench.cognition_knowledge``: the labeled histories hold together, and the
section scores what the consolidation plan would write."""

from __future__ import annotations

import json
from pathlib import Path

from memharness.bench.cognition_knowledge import Produced, load_histories, run, score
from pipelines.cognition.knowledge import KnowledgeKind
from workers.adapters.llm_offline import OfflineLLM

DATA_DIR = Path(__file__).resolve().parent / "data" / "cognition"
# The kinds the set is labeled with: a test of its own, so that a kind dropped from the
# product fails here rather than silently scoring zero.
KINDS = {"preference", "pattern", "mistake", "convention", "owner", "stack"}


def _rows() -> list[dict[str, object]]:
    lines = (DATA_DIR / "knowledge.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_the_knowledge_set_is_well_formed() -> None:
    rows = _rows()
    ids = [row["id"] for row in rows]
    assert len(ids) == len(set(ids))
    for lang in ("en", "zh"):
        chosen = [row for row in rows if row["lang"] == lang]
        assert len(chosen) >= 20, lang
        kinds = {e["kind"] for row in chosen for e in row["expect"]}  # type: ignore[attr-defined]
        assert kinds == KINDS, lang
        # hard negatives: histories that must yield nothing at all
        assert sum(not row["expect"] for row in chosen) >= 5, lang
    assert {kind.value for kind in KnowledgeKind} >= KINDS
    for row in rows:
        turns = row["turns"]
        assert isinstance(turns, list) and 5 <= len(turns) <= 15, row["id"]
        turn_ids = [t["id"] for t in turns]
        assert len(turn_ids) == len(set(turn_ids)), row["id"]
        for turn in turns:
            assert set(turn) == {"id", "speaker", "user_id", "task_id", "day", "content"}
            assert isinstance(turn["day"], int) and turn["day"] >= 0, turn["id"]
            assert turn["content"].strip(), turn["id"]
        for expected in row["expect"]:  # type: ignore[attr-defined]
            assert set(expected) == {"kind", "must_contain"}, row["id"]
            assert expected["must_contain"] and all(w.strip() for w in expected["must_contain"])
        assert set(row["must_not"]) <= set(turn_ids), row["id"]  # type: ignore[arg-type]


def test_the_offline_run_scores_every_history_and_the_figures_add_up() -> None:
    result = run(OfflineLLM(), DATA_DIR)

    rows = _rows()
    assert result["histories"] == result["scored"] == len(rows)
    assert result["errors"] == []
    for lang in ("en", "zh", "all"):
        figures = result["by_lang"][lang]
        assert figures["expected"] == sum(
            len(row["expect"])
            for row in rows
            if lang in ("all", row["lang"])  # type: ignore[arg-type]
        )
        assert figures["wrong"] == figures["produced"] - figures["correct"]
        assert figures["matched"] == figures["correct"]
        assert sum(k["produced"] for k in figures["per_kind"].values()) == figures["produced"]
    assert len(result["wrong"]) == result["by_lang"]["all"]["wrong"]
    assert set(result["headline"]) == {
        f"{name}_{lang}"
        for name in ("precision", "recall", "duplicates", "must_not_leaked")
        for lang in ("en", "zh")
    }


def test_a_second_row_for_one_expected_item_is_a_duplicate(tmp_path: Path) -> None:
    # given one history with one expected convention and one chatter turn
    history = {
        "id": "en-x",
        "lang": "en",
        "turns": [
            {
                "id": "a",
                "speaker": "Lee",
                "user_id": "u",
                "task_id": "t",
                "day": 0,
                "content": "Branch names start with the ticket number.",
            },
            {
                "id": "b",
                "speaker": "Zoe",
                "user_id": "v",
                "task_id": "t",
                "day": 0,
                "content": "ok",
            },
        ],
        "expect": [{"kind": "convention", "must_contain": ["branch", "ticket"]}],
        "must_not": ["b"],
    }
    (tmp_path / "knowledge.jsonl").write_text(json.dumps(history) + "\n", encoding="utf-8")
    histories = load_histories(tmp_path)

    # when consolidation wrote the convention twice, a mistake of the same words, and the
    # chatter turn
    rows = [
        Produced("convention", "Lee: Branch names start with the ticket number.", "create", ("a",)),
        Produced("convention", "Every branch begins with its ticket.", "create", ("a",)),
        Produced("mistake", "Branch names start with the ticket number.", "create", ("a",)),
        Produced("convention", "ok", "create", ("b",)),
    ]
    result = score(histories, {"en-x": rows})

    # then one row is right, the restatement a duplicate, the mistake of the wrong kind, and
    # the chatter turn leaked
    figures = result["by_lang"]["en"]
    assert (figures["correct"], figures["duplicates"], figures["wrong"]) == (1, 1, 3)
    assert figures["precision"] == 0.25 and figures["recall"] == 1.0
    assert [w["why"] for w in result["wrong"]] == ["duplicate", "wrong kind", "unexpected"]
    assert [item["turn"] for item in result["must_not_leaked"]] == ["b"]
    assert figures["per_kind"]["mistake"]["precision"] == 0.0
