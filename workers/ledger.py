"""The token ledger: what every model call cost, by tenant, call kind and model.

The OpenAI-compatible adapter hands the usage of each answer it got to a :class:`UsageLedger`
(``workers.adapters.llm_openai``); an adapter bound to a tenant (``billed_to``) records under
that tenant. :class:`PostgresLedger` upserts one row per (tenant, call, model, UTC day) and
the running totals in the same statement (migration 0013), so the ledger survives restarts,
is shared by every process, and costs one short statement beside a model call that takes
hundreds of milliseconds. ``memharness stats`` reads the days; the metrics scrape reads the
totals (``memharness_llm_tokens_total{kind,tenant,call}``). :class:`MemoryLedger` is the same
port in a process's memory, for a benchmark that has no database.

The offline adapter spends no tokens and records nothing: a tenant served only by the rules
has no rows. Tokens are what the provider reported: ``cached`` is the part of ``prompt``
served from its context cache, ``reasoning`` the part of ``completion`` spent reasoning.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import date
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

import psycopg

from pipelines.ports import LLM

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

    from config import Settings

log = logging.getLogger(__name__)


class LLMCall(StrEnum):
    """Every call the engine makes of a model: the ``call`` label of the ledger."""

    JUDGE = "judge"  # write decision, tier 2
    DEEP_JUDGE = "deep_judge"  # write decision, tier 3
    SUMMARY = "summary"  # a long memory's summary, the working window's summaries
    CALIBRATE = "calibrate"  # resume calibration of a task checkpoint
    FOCUS = "focus"
    REWRITE = "rewrite"
    RERANK = "rerank"
    ANNOTATE = "annotate"  # compression, stage one
    COMPRESS = "compress"  # compression, stage two
    KNOWLEDGE = "knowledge"
    CAUSAL = "causal"
    CONFIRM = "confirm"  # confirmation of an automatic correction


# The tenant of a call made by an adapter nobody bound to one (a benchmark, a script).
UNATTRIBUTED = "unattributed"
TOKEN_KINDS = ("prompt", "completion", "cached", "reasoning")
# A call's usage waits at most this long for a pool connection: a caller that holds its
# pool's last connection while it asks the model must not stall on its own bookkeeping.
LEDGER_WAIT_S = 2.0


@dataclass(frozen=True)
class TokenUsage:
    """Tokens of ``calls`` model calls (one answer's usage has ``calls=1``)."""

    prompt: int = 0
    completion: int = 0
    cached: int = 0
    reasoning: int = 0
    calls: int = 1

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            prompt=self.prompt + other.prompt,
            completion=self.completion + other.completion,
            cached=self.cached + other.cached,
            reasoning=self.reasoning + other.reasoning,
            calls=self.calls + other.calls,
        )

    def by_kind(self) -> dict[str, int]:
        """The ``kind`` label's values: prompt, completion, cached, reasoning."""
        return {
            "prompt": self.prompt,
            "completion": self.completion,
            "cached": self.cached,
            "reasoning": self.reasoning,
        }


NO_USAGE = TokenUsage(calls=0)


def total(usages: Iterable[TokenUsage]) -> TokenUsage:
    out = NO_USAGE
    for usage in usages:
        out = out + usage
    return out


class UsageLedger(Protocol):
    """Where an adapter records what each answer cost. Never raises: a call the model
    answered is not failed by its bookkeeping."""

    def record(self, tenant_id: str, call: LLMCall, model: str, usage: TokenUsage) -> None: ...


class BillableLLM(LLM, Protocol):
    """The cognitive engine as workers hold it: the port, and a view of it whose calls are
    recorded under a tenant."""

    def billed_to(self, tenant_id: str) -> BillableLLM: ...


# One statement for the day's row and the running totals: both or neither.
UPSERT_SQL = """
WITH day_row AS (
    INSERT INTO llm_usage_daily AS d (tenant_id, call, model, day, calls, prompt_tokens,
        completion_tokens, cached_tokens, reasoning_tokens)
    VALUES (%(tenant)s, %(call)s, %(model)s, (now() AT TIME ZONE 'UTC')::date, %(calls)s,
        %(prompt)s, %(completion)s, %(cached)s, %(reasoning)s)
    ON CONFLICT (tenant_id, call, model, day) DO UPDATE SET
        calls = d.calls + EXCLUDED.calls,
        prompt_tokens = d.prompt_tokens + EXCLUDED.prompt_tokens,
        completion_tokens = d.completion_tokens + EXCLUDED.completion_tokens,
        cached_tokens = d.cached_tokens + EXCLUDED.cached_tokens,
        reasoning_tokens = d.reasoning_tokens + EXCLUDED.reasoning_tokens,
        updated_at = now()
)
INSERT INTO llm_usage_totals AS t (tenant_id, call, model, calls, prompt_tokens,
    completion_tokens, cached_tokens, reasoning_tokens)
VALUES (%(tenant)s, %(call)s, %(model)s, %(calls)s, %(prompt)s, %(completion)s, %(cached)s,
    %(reasoning)s)
ON CONFLICT (tenant_id, call, model) DO UPDATE SET
    calls = t.calls + EXCLUDED.calls,
    prompt_tokens = t.prompt_tokens + EXCLUDED.prompt_tokens,
    completion_tokens = t.completion_tokens + EXCLUDED.completion_tokens,
    cached_tokens = t.cached_tokens + EXCLUDED.cached_tokens,
    reasoning_tokens = t.reasoning_tokens + EXCLUDED.reasoning_tokens,
    updated_at = now()
"""

