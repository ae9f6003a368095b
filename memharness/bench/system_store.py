"""The scratch store of ``bench system-quality`` during and after a replay: waiting on the
workers, the simulated nights, what each memory stands for (a turn, or the turns a summary
covers) and what the background left in the tables."""

from __future__ import annotations

import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import redis

from pipelines.text.sentences import split_speaker
from pipelines.text.words import content_tokens

# The nightly compression: one sweep per compress_interval_s (900 s) of the night, until one
# creates nothing; six rounds is more than any night of the test data needed.
COMPRESS_ROUNDS = 6
COMPRESS_EVERY = timedelta(minutes=15)
EXAMPLES = 5
SETTLE_TIMEOUT_S = 600.0
# The waits' timeout of this run (``--wait-timeout``): a model on a CPU settles a session in
# many minutes where the rules take seconds.
WAIT_TIMEOUT_S = [SETTLE_TIMEOUT_S]

# -- the model of the workers -------------------------------------------------------------


def model_env(settings: Any) -> dict[str, str]:
    """The workers' ``MEMHARNESS_LLM_*`` for ``--llm openai``: the model of ``settings``
    (what ``memharness llm serve`` printed, or DeepSeek's), provider forced to openai."""
    key = settings.llm_api_key
    if key is None or not key.get_secret_value():
        raise ValueError("--llm openai: MEMHARNESS_LLM_API_KEY is not set")
    return {
        "MEMHARNESS_LLM_PROVIDER": "openai",
        "MEMHARNESS_LLM_BASE_URL": settings.llm_base_url,
        "MEMHARNESS_LLM_API_KEY": key.get_secret_value(),
        "MEMHARNESS_LLM_MODEL_FAST": settings.llm_model_fast,
        "MEMHARNESS_LLM_MODEL_DEEP": settings.llm_model_deep,
        "MEMHARNESS_LLM_SEND_SCHEMA": str(settings.llm_send_schema).lower(),
        "MEMHARNESS_LLM_TIMEOUT_S": str(settings.llm_timeout_s),
        "MEMHARNESS_LLM_MAX_TOKENS": str(settings.llm_max_tokens),
    }


USAGE_KEYS = ("calls", "tokens_in", "tokens_in_cached", "tokens_out")


