"""The token ledger in the real PostgreSQL: one row per tenant, call, model and day, running
totals beside it, read back by ``memharness stats`` and exported by the metrics scrape as
``memharness_llm_tokens_total{kind,tenant,call}``."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from config import Settings
from memharness.stats import collect_stats, format_stats
from tests.workers.test_metrics import exposed
from workers.db import open_pool
from workers.health.endpoint import registry_for
from workers.ledger import LLMCall, PostgresLedger, Prices, TokenUsage, read_totals, read_usage


@pytest.fixture
def pool(db, settings: Settings) -> Iterator[ConnectionPool]:  # type: ignore[no-untyped-def]
    opened = open_pool(settings, name="ledger-test")
    yield opened
    opened.close()


def usage(prompt: int, completion: int, cached: int = 0, reasoning: int = 0) -> TokenUsage:
    return TokenUsage(prompt=prompt, completion=completion, cached=cached, reasoning=reasoning)


def test_calls_add_up_per_tenant_call_and_day_and_survive_a_new_process(
    pool: ConnectionPool, db, settings: Settings
) -> None:  # type: ignore[no-untyped-def]
    # given two calls of acme's judge and one summary of globex, recorded by one process
    ledger = PostgresLedger(lambda: pool)
    ledger.record("acme", LLMCall.JUDGE, "deepseek-chat", usage(100, 20, cached=60))
    ledger.record("acme", LLMCall.JUDGE, "deepseek-chat", usage(110, 25, cached=60))
    ledger.record("globex", LLMCall.SUMMARY, "deepseek-chat", usage(300, 80))

    # when another process (a restarted worker, its own pool) records one more call
    with ConnectionPool(settings.database_url, kwargs={"autocommit": True}, open=True) as other:
        PostgresLedger(lambda: other).record(
            "acme", LLMCall.JUDGE, "deepseek-reasoner", usage(90, 40, reasoning=30)
        )

    # then the day has one row per tenant, call and model, and the sums count every call
    rows = db.execute(
        "SELECT tenant_id, call, model, day = (now() AT TIME ZONE 'UTC')::date, calls, "
        "prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens "
        "FROM llm_usage_daily ORDER BY 1, 2, 3"
    ).fetchall()
    assert rows == [
        ("acme", "judge", "deepseek-chat", True, 2, 210, 45, 120, 0),
        ("acme", "judge", "deepseek-reasoner", True, 1, 90, 40, 0, 30),
        ("globex", "summary", "deepseek-chat", True, 1, 300, 80, 0, 0),
    ]
    # and the totals, and both readers, agree with the days (models summed)
    expected = {
        ("acme", "judge"): TokenUsage(calls=3, prompt=300, completion=85, cached=120, reasoning=30),
        ("globex", "summary"): TokenUsage(calls=1, prompt=300, completion=80),
    }
    assert {(r.tenant_id, r.call): r.usage for r in read_totals(db)} == expected
    assert {(r.tenant_id, r.call): r.usage for r in read_usage(db)} == expected
    assert [r.call for r in read_usage(db, "globex")] == ["summary"]


def test_a_ledger_that_cannot_reach_postgres_logs_and_never_fails_the_call(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken() -> ConnectionPool:
        raise psycopg.OperationalError("connection refused")

    with caplog.at_level(logging.WARNING, logger="workers.ledger"):
        PostgresLedger(broken).record("acme", LLMCall.RERANK, "m", usage(10, 2))
    assert "LLM usage not recorded (acme/rerank, 10 prompt + 2 completion tokens)" in caplog.text


def test_the_scrape_exports_the_ledger_as_counters(
    pool: ConnectionPool, db, redis_client, settings: Settings
) -> None:  # type: ignore[no-untyped-def]
    # given calls recorded by some process
    ledger = PostgresLedger(lambda: pool)
    ledger.record("acme", LLMCall.JUDGE, "deepseek-chat", usage(100, 20, cached=60))
    ledger.record("acme", LLMCall.JUDGE, "deepseek-chat", usage(100, 20, cached=60))
    ledger.record("globex", LLMCall.KNOWLEDGE, "deepseek-chat", usage(500, 90, reasoning=10))

    # when a metrics endpoint of any process is scraped (none of them made the calls)
    registry, collector = registry_for(settings, multiproc_dir=None, ping_workers=False)
    try:
        names = exposed(registry)
    finally:
        collector.close()

    # then the token counter has one series per kind, tenant and call
    tokens = {
        (s.labels["kind"], s.labels["tenant"], s.labels["call"]): s.value
        for s in names["memharness_llm_tokens_total"]
        if s.name.endswith("_total")
    }
    assert tokens == {
        ("prompt", "acme", "judge"): 200.0,
        ("completion", "acme", "judge"): 40.0,
        ("cached", "acme", "judge"): 120.0,
        ("reasoning", "acme", "judge"): 0.0,
        ("prompt", "globex", "knowledge"): 500.0,
        ("completion", "globex", "knowledge"): 90.0,
        ("cached", "globex", "knowledge"): 0.0,
        ("reasoning", "globex", "knowledge"): 10.0,
    }
    calls = {
        (s.labels["tenant"], s.labels["call"]): s.value
        for s in names["memharness_llm_calls_total"]
        if s.name.endswith("_total")
    }
    assert calls == {("acme", "judge"): 2.0, ("globex", "knowledge"): 1.0}


def test_stats_show_each_tenants_calls_tokens_and_cost(
    pool: ConnectionPool, db, redis_client, settings: Settings
) -> None:  # type: ignore[no-untyped-def]
    ledger = PostgresLedger(lambda: pool)
    ledger.record("acme", LLMCall.JUDGE, "deepseek-chat", usage(1_000, 100, cached=800))
    ledger.record("acme", LLMCall.SUMMARY, "deepseek-chat", usage(2_000, 300))
    ledger.record("globex", LLMCall.RERANK, "deepseek-chat", usage(4_000, 50))

    stats = collect_stats(settings)
    prices = Prices.of(settings)
    acme = stats["llm"]["tenants"]["acme"]
    assert acme["calls"]["judge"] == {
        "calls": 1, "prompt": 1_000, "completion": 100, "cached": 800, "reasoning": 0,
        "cost_usd": round(prices.cost_usd(usage(1_000, 100, cached=800)), 6),
    }  # fmt: skip
    assert acme["total"]["calls"] == 2 and acme["total"]["prompt"] == 3_000
    assert acme["total"]["cost_usd"] == pytest.approx(
        (2_200 * 0.27 + 800 * 0.07 + 400 * 1.10) / 1_000_000, abs=1e-6
    )
    assert set(stats["llm"]["tenants"]) == {"acme", "globex"}
    assert set(collect_stats(settings, "globex")["llm"]["tenants"]) == {"globex"}
    assert collect_stats(settings, days=1)["llm"]["tenants"].keys() == {"acme", "globex"}

    text = format_stats(stats)
    assert "LLM tokens (estimated at USD 0.27/0.07/1.1 per million input/cached/output)" in text
    assert "  tenant acme" in text and "  tenant globex" in text
    judge = next(line for line in text.splitlines() if line.strip().startswith("judge"))
    assert judge.split() == ["judge", "1", "1000", "800", "100", "0", "0.0002"]


def test_stats_without_model_calls_say_so(db, redis_client, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    stats = collect_stats(settings)
    assert stats["llm"]["tenants"] == {}
    assert "no model calls recorded (the offline rules spend no tokens)" in format_stats(stats)