_SUMS = (
    "sum(calls)::bigint, sum(prompt_tokens)::bigint, sum(completion_tokens)::bigint, "
    "sum(cached_tokens)::bigint, sum(reasoning_tokens)::bigint"
)
# The metrics' series: one row per (tenant, call), models summed.
TOTALS_SQL = f"SELECT tenant_id, call, {_SUMS} FROM llm_usage_totals GROUP BY 1, 2 ORDER BY 1, 2"


class PostgresLedger:
    """The ledger in PostgreSQL; ``pool`` gives the process's pool when the first call is
    recorded (a worker's pool is built on first use)."""

    def __init__(self, pool: Callable[[], ConnectionPool]) -> None:
        self._pool = pool

    def record(self, tenant_id: str, call: LLMCall, model: str, usage: TokenUsage) -> None:
        params = {
            "tenant": tenant_id,
            "call": call.value,
            "model": model,
            **usage.by_kind(),
            "calls": usage.calls,
        }
        try:
            with self._pool().connection(timeout=LEDGER_WAIT_S) as conn:
                conn.execute(UPSERT_SQL, params)
        except psycopg.Error as exc:  # PoolTimeout is an OperationalError
            log.warning(
                "LLM usage not recorded (%s/%s, %s prompt + %s completion tokens): %s",
                tenant_id, call.value, usage.prompt, usage.completion, exc,
            )  # fmt: skip


class MemoryLedger:
    """The ledger in this process's memory (a benchmark's model run)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.rows: dict[tuple[str, str, str], TokenUsage] = {}

    def record(self, tenant_id: str, call: LLMCall, model: str, usage: TokenUsage) -> None:
        key = (tenant_id, call.value, model)
        with self._lock:
            self.rows[key] = self.rows.get(key, NO_USAGE) + usage

    def by_call(self) -> dict[str, TokenUsage]:
        with self._lock:
            out: dict[str, TokenUsage] = {}
            for (_, call, _), usage in self.rows.items():
                out[call] = out.get(call, NO_USAGE) + usage
            return dict(sorted(out.items()))

    def total(self) -> TokenUsage:
        with self._lock:
            return total(self.rows.values())


@dataclass(frozen=True)
class LedgerRow:
    tenant_id: str
    call: str
    usage: TokenUsage


def _rows(raw: Iterable[tuple[Any, ...]]) -> list[LedgerRow]:
    return [
        LedgerRow(
            tenant_id=str(tenant),
            call=str(call),
            usage=TokenUsage(
                calls=int(calls),
                prompt=int(prompt),
                completion=int(completion),
                cached=int(cached),
                reasoning=int(reasoning),
            ),
        )
        for tenant, call, calls, prompt, completion, cached, reasoning in raw
    ]


def read_totals(conn: psycopg.Connection[Any]) -> list[LedgerRow]:
    """Every (tenant, call) series since the ledger began: what the metrics export."""
    return _rows(conn.execute(TOTALS_SQL).fetchall())


def read_usage(
    conn: psycopg.Connection[Any], tenant_id: str | None = None, since: date | None = None
) -> list[LedgerRow]:
    """(tenant, call) sums of the daily rows from ``since`` (a UTC day) on, of one tenant or
    of all."""
    rows = conn.execute(
        f"SELECT tenant_id, call, {_SUMS} FROM llm_usage_daily "
        "WHERE (%(tenant)s::text IS NULL OR tenant_id = %(tenant)s) "
        "AND (%(since)s::date IS NULL OR day >= %(since)s) GROUP BY 1, 2 ORDER BY 1, 2",
        {"tenant": tenant_id, "since": since},
    ).fetchall()
    return _rows(rows)


@dataclass(frozen=True)
class Prices:
    """USD per million tokens, as a provider bills them."""

    input_per_mtok: float
    cached_per_mtok: float
    output_per_mtok: float

    @classmethod
    def of(cls, settings: Settings) -> Prices:
        return cls(
            input_per_mtok=settings.llm_usd_per_mtok_input,
            cached_per_mtok=settings.llm_usd_per_mtok_cached,
            output_per_mtok=settings.llm_usd_per_mtok_output,
        )

    def cost_usd(self, usage: TokenUsage) -> float:
        """Prompt tokens that missed the cache at the input price, the cached ones at the
        cache price, completion (reasoning included) at the output price."""
        missed = max(0, usage.prompt - usage.cached)
        return (
            missed * self.input_per_mtok
            + usage.cached * self.cached_per_mtok
            + usage.completion * self.output_per_mtok
        ) / 1_000_000
