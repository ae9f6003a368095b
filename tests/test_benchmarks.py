"""Each benchmark runs on small inputs and ends with one JSON object carrying its keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.locomo_synth import write_locomo


def last_json(capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    result: dict[str, object] = json.loads(lines[-1])
    return result


def test_retrieval_quality_reports_every_key(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from memharness.bench.retrieval_quality import run

    assert run(str(write_locomo(tmp_path / "c.json")), "hashing") == 0
    result = last_json(capsys)
    for key in ("recall_at_10_dense", "recall_at_10_full", "ndcg_at_10_full"):
        assert 0.0 <= float(result[key]) <= 1.0, key
    gain = float(result["recall_at_10_full"]) - float(result["recall_at_10_dense"])
    assert float(result["full_minus_dense"]) == pytest.approx(gain, abs=1e-3)
    assert result["questions"] == 5  # category 5 is not queried
    assert float(result["recall_at_10_full"]) >= float(result["recall_at_10_dense"]) - 1e-9


def test_retrieval_quality_refuses_a_missing_file(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from memharness.bench.retrieval_quality import run

    assert run(str(tmp_path / "absent.json"), "hashing") != 0
    assert "error" in last_json(capsys)


def test_retrieval_quality_reads_the_chinese_set_and_reports_dense_and_full(  # type: ignore[no-untyped-def]
    tmp_path: Path, capsys
) -> None:
    from memharness.bench.retrieval_quality import run
    from memharness.bench.zh_project import generate

    # given one generated project of eight meetings
    path = tmp_path / "zh.json"
    path.write_text(json.dumps(generate(projects=1, sessions=8), ensure_ascii=False))

    # when the quality benchmark reads it
    assert run(str(path), "hashing") == 0
    result = last_json(capsys)

    # then every question is asked, every category reported, dense against full
    assert result["questions_skipped_no_evidence"] == 0
    assert set(result["per_category"]) == {"multi_hop", "temporal", "open_domain", "single_hop"}
    assert float(result["recall_at_10_full"]) >= 0.6
    assert float(result["full_minus_dense"]) == pytest.approx(
        float(result["recall_at_10_full"]) - float(result["recall_at_10_dense"]), abs=1e-3
    )


def test_the_benchmark_embedders_are_one_registry(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from memharness.bench.embedders import EMBEDDERS, load_embedder
    from memharness.bench.retrieval_quality import run
    from memharness.cli import build_parser

    # the CLI offers exactly the registry's names
    parsed = build_parser().parse_args(
        ["bench", "retrieval-quality", "--data", "x.json", "--embedder", "minilm"]
    )
    assert parsed.embedder == "minilm" and {"hashing", "minilm"} <= set(EMBEDDERS)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "retrieval-quality", "--data", "x", "--embedder", "x"])
    assert load_embedder("hashing").version.startswith("hashing")
    # and the benchmark refuses a name outside it, listing the names it knows
    assert run(str(write_locomo(tmp_path / "c.json")), "word2vec") == 2
    assert "hashing" in str(last_json(capsys)["error"])


def test_compression_reports_recall_and_ratio(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from memharness.bench.compression import run

    assert run(str(write_locomo(tmp_path / "c.json"))) == 0
    result = last_json(capsys)
    for key in ("fact_recall_l1", "fact_recall_l2", "compression_ratio_l1",
                "compression_ratio_l2", "decision_fidelity", "compress_per_s"):  # fmt: skip
        assert key in result, key
    assert 0.0 <= float(result["fact_recall_l1"]) <= 1.0
    assert float(result["compression_ratio_l1"]) >= 1.0


def test_consolidation_reports_its_rate(capsys) -> None:  # type: ignore[no-untyped-def]
    from memharness.bench.consolidation import run

    assert run(None, memories=400, batch=100) == 0
    result = last_json(capsys)
    assert result["memories"] == 400
    assert float(result["memories_per_s"]) > 0


def test_the_chinese_data_set_is_locomo_shaped_and_every_answer_is_in_its_evidence(
    tmp_path: Path,
) -> None:
    from memharness.bench.compression import conversation_sources, evidence_ids
    from memharness.bench.zh_project import generate, write

    # given the generated set, written twice from the same seed
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    questions = write(first)
    write(second)

    # then it is the same file, and every question's evidence exists and holds its answer
    assert first.read_bytes() == second.read_bytes()
    samples = generate()
    assert questions == sum(len(sample["qa"]) for sample in samples) > 200
    for sample in samples:
        turns = {
            dia_id: memory
            for rows in conversation_sources(sample).values()
            for dia_id, memory in rows
        }
        asked = [qa["question"] for qa in sample["qa"]]
        assert len(asked) == len(set(asked)), sample["sample_id"]  # one answer per question
        for qa in sample["qa"]:
            evidence = [turns[i] for i in evidence_ids(qa["evidence"])]
            assert evidence, qa
            if qa["category"] == 2 and qa["answer"][:1].isdigit():  # when: the session's date
                assert any(m.timestamp.date().isoformat() == qa["answer"] for m in evidence)
            elif qa["category"] == 2:  # what happened on a named day: said on that day
                assert any(
                    qa["answer"] in m.content
                    and f"{m.timestamp.month}月{m.timestamp.day}日" in qa["question"]
                    for m in evidence
                ), qa
            else:
                assert any(qa["answer"] in m.content for m in evidence), qa
    assert {qa["category"] for sample in samples for qa in sample["qa"]} == {1, 2, 3, 4}


def test_the_chinese_runs_of_compression_and_consolidation(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from memharness.bench.compression import run as compression
    from memharness.bench.consolidation import run as consolidation
    from memharness.bench.zh_project import write

    path = tmp_path / "zh.json"
    write(path)
    assert compression(str(path), limit=1, lang="zh") == 0
    result = last_json(capsys)
    assert result["lang"] == "zh" and float(result["fact_recall_l1"]) > 0.5
    assert consolidation(None, memories=400, batch=100, lang="zh") == 0
    result = last_json(capsys)
    assert result["source"] == "generated-zh" and result["created"] > 0


@pytest.mark.integration
def test_checkpoint_reports_its_percentiles(db, settings, capsys) -> None:  # type: ignore[no-untyped-def]
    from memharness.bench.checkpoint import run

    assert run(settings, iterations=20, warmup=5) == 0
    result = last_json(capsys)
    for key in ("save_p50_ms", "save_p99_ms", "restore_p50_ms", "restore_p99_ms"):
        assert float(result[key]) > 0, key
    assert db.execute("SELECT count(*) FROM checkpoints").fetchone()[0] == 0


@pytest.mark.integration
def test_write_path_reports_ratios_against_its_baselines(migrated, settings, capsys) -> None:  # type: ignore[no-untyped-def]
    from memharness.bench.write_path import run

    scratch = settings.model_copy(
        update={"database_url": settings.database_url + "_wp", "redis_url": settings.redis_url}
    )
    assert run(scratch, records=200, noop_tasks=100, producers=2, latency_samples=50) == 0
    result = last_json(capsys)
    for key in ("record_p50_ms", "record_p99_ms", "floor_p50_ms", "record_to_floor_p50",
                "ingest_per_s", "noop_tasks_per_s", "ingest_to_noop"):  # fmt: skip
        assert float(result[key]) > 0, key
    assert result["ingest_records"] == 200


@pytest.mark.integration
def test_api_reports_http_against_in_process(migrated, settings, capsys) -> None:  # type: ignore[no-untyped-def]
    from memharness.bench.api import run

    # a tiny run: the figures are noise here, the keys and the real processes are the point
    run(settings, samples=30, warmup=5, records=80, memories=200, queries=5, redis_db=None)
    result = last_json(capsys)
    for key in ("http_record_p50_ms", "http_record_p99_ms", "inproc_record_p50_ms",
                "http_record_to_inproc_p50", "records_per_s_8", "http_context_p95_ms",
                "inproc_context_p95_ms", "floor_p99_ms", "http_record_to_floor_p99",
                "inproc_records_per_s_8", "http_to_inproc_records_8"):  # fmt: skip
        assert float(result[key]) > 0, key
    assert result["memories"] == 200


def test_code_retrieval_reports_both_paths_and_the_code_side_serves_identifiers(capsys) -> None:  # type: ignore[no-untyped-def]
    from memharness.bench.code_retrieval import run
    from memharness.bench.code_set import CODE_MEMORIES, CODE_QUESTIONS

    assert run("hashing") == 0
    result = last_json(capsys)
    for key in ("code_recall_at_10_text", "code_recall_at_10_code", "code_mrr_code"):
        assert 0.0 <= float(result[key]) <= 1.0, key
    assert result["questions"] == len(CODE_QUESTIONS) == 40
    assert result["memories"] == len(CODE_MEMORIES)
    # the classifier sends exactly the questions that name an identifier to the code side
    assert result["questions_looking_like_code"] == result["questions_identifier"] == 25
    # questions in plain words never reach the code side: both paths rank them the same
    assert result["code_mrr_code_natural"] == result["code_mrr_text_natural"]
    # with a lexical embedder, the code vectors find what the content vectors miss
    assert float(result["code_recall_at_10_dense_code_identifier"]) > float(
        result["code_recall_at_10_dense_text_identifier"]
    )
    assert float(result["code_recall_at_10_code"]) >= float(result["code_recall_at_10_text"])


def test_the_code_set_holds_together() -> None:
    from memharness.bench.code_set import CODE_MEMORIES, CODE_QUESTIONS

    ids = [memory.id for memory in CODE_MEMORIES]
    assert len(ids) == len(set(ids))
    code = {memory.id for memory in CODE_MEMORIES if memory.modality == "code"}
    assert len(code) == 36
    for question in CODE_QUESTIONS:
        assert question.gold and question.gold <= code, question.text
        assert question.style in {"identifier", "natural"}


@pytest.mark.integration
def test_retrieval_latency_reports_in_process_and_end_to_end_keys(
    migrated, settings, capsys
) -> None:  # type: ignore[no-untyped-def]
    from memharness.bench.retrieval_latency import run

    # a tiny run through a real store-owner worker: the figures are noise at this size (no
    # target is set for it), the keys, the phases and the answers are the point
    assert run(settings, points=[1_000], queries=30, warmup=5, redis_db=None) == 0
    result = last_json(capsys)
    for key in ("p50_ms_1k", "p95_ms_1k", "e2e_p50_ms_1k", "e2e_p95_ms_1k",
                "e2e_p95_ms_1k_under_writes", "e2e_p95_ms_1k_during_rebuild"):  # fmt: skip
        assert float(result[key]) > 0, key
    assert result["e2e_failures_during_rebuild"] == 0
    run_ = result["runs"]["1k"]
    assert run_["e2e_calls"] == 30 and run_["e2e_under_writes_calls"] == 30
    assert run_["e2e_during_rebuild_calls"] >= 1
    assert float(run_["e2e_under_writes_records_per_s"]) > 50
    # and where the end-to-end time went, stage by stage, the owner's engine call among them
    stages = result["e2e_stages_ms_1k"]
    assert set(stages) == {"client_encode", "publish", "pickup", "engine", "reply_encode",
                           "reply_wake", "client_decode", "client_rest"}  # fmt: skip
    assert stages["engine"] > 0 and result["read_transport"] == "direct"


@pytest.mark.integration
def test_system_quality_replays_through_real_workers(  # type: ignore[no-untyped-def]
    migrated, settings, redis_client, tmp_path: Path, capsys
) -> None:
    from memharness.bench.system_quality import run

    # given a small LoCoMo-format conversation of two sessions
    data = write_locomo(tmp_path / "c.json")

    # when it is replayed through real workers, a night after each session, and asked
    assert run(settings, data=str(data), quick=True, redis_db=None) == 0
    result = last_json(capsys)

    # then every figure is a recall, beside the pure pipeline's on the same questions
    assert result["questions"] == 5 and result["nights"] == 2  # category 5 is not asked
    for key in ("recall_at_10_recall_strict", "recall_at_10_recall_credit",
                "recall_at_10_context_strict", "recall_at_10_context_credit",
                "in_context_strict", "in_context_credit", "pure_in_context",
                "recall_at_10_recall_raw_only", "recall_at_10_context_raw_only",
                "recall_at_10_pure_full", "recall_at_10_pure_dense"):  # fmt: skip
        assert 0.0 <= float(result[key]) <= 1.0, key
    for name in ("recall", "context", "in_context"):
        prefix = "recall_at_10_" if name != "in_context" else ""
        strict = float(result[f"{prefix}{name}_strict"])
        kept = float(result[f"{prefix}{name}_credit_kept"])
        # checked credit lies between strict recall and the credit every covered turn gets
        assert strict <= kept <= float(result[f"{prefix}{name}_credit"])
    # and every gold turn is accounted for: reachable, folded into a summary, or unreachable
    gold = result["gold_turns"]
    unreachable = result["unreachable_gold"]
    folded = unreachable["reachable_folded_into_summary"].get("count", 0)
    assert 0 <= unreachable["total"] <= gold
    assert unreachable["total"] + unreachable["reachable"] + folded == gold
    assert unreachable["total"] == sum(s["count"] for s in unreachable["by_state"].values())
    # and the context stays within its budget; the offline adapter reports no tokens
    assert 0 < float(result["context_tokens_mean"]) <= result["budget_tokens"]
    assert 0 < float(result["pure_context_tokens_mean"]) <= result["budget_tokens"]
    assert result["llm_tokens_per_1000_turns"] is None and result["llm_tokens_note"]
    # the background's pace: every accepted memory settled, at a positive rate, no model calls
    pace = result["background_pace"]
    assert 0 < pace["memories"] <= result["turns"] and float(pace["memories_per_minute"]) > 0
    assert pace["usage_total"]["calls"] == 0 and len(pace["usage_nights"]) == result["nights"]
    assert set(result["background"]) >= {"corrections_automatic", "conflicts", "semantic",
                                          "summary_levels", "evictions"}  # fmt: skip


def test_cognition_scores_every_labeled_correction_pair_offline(capsys) -> None:  # type: ignore[no-untyped-def]
    from memharness.bench.cognition import DEFAULT_DATA_DIR
    from memharness.cli import build_parser

    # given the labeled pairs
    lines = (DEFAULT_DATA_DIR / "corrections.jsonl").read_text(encoding="utf-8").splitlines()
    labeled = [json.loads(line) for line in lines if line.strip()]

    # when the bench runs its corrections section offline through the CLI
    args = build_parser().parse_args(["bench", "cognition", "--sections", "corrections"])
    assert args.func(args) == 0
    result = last_json(capsys)

    # then every pair was scored by the rules, per language, and the figures add up
    assert result["llm"] == "offline" and set(result["sections"]) == {"corrections"}
    corrections = result["sections"]["corrections"]
    assert set(corrections) == {"offline"}
    offline = corrections["offline"]
    assert offline["pairs"] == offline["scored"] == len(labeled)
    rules = offline["rules"]
    for lang in ("en", "zh"):
        figures = rules["by_lang"][lang]
        assert figures["pairs"] == sum(row["lang"] == lang for row in labeled)
        assert figures["superseded"] == (
            figures["correct_supersessions"] + figures["wrong_supersessions"]
        )
        for key in ("precision", "recall"):
            assert figures[key] is None or 0.0 <= figures[key] <= 1.0, (lang, key)
        assert set(figures["conflicts"]) == {"supersede", "keep"}
        assert result["headline"][f"corrections.offline.rules_recall_{lang}"] == figures["recall"]
        # the pairs written before the rules that decide them are scored on their own
        splits = figures["by_split"]
        assert set(splits) == {"dev", "holdout"}
        for split, cell in splits.items():
            assert cell["pairs"] == sum(
                row["lang"] == lang and row.get("split", "dev") == split for row in labeled
            )
        assert splits["holdout"]["pairs"] > 0
    assert rules["by_lang"]["all"]["pairs"] == len(labeled)
    cells = [
        cell for row in rules["per_category"].values() for k, cell in row.items() if k != "label"
    ]
    assert sum(cell["pairs"] for cell in cells) == len(labeled)
    by_id = {row["id"]: row for row in labeled}
    for wrong in rules["wrong_supersessions"]:
        assert by_id[wrong["id"]]["label"] == "keep"
        assert by_id[wrong["id"]]["category"] == wrong["category"]
    assert len(rules["wrong_supersessions"]) == rules["by_lang"]["all"]["wrong_supersessions"]
    # and the offline adapter was asked to confirm each proposal, once
    assert offline["confirmed"]["llm"] == "offline"
    assert offline["confirmed"]["by_lang"]["all"]["pairs"] == len(labeled)
    calls = offline["llm_calls"]
    assert calls["calls_by_method"] == {"confirm_correction": offline["proposed"]}
    assert calls["tokens_in"] == 0 and calls["failed_calls"] == 0


def test_cognition_measures_the_model_beside_the_rules_over_http(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    from config import get_settings
    from memharness.bench.cognition import run
    from tests.support.openai_stub import serve_stub

    with serve_stub() as stub:
        # given the settings of an OpenAI-compatible model (the stub) whose server fails
        for key, value in stub.worker_env().items():
            monkeypatch.setenv(key, value)
        get_settings.cache_clear()
        stub.control("http500")
        try:
            # when the bench runs with --llm openai
            assert run(llm="openai", sections=["corrections"]) == 0
        finally:
            monkeypatch.undo()
            get_settings.cache_clear()
        asked = stub.count("chat")
    result = last_json(capsys)

    # then the rules and the model are both reported, the model's calls counted and timed
    runs = result["sections"]["corrections"]
    assert set(runs) == {"offline", "openai"} and result["models"]["openai"].startswith("openai:")
    model = runs["openai"]
    assert model["rules"] == runs["offline"]["rules"]
    calls = model["llm_calls"]
    assert calls["calls"] == calls["failed_calls"] == asked == model["proposed"] > 0
    assert float(calls["latency_p95_ms"]) >= float(calls["latency_p50_ms"]) > 0
    # from the ledger: an HTTP error has no usage, so the failed calls cost no tokens
    assert calls["answered_calls"] == calls["tokens_in"] == calls["tokens_out"] == 0
    # a model that fails supersedes nothing: every proposal is kept as a conflict
    confirmed = model["confirmed"]["by_lang"]["all"]
    assert confirmed["superseded"] == 0
    assert sum(confirmed["conflicts"].values()) == model["proposed"]


def test_cognition_reads_the_models_tokens_from_the_ledger_per_1000_turns(
    monkeypatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    from config import get_settings
    from memharness.bench.cognition import run
    from tests.support.openai_stub import serve_stub

    with serve_stub() as stub:
        # given a model (the stub, answering) that reports usage as DeepSeek does
        for key, value in stub.worker_env().items():
            monkeypatch.setenv(key, value)
        get_settings.cache_clear()
        try:
            # when the write section runs with --llm openai
            assert run(llm="openai", sections=["write"]) == 0
        finally:
            monkeypatch.undo()
            get_settings.cache_clear()
        requests = [r for r in stub.stats()["requests"] if r["endpoint"] == "chat"]
    result = last_json(capsys)

    # then the model run's tokens are the server's counts (words here), read from the ledger
    model = result["sections"]["write"]["openai"]
    calls = model["llm_calls"]
    prompt_words = sum(len(m["content"].split()) for r in requests for m in r["messages"])
    assert calls["answered_calls"] == calls["calls"] == len(requests) > 0
    assert calls["tokens_in"] == prompt_words
    assert 0 < calls["tokens_in_cached"] < calls["tokens_in"]  # the judge's prompt, cached
    assert calls["tokens_out"] > 0 and calls["tokens_out_reasoning"] == 0
    # and per 1,000 recorded turns of the write set, in the figures and the headline
    turns = sum(lang["turns"] for lang in model["languages"].values())
    rates = calls["per_1000_turns"]
    assert rates["tokens_in"] == round(calls["tokens_in"] * 1000 / turns, 1)
    assert rates["tokens_out"] == round(calls["tokens_out"] * 1000 / turns, 1)
    assert result["headline"]["write.openai.tokens_in_per_1000_turns"] == rates["tokens_in"]
    # and the offline rules spent nothing
    offline = result["sections"]["write"]["offline"]["llm_calls"]
    assert offline["tokens_in"] == offline["tokens_out"] == 0
    assert result["headline"]["write.offline.tokens_in_per_1000_turns"] == 0.0


def test_cognition_reports_an_absent_section_and_refuses_an_unknown_one(capsys) -> None:  # type: ignore[no-untyped-def]
    from memharness.bench.cognition import run, section_module

    assert section_module("corrections") is not None
    assert section_module("no_such_section") is None
    assert run(sections=["telepathy"]) == 2
    assert "telepathy" in str(last_json(capsys)["error"])


def test_the_corrections_set_is_well_formed() -> None:
    from memharness.bench.cognition import DEFAULT_DATA_DIR
    from pipelines.records import MemoryType

    lines = (DEFAULT_DATA_DIR / "corrections.jsonl").read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    ids = [row["id"] for row in rows]
    assert len(ids) == len(set(ids))
    by_lang = {lang: [row for row in rows if row["lang"] == lang] for lang in ("en", "zh")}
    assert {row["lang"] for row in rows} == {"en", "zh"}
    categories = {row["category"] for row in rows}
    # the hard negatives the decision must get right, and the kinds of true correction
    assert {"question", "restatement", "elaboration", "report", "other_speaker", "agreement",
            "different_subject", "negation", "conditional", "chat", "preference_changed",
            "owner_reassigned", "deadline_moved", "technology_replaced",
            "setting_changed"} <= categories  # fmt: skip
    for lang, chosen in by_lang.items():
        assert len(chosen) >= 160, lang
        assert {row["category"] for row in chosen} == categories, lang
        supersede = sum(row["label"] == "supersede" for row in chosen) / len(chosen)
        assert 0.35 <= supersede <= 0.45, (lang, supersede)
    for category in categories:  # one label per category: a category is a kind of decision
        assert len({row["label"] for row in rows if row["category"] == category}) == 1, category
    types = [row[side]["type"] for row in rows for side in ("older", "newer")]
    assert set(types) <= {member.value for member in MemoryType}
    assert "observation" in types
    assert sum(t in {"preference", "decision"} for t in types) / len(types) >= 0.8
    for row in rows:
        assert row["label"] in {"supersede", "keep"}, row["id"]
        assert isinstance(row["days_apart"], int) and row["days_apart"] >= 0, row["id"]
        for side in ("older", "newer"):
            assert set(row[side]) == {"content", "type", "speaker", "user_id"}, row["id"]
            assert row[side]["content"].strip(), row["id"]


def test_system_quality_credits_a_summary_only_for_the_turns_it_still_says() -> None:
    from memharness.bench.system_store import Cover, credit

    # given a summary covering two turns, of which it says only the first
    cover = Cover(
        dia_of={"t1": "D1:1", "t2": "D1:2"},
        covers={"s": frozenset({"D1:1", "D1:2"})},
        level_of={"t1": 0, "t2": 0, "s": 1},
        holds={"s": frozenset({"D1:1"})},
    )
    gold = frozenset({"D1:1", "D1:2"})

    # then the summary alone is no strict hit, full credit for both, checked credit for one
    assert credit(["s"], cover, gold) == (0.0, 1.0, 0.5)
    # and a raw turn counts everywhere
    assert credit(["t2", "s"], cover, gold) == (0.5, 1.0, 1.0)


def test_runs_on_different_redis_databases_get_different_scratch_databases(settings) -> None:  # type: ignore[no-untyped-def]
    # Two benchmarks run side by side on Redis 8 and 9 once dropped each other's database.
    from psycopg.conninfo import conninfo_to_dict

    from memharness.bench.scratch import scratch_settings

    def dbname(redis_db: int | None) -> str:
        url = scratch_settings(
            settings, db_suffix="sysq_bench", qdrant_path=Path("q"), redis_db=redis_db
        ).database_url
        return str(conninfo_to_dict(url)["dbname"])

    assert dbname(8) != dbname(9)
    assert dbname(8).endswith("_sysq_bench_r8")
    assert dbname(None).endswith("_sysq_bench")


def test_a_benchmark_claims_an_empty_redis_database_and_refuses_a_busy_one(settings) -> None:  # type: ignore[no-untyped-def]
    # Two runs on one database consumed each other's tasks; now each takes an empty one.
    import redis

    from memharness.bench.scratch import (
        CLAIM_KEY,
        BusyRedisDatabase,
        claim_redis_db,
        release_redis,
        scratch_settings,
    )

    first = claim_redis_db(settings.redis_url, "auto")
    second = claim_redis_db(settings.redis_url, "auto")
    assert first is not None and second is not None and first != second
    try:
        server = settings.redis_url.rsplit("/", 1)[0]
        assert redis.Redis.from_url(f"{server}/{first}").get(CLAIM_KEY) is not None
        with pytest.raises(BusyRedisDatabase, match=f"Redis database {first} is not empty"):
            claim_redis_db(settings.redis_url, first)
        with pytest.raises(BusyRedisDatabase, match=r"within 0\.\.15"):
            claim_redis_db(settings.redis_url, 99)
        assert claim_redis_db(settings.redis_url, None) is None
    finally:
        for number in (first, second):
            release_redis(
                scratch_settings(settings, db_suffix="x", qdrant_path=Path("q"), redis_db=number)
            )
    assert redis.Redis.from_url(f"{server}/{first}").dbsize() == 0


@pytest.mark.integration
def test_footprint_reports_bytes_per_memory_by_part(migrated, settings, capsys) -> None:  # type: ignore[no-untyped-def]
    from memharness.bench.footprint import run

    assert run(settings, memories=[1_000]) == 0
    result = last_json(capsys)["runs"]["1k"]
    assert result["memories"] == 1_000
    # A memory's row is its content and metadata with indexes: hundreds of bytes, not tens.
    assert 300 < result["pg_memories_table_bytes_per_memory"] < 20_000
    parts = result["index_parts_bytes_per_memory"]
    # Each named vector stores dim float32 per point, whatever the point fills.
    for name in ("content", "context", "code"):
        assert parts[f"vector:{name}"] >= result["dim"] * 4, name
    assert result["index_bytes_per_memory"] == pytest.approx(sum(parts.values()), rel=0.01)
    assert result["rss_mib_store_reopened"] > 0 and result["seed_memories_per_s"] > 0


@pytest.mark.integration
def test_store_legs_times_each_postgresql_leg_of_context(migrated, settings, capsys) -> None:  # type: ignore[no-untyped-def]
    from memharness.bench.store_legs import LEGS, run

    assert run(settings, points=[1_000], queries=10, warmup=2) == 0
    result = last_json(capsys)["runs"]["1000"]
    assert result["queries"] == 10
    for leg in LEGS:
        assert 0 < result[f"{leg}_p50_ms"] <= result[f"{leg}_p95_ms"], leg
    # Every bench question shares words with the synthetic store: the legs find rows, and the
    # fetch reads back every id the sparse leg found (all stored, all in the task).
    assert result["sparse_hits_mean"] > 0 and result["temporal_hits_mean"] > 0
    assert result["fetch_hits_mean"] == result["sparse_hits_mean"]


def test_a_wait_of_the_bench_ends_at_once_when_a_task_fails_for_good(migrated, settings) -> None:  # type: ignore[no-untyped-def]
    import time

    from memharness.bench.system_store import Store, wait_for

    store = Store(settings.database_url)
    try:
        # given a link task dead-lettered while the bench waits (killed at its time limit)
        store.conn.execute(
            "INSERT INTO dead_letters (task_name, task_id, args, reason) VALUES "
            "('cognition.link_memories', 't-1', '{}', 'SoftTimeLimitExceeded: 240 s')"
        )
        began = time.monotonic()
        # then the wait ends with the task and its reason, long before its timeout
        with pytest.raises(RuntimeError, match="link_memories failed for good: SoftTime"):
            wait_for(lambda: False, "session_1 embedded and linked", 60, store=store)
        assert time.monotonic() - began < 5
        # and a wait that times out says what is still pending
        with pytest.raises(TimeoutError, match=r"waiting for x \(0 pending, 0 unembedded"):
            wait_for(lambda: False, "x", 0.2, store=store, detail=lambda: store.unsettled("t"))
    finally:
        store.close()