def usage_minus(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {key: after[key] - before.get(key, 0) for key in after}


@dataclass
class ModelLog:
    """The background's pace and the model's cost: per session, the seconds from the
    session's ``record_many`` until every memory was stored, embedded and linked, and the
    ledger's usage of that day and of the night after it."""

    memories: int = 0
    settle_s: float = 0.0
    day: Counter[str] = field(default_factory=Counter)
    nights: list[dict[str, int]] = field(default_factory=list)

    def report(self, turns: int) -> dict[str, Any]:
        night: Counter[str] = Counter()
        for usage in self.nights:
            night.update(usage)
        total = {key: self.day.get(key, 0) + night.get(key, 0) for key in USAGE_KEYS}
        calls = total.get("calls", 0)
        return {
            "memories": self.memories,
            "settle_s": round(self.settle_s, 1),
            "memories_per_minute": (
                round(self.memories * 60 / self.settle_s, 1) if self.settle_s else None
            ),
            "usage_day": {key: self.day.get(key, 0) for key in USAGE_KEYS},
            "usage_nights": self.nights,
            "usage_total": total,
            "calls_per_memory": round(calls / self.memories, 3) if self.memories else None,
            "tokens_per_1000_turns": {
                key: round(total.get(key, 0) * 1000 / turns, 1)
                for key in ("calls", "tokens_in", "tokens_out")
            }
            if turns
            else None,
            "tokens_per_night_mean": {
                key: round(night.get(key, 0) / len(self.nights), 1)
                for key in ("calls", "tokens_in", "tokens_out")
            }
            if self.nights
            else None,
        }


# -- waiting on the workers ---------------------------------------------------------------


def wait_for(
    check: Callable[[], Any],
    what: str,
    timeout_s: float | None = None,
    *,
    store: Store | None = None,
    detail: Callable[[], str] | None = None,
) -> Any:
    """Poll ``check`` until it is truthy. Never a hang: past ``timeout_s`` (default
    ``WAIT_TIMEOUT_S``, 600 s unless ``--wait-timeout``) a TimeoutError says what was
    awaited and ``detail()`` (what is still pending); with ``store``, a task that fails for
    good meanwhile (a dead letter, e.g. a link task killed at its time limit, which nothing
    would publish again) ends the wait at once with a RuntimeError naming the task and its
    reason."""
    limit = WAIT_TIMEOUT_S[0] if timeout_s is None else timeout_s
    deadline = time.monotonic() + limit
    while True:
        value = check()
        if value:
            return value
        failed = store.failed_for_good() if store is not None else None
        if failed:
            raise RuntimeError(f"while waiting for {what}: {failed}")
        if time.monotonic() > deadline:
            pending = f" ({detail()})" if detail is not None else ""
            raise TimeoutError(f"timed out after {limit:.0f}s waiting for {what}{pending}")
        time.sleep(0.1 if store is None else 0.5)


class Store:
    """The scratch database, read by the bench between steps (autocommit, one connection)."""

    def __init__(self, database_url: str) -> None:
        import psycopg

        self.conn = psycopg.connect(database_url, autocommit=True)
        self.dead_seen = 0

    def failed_for_good(self) -> str | None:
        """The first task dead-lettered since the last call, as "task: reason", or None."""
        row = self.conn.execute(
            "SELECT id, task_name, reason FROM dead_letters WHERE id > %s ORDER BY id LIMIT 1",
            (self.dead_seen,),
        ).fetchone()
        if row is None:
            return None
        self.dead_seen = int(row[0])
        return f"task {row[1]} failed for good: {row[2]}"

    def unsettled(self, tenant: str) -> str:
        """What keeps ``settled`` false: the tenant's pending, unembedded and unlinked rows,
        and its dead write jobs."""
        row = self.conn.execute(
            "SELECT count(*) FILTER (WHERE status = 'pending'), count(*) FILTER (WHERE status = "
            "'stored' AND embedding_version IS NULL), count(*) FILTER (WHERE status = 'stored' "
            "AND level = 0 AND linked_at IS NULL) FROM memories WHERE tenant_id = %s",
            (tenant,),
        ).fetchone()
        dead = self.one(
            "SELECT count(*) FROM jobs j JOIN memories m ON m.id = j.memory_id "
            "WHERE m.tenant_id = %s AND j.status = 'dead'",
            tenant,
        )
        pending, unembedded, unlinked = row if row else (0, 0, 0)
        return (
            f"{pending} pending, {unembedded} unembedded, {unlinked} unlinked, "
            f"{dead} dead write jobs"
        )

    def model_usage(self) -> dict[str, int]:
        """The token ledger's totals over every tenant: calls, tokens in (cached) and out."""
        row = self.conn.execute(
            "SELECT coalesce(sum(calls), 0), coalesce(sum(prompt_tokens), 0), "
            "coalesce(sum(cached_tokens), 0), coalesce(sum(completion_tokens), 0) "
            "FROM llm_usage_totals"
        ).fetchone()
        calls, prompt, cached, completion = row if row else (0, 0, 0, 0)
        return {
            "calls": int(calls),
            "tokens_in": int(prompt),
            "tokens_in_cached": int(cached),
            "tokens_out": int(completion),
        }

    def close(self) -> None:
        self.conn.close()

    def one(self, sql: str, *params: Any) -> Any:
        row = self.conn.execute(sql, params).fetchone()
        return row[0] if row else None

    def rows(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        return list(self.conn.execute(sql, params).fetchall())

    def run_stats(self, run_id: uuid.UUID) -> dict[str, Any] | None:
        """A finished run's stats, None while it runs (or before its first step)."""
        row = self.conn.execute(
            "SELECT finished_at IS NOT NULL, stats FROM cognition_runs WHERE run_id = %s",
            (run_id,),
        ).fetchone()
        if row is None or not row[0]:
            return None
        return dict(row[1] or {})

    def settled(self, tenant: str) -> bool:
        """Nothing of the tenant pending, unembedded or (at level 0) unlinked."""
        return bool(
            self.one(
                "SELECT count(*) = 0 FROM memories WHERE tenant_id = %s AND (status = 'pending' "
                "OR (status = 'stored' AND (embedding_version IS NULL "
                "OR (level = 0 AND linked_at IS NULL))))",
                tenant,
            )
        )

    def summaries_checked(self, tenant: str) -> bool:
        return bool(
            self.one(
                "SELECT count(*) = 0 FROM memories m WHERE tenant_id = %s AND level >= 1 "
                "AND status = 'stored' AND NOT EXISTS "
                "(SELECT 1 FROM quality_reports q WHERE q.summary_id = m.id)",
                tenant,
            )
        )


# -- one night ----------------------------------------------------------------------------


@dataclass
class NightLog:
    nights: int = 0
    compress_rounds: int = 0
    created: Counter[str] = field(default_factory=Counter)
    decay: Counter[str] = field(default_factory=Counter)
    seconds: list[float] = field(default_factory=list)


def run_night(
    app: Any, store: Store, redis_client: redis.Redis, tenant: str, last_write: datetime,
    clock: datetime, log: NightLog,
) -> None:  # fmt: skip
    """The nightly jobs of schedules/declarations.py at ``clock``, each waited for."""
    from workers.activity import ACTIVITY_KEY
    from workers.cognition.runs import run_id_for
    from workers.queues import TaskName

    started = time.monotonic()

    def sweep(task: TaskName, kind: str, at: datetime) -> dict[str, Any]:
        run_id = run_id_for(kind, None, at)
        app.send_task(
            task.value, kwargs={"run_id": str(run_id), "now": at.isoformat()}, queue=task.queue
        )
        stats: dict[str, Any] = wait_for(
            lambda: store.run_stats(run_id), f"{task} at {at}", store=store
        )
        return stats

    # The activity clock of the decay sweep is the simulated one (see the module's docstring).
    redis_client.zadd(ACTIVITY_KEY, {tenant: last_write.timestamp()})
    decay = sweep(TaskName.DECAY_SWEEP, "decay", clock)
    log.decay.update({k: int(v) for k, v in decay.items() if isinstance(v, int | float)})
    for round_ in range(COMPRESS_ROUNDS):
        stats = sweep(TaskName.COMPRESS_SWEEP, "compress", clock + round_ * COMPRESS_EVERY)
        log.compress_rounds += 1
        wait_for(
            lambda: store.summaries_checked(tenant),
            "the new summaries' quality checks",
            store=store,
        )
        made = {k: int(v) for k, v in stats.items() if k.endswith("_created")}
        log.created.update(made)
        if not any(made.values()):
            break
    quality_at = clock + COMPRESS_ROUNDS * COMPRESS_EVERY
    sweep(TaskName.QUALITY_SWEEP, "quality", quality_at)
    consolidate_at = quality_at + COMPRESS_EVERY
    app.send_task(
        TaskName.CONSOLIDATE_NIGHTLY.value,
        kwargs={"now": consolidate_at.isoformat()},
        queue=TaskName.CONSOLIDATE_NIGHTLY.queue,
    )
    run_id = run_id_for("consolidate", tenant, consolidate_at)
    wait_for(lambda: store.run_stats(run_id), f"consolidation at {consolidate_at}", store=store)
    wait_for(
        lambda: store.settled(tenant),
        "the night's summaries embedded",
        store=store,
        detail=lambda: store.unsettled(tenant),
    )
    log.nights += 1
    log.seconds.append(time.monotonic() - started)


# A summary holds a turn it covers when it says at least this share of the turn's distinct
# content words (its speaker's name aside): an extractive summary keeps a sentence whole, a
# dropped sentence leaves a few shared words at most.
HOLDS_SHARE = 0.5


@dataclass
class Cover:
    """What every memory of the tenant stands for: a turn's dia_id, or (a summary) the dia_ids
    of the level-0 rows under it (``covers``) and of those whose words it still says
    (``holds``)."""

    dia_of: dict[str, str]
    covers: dict[str, frozenset[str]]
    level_of: dict[str, int]
    holds: dict[str, frozenset[str]] = field(default_factory=dict)


def _words(text: str) -> frozenset[str]:
    return frozenset(content_tokens(split_speaker(text)[1]))


def load_cover(store: Store, tenant: str) -> Cover:
    rows = store.rows(
        "SELECT id::text, level, metadata->>'dia_id', parent_ids::text[], content FROM memories "
        "WHERE tenant_id = %s ORDER BY id",
        tenant,
    )
    dia_of = {mid: dia for mid, level, dia, _, _ in rows if level == 0 and dia}
    parents = {mid: list(p or []) for mid, level, _, p, _ in rows if level >= 1}
    level_of = {mid: int(level) for mid, level, _, _, _ in rows}
    covers: dict[str, frozenset[str]] = {}

    def expand(mid: str, seen: frozenset[str]) -> frozenset[str]:
        if mid in dia_of:
            return frozenset({dia_of[mid]})
        if mid in covers:
            return covers[mid]
        out: set[str] = set()
        for parent in parents.get(mid, []):
            if parent not in seen:
                out |= expand(parent, seen | {mid})
        result = frozenset(out)
        covers[mid] = result
        return result

    for mid in sorted(parents):
        expand(mid, frozenset())
    turn_words = {dia_of[mid]: _words(text) for mid, _, _, _, text in rows if mid in dia_of}
    holds: dict[str, frozenset[str]] = {}
    for mid, level, _, _, text in rows:
        if level >= 1 and mid in covers:
            said = _words(text)
            holds[mid] = frozenset(
                dia
                for dia in covers[mid]
                if turn_words.get(dia)
                and len(turn_words[dia] & said) >= HOLDS_SHARE * len(turn_words[dia])
            )
    return Cover(dia_of=dia_of, covers=covers, level_of=level_of, holds=holds)


def credit(ids: Sequence[str], cover: Cover, gold: frozenset[str]) -> tuple[float, float, float]:
    """Recall of ``gold`` by the memories ``ids``: strict (raw turns only), with summary
    credit (a summary counts for the turns it covers), and with checked credit (a summary
    counts only for the covered turns whose words it still says)."""
    strict = {cover.dia_of[i] for i in ids if i in cover.dia_of}
    covered, held = set(strict), set(strict)
    for i in ids:
        covered |= cover.covers.get(i, frozenset())
        held |= cover.holds.get(i, frozenset())
    n = len(gold)
    return len(gold & strict) / n, len(gold & covered) / n, len(gold & held) / n


# -- what the background did --------------------------------------------------------------


def unreachable_gold(
    store: Store, tenant: str, gold: Iterable[str], written: dict[str, uuid.UUID | None],
    receipts: dict[str, str], hit_ids: set[str],
) -> dict[str, Any]:  # fmt: skip
    """Each gold turn of the asked questions by the state of its row; every state but
    ``reachable`` (stored, not folded into a summary) with up to five examples."""
    states: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for dia_id in sorted(set(gold)):
        memory_id = written.get(dia_id)
        if memory_id is None:
            states[f"not_written_{receipts.get(dia_id, 'unknown')}"].append({"dia_id": dia_id})
            continue
        row = store.conn.execute(
            "SELECT m.status, m.status_reason, m.superseded_by IS NOT NULL, m.content, "
            "n.content, m.change_reason, m.decay_factor FROM memories m "
            "LEFT JOIN memories n ON n.id = m.corrected_by WHERE m.id = %s",
            (memory_id,),
        ).fetchone()
        if row is None:
            states["missing_row"].append({"dia_id": dia_id})
            continue
        status, reason, summarised, content, newer, change_reason, decay = row
        example: dict[str, Any] = {"dia_id": dia_id, "content": content[:200]}
        if status == "stored" and not summarised:
            state = "reachable"
        elif status == "stored":
            # Folded into a summary but still stored and indexed: the read path can still
            # return the raw turn (it filters on status only), so it is not unreachable.
            state = "reachable_folded_into_summary"
            example["returned"] = str(memory_id) in hit_ids
        elif status == "corrected":
            state = "corrected"
            example |= {"newer": (newer or "")[:200], "reason": (change_reason or "")[:200]}
        elif status == "discarded":
            state = "discarded_at_write"
            example["reason"] = (reason or "")[:200]
        elif status == "evicted":
            state = "evicted"
            example["decay_factor"] = round(float(decay), 4)
        else:
            state = str(status)
            example["reason"] = (reason or "")[:200]
        states[state].append(example)
    out: dict[str, Any] = {
        state: {"count": len(items), "examples": items[:EXAMPLES] if state != "reachable" else []}
        for state, items in sorted(states.items())
    }
    folded = states.get("reachable_folded_into_summary", [])
    if folded:
        out["reachable_folded_into_summary"]["returned"] = sum(1 for e in folded if e["returned"])
    return out


def background_counts(store: Store, tenant: str) -> dict[str, Any]:
    from workers.own.correct import AUTOMATIC_ACTOR

    def grouped(sql: str) -> dict[str, int]:
        return {str(k): int(n) for k, n in store.rows(sql, tenant)}

    levels: dict[str, dict[str, Any]] = {}
    for level, _count, chars, source_chars, retired in store.rows(
        "SELECT s.level, count(*), sum(length(s.content)), "
        "sum((SELECT sum(length(p.content)) FROM memories p WHERE p.id = ANY(s.parent_ids))), "
        "count(*) FILTER (WHERE s.status = 'retired') FROM memories s "
        "WHERE s.tenant_id = %s AND s.level >= 1 AND s.status IN ('stored', 'retired') "
        "GROUP BY 1 ORDER BY 1",
        tenant,
    ):
        live = store.one(
            "SELECT count(*) FROM memories WHERE tenant_id = %s AND level = %s "
            "AND status = 'stored'",
            tenant,
            level,
        )
        levels[f"l{level}"] = {
            "summaries": int(live),
            "retired": int(retired),
            "summary_chars": int(chars or 0),
            "source_chars": int(source_chars or 0),
            "ratio": round(int(source_chars or 0) / int(chars), 2) if chars else None,
        }
    return {
        "memory_status": grouped(
            "SELECT level || ':' || status, count(*) FROM memories WHERE tenant_id = %s "
            "GROUP BY 1 ORDER BY 1"
        ),
        "corrections_automatic": int(
            store.one(
                "SELECT count(DISTINCT memory_id) FROM memory_events WHERE tenant_id = %s "
                "AND event = 'corrected' AND actor = %s",
                tenant,
                AUTOMATIC_ACTOR,
            )
        ),
        "corrected_rows": int(
            store.one(
                "SELECT count(*) FROM memories WHERE tenant_id = %s AND corrected_by IS NOT NULL",
                tenant,
            )
        ),
        "superseded_by_summary": int(
            store.one(
                "SELECT count(*) FROM memories WHERE tenant_id = %s AND superseded_by IS NOT NULL "
                "AND status = 'stored'",
                tenant,
            )
        ),
        "conflicts": grouped(
            "SELECT status, count(*) FROM memory_conflicts WHERE tenant_id = %s "
            "GROUP BY 1 ORDER BY 1"
        ),
        "conflict_examples": [
            {"older": o[:200], "newer": n[:200], "status": st, "reason": r[:200]}
            for o, n, st, r in store.rows(
                "SELECT o.content, n.content, c.status, c.reason FROM memory_conflicts c "
                "JOIN memories o ON o.id = c.older_id JOIN memories n ON n.id = c.newer_id "
                "WHERE c.tenant_id = %s ORDER BY o.ts, o.id LIMIT 5",
                tenant,
            )
        ],
        "correction_examples": [
            {"older": o[:200], "newer": n[:200], "reason": (r or "")[:200]}
            for o, n, r in store.rows(
                "SELECT o.content, n.content, o.change_reason FROM memories o "
                "JOIN memories n ON n.id = o.corrected_by WHERE o.tenant_id = %s "
                "ORDER BY o.ts, o.id LIMIT 5",
                tenant,
            )
        ],
        "events": grouped(
            "SELECT event || ':' || actor, count(*) FROM memory_events WHERE tenant_id = %s "
            "GROUP BY 1 ORDER BY 1"
        ),
        "evictions": int(
            store.one(
                "SELECT count(*) FROM memories WHERE tenant_id = %s AND status = 'evicted'", tenant
            )
        ),
        "semantic": grouped(
            "SELECT coalesce(kind, 'fact') || ':' || status, count(*) FROM semantic_memories "
            "WHERE tenant_id = %s GROUP BY 1 ORDER BY 1"
        ),
        "summary_levels": levels,
    }


def sum_background(items: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The per-conversation counts added up (nested dicts key by key)."""

    def add(into: dict[str, Any], other: dict[str, Any]) -> None:
        for key, value in other.items():
            if isinstance(value, dict):
                add(into.setdefault(key, {}), value)
            elif isinstance(value, list):
                into[key] = (into.get(key, []) + value)[:EXAMPLES]
            elif isinstance(value, int | float) and not isinstance(value, bool):
                into[key] = into.get(key, 0) + value
            else:
                into.setdefault(key, value)

    total: dict[str, Any] = {}
    for item in items:
        add(total, item)
    for level in total.get("summary_levels", {}).values():
        chars = level.get("summary_chars") or 0
        level["ratio"] = round(level.get("source_chars", 0) / chars, 2) if chars else None
    return total
