"""``memharness bench system-quality``: evidence recall of the product as users get it.

``bench retrieval-quality`` ranks a conversation's turns in one process with the pure
pipeline, so it never sees what the background does to the store. This bench replays a
LoCoMo-format file through the real product and asks every question:

* one fresh store per conversation (a scratch database, a Redis database, an embedded vector
  directory) and two real worker processes: the store's owner (write, embed, recall) and the
  background (maintenance, compress, quality, consolidate);
* one tenant per conversation (a uuid5 of its sample id); each session's turns are recorded
  through ``MemoryClient.record_many`` ("speaker: text", the dia_id in metadata, the session's
  time plus one second per turn so that their order survives) and the bench waits until they
  are stored, embedded and linked;
* after every session, a simulated night: the decay sweep, compression sweeps every 15
  minutes of the night until one creates nothing (each followed by its quality checks), the
  scheduled quality sweep and the nightly consolidation, all published with ``now`` set to the
  night, as beat publishes them, then waited for through ``cognition_runs``;
* the conversation's timeline is shifted so that its last night ended six hours before the
  questions: the read path's clock (the wall clock) then sees the history as a user asking
  the morning after would;
* every question of categories 1-4 is asked through ``recall()`` (limit 10) and ``context()``
  (budget 4,000 tokens); the returned memories are mapped back to dia_ids.

Evidence recall@10 is reported strictly (only raw turns count), with summary credit (a
summary counts for the turns it covers, through ``parent_ids`` down to level 0) and with
checked credit (``*_credit_kept``: a summary counts only for the covered turns of which it still
says half the distinct content words, ``system_store.HOLDS_SHARE``), beside the
pure pipeline's dense and full recall@10 on the same turns and questions, in the same run
(``retrieval_quality.evaluate_conversation``). Gold evidence that cannot be reached is
classified by its row's state; the background's work (supersessions, conflicts, summaries'
sizes per level, knowledge rows, evictions) is counted from the tables.

The decay sweep acts only on tenants idle for ``tenant_idle_s`` by the activity clock, which
the write drain stamps with the wall clock; before each night the bench sets the tenant's
activity to the session's last simulated write, the same clock as the sweeps'.

Progress goes to stderr; the last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import redis

from config import Settings
from memharness.bench import embedders
from memharness.bench.retrieval_quality import (
    CATEGORIES,
    Conversation,
    Question,
    Tally,
    Turn,
    build_pure_store,
    evaluate_conversation,
    load_conversations,
)
from memharness.bench.scratch import (
    AUTO,
    BusyRedisDatabase,
    RedisChoice,
    add_redis_argument,
    claim_redis_db,
    clear_redis,
    release_redis,
    scratch_settings,
    worker_env,
)
from memharness.bench.system_ask import BUDGET_TOKENS, Asked, K, ask_questions
from memharness.bench.system_store import (
    EXAMPLES,
    SETTLE_TIMEOUT_S,
    WAIT_TIMEOUT_S,
    ModelLog,
    NightLog,
    Store,
    background_counts,
    load_cover,
    model_env,
    run_night,
    sum_background,
    unreachable_gold,
    usage_minus,
    wait_for,
)
from memharness.progress import progress

BENCH = "system-quality"
# The data set of the house: LoCoMo's dev split beside the project (never copied into it).
DEFAULT_DATA = Path(__file__).resolve().parents[3] / "shared" / "bench" / "locomo-dev.json"
# --quick: one conversation, its first sessions; about 60 turns, done in well under a minute.
QUICK_SESSIONS = 3
NIGHT_HOUR_UTC = 3
# The questions come the morning after the last night (03:00 + 6 h).
ASK_AFTER = timedelta(hours=6)
OWNER_QUEUES = ("write", "embed", "recall")
BACKGROUND_QUEUES = ("maintenance", "compress", "quality", "consolidate")
TENANT_NAMESPACE = uuid.UUID("5d7c4f0e-6b1a-5c1e-9a57-5f0a1d2c3b4e")
# The bench embedder names and what a worker needs in its environment to use the same one.
WORKER_EMBEDDER_ENV: dict[str, dict[str, str]] = {
    "hashing": {"MEMHARNESS_EMBEDDER": "hashing", "MEMHARNESS_EMBED_DIM": "384"},
    "minilm": {
        "MEMHARNESS_EMBEDDER": "sentence-transformers",
        "MEMHARNESS_EMBED_MODEL": "all-MiniLM-L6-v2",
    },
    "e5": {"MEMHARNESS_EMBEDDER": "e5"},
}
SETTINGS_EMBEDDER = {"hashing": "hashing", "minilm": "sentence-transformers", "e5": "e5"}
TOKENS_NOTE = (
    "the offline adapter (rules and extractive heuristics) calls no model and reports no usage"
)


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def tenant_for(sample_id: str) -> str:
    return str(uuid.uuid5(TENANT_NAMESPACE, f"{BENCH}\x1f{sample_id}"))


# -- data ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Session:
    key: str
    when: datetime
    turns: tuple[Turn, ...]


def sessions_of(conversation: Conversation) -> list[Session]:
    """The conversation's turns by session (dia_id ``D<n>:<m>``), in time order."""
    grouped: dict[int, list[Turn]] = defaultdict(list)
    for turn in conversation.turns:
        grouped[int(turn.dia_id.split(":")[0].lstrip("D") or 0)].append(turn)
    sessions = [
        Session(key=f"session_{number}", when=turns[0].timestamp, turns=tuple(turns))
        for number, turns in sorted(grouped.items())
    ]
    return sorted(sessions, key=lambda s: (s.when, s.key))


def restrict(conversation: Conversation, sessions: Sequence[Session]) -> Conversation:
    """The conversation as far as ``sessions`` go: their turns, and the questions whose
    evidence lies in them (the rest of each question's evidence dropped, as ids that match
    no turn are)."""
    turns = [turn for session in sessions for turn in session.turns]
    known = {turn.dia_id for turn in turns}
    questions = []
    for question in conversation.questions:
        gold = question.gold & known
        if gold:
            questions.append(Question(text=question.text, category=question.category, gold=gold))
    return Conversation(sample_id=conversation.sample_id, turns=turns, questions=questions)


def night_after(session: Session, following: Session | None) -> datetime:
    """03:00 UTC after the session's day, or just before the next session if that is sooner;
    never before the session's last turn."""
    last = session.when + timedelta(seconds=len(session.turns))
    night = datetime.combine(
        session.when.date() + timedelta(days=1), datetime.min.time(), tzinfo=UTC
    ) + timedelta(hours=NIGHT_HOUR_UTC)
    if following is not None:
        night = min(night, following.when - timedelta(minutes=1))
    return max(night, last + timedelta(minutes=1))


# -- the run ------------------------------------------------------------------------------


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    print(json.dumps({"benchmark": BENCH, "error": message}))
    return 2


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 1) if values else None


def load_data(data: str | None, zh: bool, seed: int | None) -> tuple[list[Conversation], str]:
    if zh:
        from memharness.bench.zh_project import SEED, generate

        with tempfile.TemporaryDirectory(prefix="memharness-zh-") as tmp:
            zh_path = Path(tmp) / "zh.json"
            samples = generate(seed=SEED if seed is None else seed)
            zh_path.write_text(json.dumps(samples, ensure_ascii=False), encoding="utf-8")
            return load_conversations(str(zh_path)), f"zh-project (seed {seed or SEED})"
    path = data or str(DEFAULT_DATA)
    return load_conversations(path), path


def run(
    base: Settings,
    *,
    data: str | None = None,
    zh: bool = False,
    conversations: int | None = None,
    quick: bool = False,
    embedder: str = "hashing",
    seed: int | None = None,
    redis_db: RedisChoice = AUTO,
    llm: str = "offline",
    sessions: int | None = None,
    wait_timeout_s: float = SETTLE_TIMEOUT_S,
) -> int:
    """The whole run on an empty Redis database of its own (``redis_db``: ``"auto"``, a
    number, or None for the one of ``base``, as the tests do)."""
    from workers.db import drop_database

    began = time.monotonic()
    if embedder not in WORKER_EMBEDDER_ENV:
        return _fail(f"unknown embedder {embedder!r}: expected one of {', '.join(EMBEDDERS)}")
    try:
        loaded, source = load_data(data, zh, seed)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return _fail(f"cannot read {data or DEFAULT_DATA}: {exc}")
    try:
        model = embedders.load_embedder(embedder)
    except (ImportError, ValueError, OSError) as exc:
        return _fail(
            f"cannot load embedder {embedder!r}: {exc} ({embedders.requirement(embedder)})"
        )
    picked = loaded[: 1 if quick else (conversations or len(loaded))]
    if wait_timeout_s <= 0:
        return _fail(f"wait-timeout: must be above 0 s, got {wait_timeout_s}")
    WAIT_TIMEOUT_S[0] = wait_timeout_s
    if sessions is not None and sessions < 1:
        return _fail(f"sessions: at least 1 session per conversation, got {sessions}")
    session_limit = sessions or (QUICK_SESSIONS if quick else None)
    try:
        llm_env = model_env(base) if llm == "openai" else {}
    except ValueError as exc:
        return _fail(str(exc))
    try:
        number = claim_redis_db(base.redis_url, redis_db)
    except BusyRedisDatabase as exc:
        return _fail(str(exc))
    tmp = Path(tempfile.mkdtemp(prefix="memharness-bench-sysq-"))
    settings = scratch_settings(
        base, db_suffix="sysq_bench", qdrant_path=tmp / "qdrant", redis_db=number
    ).model_copy(update={"embedder": SETTINGS_EMBEDDER[embedder], "embed_dim": 384})
    if embedder == "minilm":
        settings = settings.model_copy(update={"embed_model": "all-MiniLM-L6-v2"})
    broker = redis.Redis.from_url(settings.redis_url)
    if number is None and broker.dbsize():
        return _fail(
            f"Redis database {settings.redis_url.rsplit('/', 1)[-1]} is not empty: this bench "
            "refuses to share one (pick another with --redis-db)"
        )
    env = worker_env(settings) | WORKER_EMBEDDER_ENV[embedder] | llm_env
    result: dict[str, Any] = {
        "benchmark": BENCH,
        "data": source,
        "embedder": embedder,
        "embedder_version": model.version,
        "quick": quick,
        "seed": seed,
        "llm": llm,
        "llm_model": llm_env.get("MEMHARNESS_LLM_MODEL_FAST", "offline rules"),
        "budget_tokens": BUDGET_TOKENS,
        "k": K,
    }
    per_conversation: list[dict[str, Any]] = []
    asked = Asked()
    pure_tallies: dict[str, dict[str, Tally]] = {
        ranker: defaultdict(Tally) for ranker in ("dense", "fused", "full")
    }
    nights = NightLog()
    model_log = ModelLog()
    unreachable: dict[str, dict[str, Any]] = {}
    background: list[dict[str, Any]] = []
    turns_written = 0
    gold_total = 0
    try:
        for index, conversation in enumerate(picked):
            chosen = sessions_of(conversation)[:session_limit]
            subset = restrict(conversation, chosen)
            stats = replay_conversation(
                settings, env, tmp / f"c{index}", subset, chosen, model, asked,
                pure_tallies, nights, model_log,
            )  # fmt: skip
            drop_database(settings.database_url)
            clear_redis(settings, claimed=number is not None)
            per_conversation.append(stats["summary"])
            background.append(stats["background"])
            for state, info in stats["unreachable"].items():
                slot = unreachable.setdefault(state, {"count": 0, "examples": []})
                slot["count"] += info["count"]
                if "returned" in info:
                    slot["returned"] = slot.get("returned", 0) + info["returned"]
                slot["examples"] = (slot["examples"] + info["examples"])[:EXAMPLES]
            turns_written += len(subset.turns)
            gold_total += stats["summary"]["gold_turns"]
    except (TimeoutError, RuntimeError) as exc:
        return _fail(str(exc))
    finally:
        drop_database(settings.database_url)
        release_redis(settings)
        shutil.rmtree(tmp, ignore_errors=True)
    means = asked.tallies["all"].means() if asked.tallies["all"].count else {}
    result |= {
        "conversations": len(per_conversation),
        "turns": turns_written,
        "questions": asked.tallies["all"].count,
        "gold_turns": gold_total,
        "recall_at_10_recall_strict": means.get("recall_strict"),
        "recall_at_10_recall_credit": means.get("recall_credit"),
        "recall_at_10_context_strict": means.get("context_strict"),
        "recall_at_10_context_credit": means.get("context_credit"),
        "recall_at_10_recall_credit_kept": means.get("recall_credit_kept"),
        "recall_at_10_context_credit_kept": means.get("context_credit_kept"),
        "in_context_credit_kept": means.get("in_context_credit_kept"),
        "recall_at_10_recall_raw_only": means.get("recall_raw_only"),
        "recall_at_10_context_raw_only": means.get("context_raw_only"),
        "in_context_strict": means.get("in_context_strict"),
        "in_context_credit": means.get("in_context_credit"),
        "pure_in_context": means.get("pure_in_context"),
        "recall_at_10_pure_full": pure_tallies["full"]["all"].means().get("recall_at_10"),
        "recall_at_10_pure_dense": pure_tallies["dense"]["all"].means().get("recall_at_10"),
    }
    if result["recall_at_10_pure_full"] is not None and means:
        result["context_minus_pure_full"] = round(
            means["context_strict"] - result["recall_at_10_pure_full"], 4
        )
        result["recall_minus_pure_dense"] = round(
            means["recall_strict"] - result["recall_at_10_pure_dense"], 4
        )
    result["per_category"] = {
        name: {"questions": asked.tallies[name].count}
        | asked.tallies[name].means()
        | {
            f"pure_{ranker}_recall_at_10": pure_tallies[ranker][name].means().get("recall_at_10")
            for ranker in ("dense", "full")
        }
        for name in CATEGORIES.values()
        if asked.tallies[name].count
    }
    reachable = ("reachable", "reachable_folded_into_summary")
    result["unreachable_gold"] = {
        "total": sum(v["count"] for k, v in unreachable.items() if k not in reachable),
        "by_state": {k: v for k, v in sorted(unreachable.items()) if k not in reachable},
        "reachable": unreachable.get("reachable", {}).get("count", 0),
        "reachable_folded_into_summary": unreachable.get("reachable_folded_into_summary", {}),
    }
    result["background"] = sum_background(background)
    result["summaries_returned_in_top_10"] = asked.summaries_returned
    result["top_10_slots"] = 2 * K * asked.tallies["all"].count
    result["summary_turns_covered_mean"] = _mean(asked.summary_cover_sizes)
    result["knowledge_items_in_context"] = asked.knowledge_in_context
    result["context_tokens_mean"] = _mean(asked.context_tokens)
    result["context_partition_tokens_mean"] = {
        k: _mean(v) for k, v in sorted(asked.partition_tokens.items())
    }
    result["pure_context_tokens_mean"] = _mean(asked.pure_context_tokens)
    result["retrieved_partition"] = {
        "budget_tokens_mean": _mean(asked.retrieved_budget),
        "items_mean": _mean(asked.retrieved_items),
        "summaries_mean": _mean(asked.retrieved_summaries),
        "summary_tokens_mean": _mean(asked.retrieved_summary_tokens),
        "evicted_mean": _mean(asked.retrieved_evicted),
        "pure_items_mean": _mean(asked.pure_retrieved_items),
    }
    result["pure_context_partition_tokens_mean"] = {
        k: _mean(v) for k, v in sorted(asked.pure_partition_tokens.items())
    }
    result["background_pace"] = model_log.report(turns_written)
    result["llm_tokens_per_1000_turns"] = (
        result["background_pace"]["tokens_per_1000_turns"] if llm != "offline" else None
    )
    result["llm_tokens_note"] = TOKENS_NOTE if llm == "offline" else "from the token ledger"
    result["nights"] = nights.nights
    result["compress_rounds"] = nights.compress_rounds
    result["summaries_created"] = dict(sorted(nights.created.items()))
    result["decay"] = dict(sorted(nights.decay.items()))
    result["per_conversation"] = per_conversation
    result["night_s_mean"] = (
        round(sum(nights.seconds) / len(nights.seconds), 2) if nights.seconds else None
    )
    result["ask_s_mean"] = (
        round(sum(asked.ask_seconds) / len(asked.ask_seconds), 3) if asked.ask_seconds else None
    )
    result["cpus"] = os.cpu_count()
    result["elapsed_s"] = round(time.monotonic() - began, 1)
    _log(
        f"recall@10 strict: recall() {result['recall_at_10_recall_strict']}, context() "
        f"{result['recall_at_10_context_strict']} (with summary credit "
        f"{result['recall_at_10_context_credit']}, checked "
        f"{result['recall_at_10_context_credit_kept']}); "
        f"pure full {result['recall_at_10_pure_full']}, "
        f"pure dense {result['recall_at_10_pure_dense']}"
    )
    print(json.dumps(result, sort_keys=True, ensure_ascii=False))
    return 0


EMBEDDERS = tuple(WORKER_EMBEDDER_ENV)


def replay_conversation(
    settings: Settings, env: dict[str, str], work: Path, conversation: Conversation,
    sessions: Sequence[Session], model: Any, asked: Asked,
    pure_tallies: dict[str, dict[str, Tally]], nights: NightLog, model_log: ModelLog,
) -> dict[str, Any]:  # fmt: skip
    """One conversation through a fresh store and real workers, then its questions."""
    from memharness.client import MemoryClient
    from memharness.processes import Managed, start_worker, wait_for_worker
    from workers.adapters.tokenizer import load_token_counter
    from workers.db import drop_database, migrate
    from workers.read.request import layout_of

    started = time.monotonic()
    tenant = tenant_for(conversation.sample_id)
    drop_database(settings.database_url)
    migrate(settings.database_url)
    run_env = env | {"MEMHARNESS_QDRANT_PATH": str(work / "qdrant")}
    run_settings = settings.model_copy(update={"qdrant_path": work / "qdrant"})
    # The questions are asked ASK_AFTER the last night, by the wall clock the read path uses
    # (module docstring); whole minutes, so that a run's figures do not hang on the hour it
    # started at, only on how long its replay took.
    last_night = night_after(sessions[-1], None)
    shift = (
        (datetime.now(UTC) - ASK_AFTER - last_night) // timedelta(minutes=1) * timedelta(minutes=1)
    )
    workers: list[Managed] = []
    store = Store(settings.database_url)
    written: dict[str, uuid.UUID | None] = {}
    receipts: dict[str, str] = {}
    label = f"{BENCH} {conversation.sample_id}"
    try:
        for name, queues in (("sysq-owner", OWNER_QUEUES), ("sysq-background", BACKGROUND_QUEUES)):
            workers.append(start_worker(name, queues, env=run_env, log_dir=work / "logs"))
        for worker in workers:
            wait_for_worker(worker, timeout_s=120)
        broker = redis.Redis.from_url(settings.redis_url)
        with MemoryClient(run_settings) as client, progress(label, total=len(sessions)) as bar:
            bar.note(
                f"{conversation.sample_id}: {len(sessions)} sessions, {len(conversation.turns)} "
                f"turns, {len(conversation.questions)} questions; timeline +{shift.days} days"
            )
            session_s: list[float] = []
            day_start = store.model_usage()
            for position, session in enumerate(sessions):
                began = time.monotonic()
                items = [
                    {
                        "content": turn.content,
                        "tenant_id": tenant,
                        "task_id": conversation.sample_id,
                        "session_id": session.key,
                        "timestamp": session.when + shift + timedelta(seconds=offset),
                        "metadata": {"dia_id": turn.dia_id},
                        "idempotency_key": f"{conversation.sample_id}:{turn.dia_id}",
                    }
                    for offset, turn in enumerate(session.turns)
                ]
                batch = client.record_many(items)
                for turn, receipt in zip(session.turns, batch, strict=True):
                    receipts[turn.dia_id] = receipt.status
                    written[turn.dia_id] = (
                        receipt.memory_id if receipt.status == "accepted" else None
                    )
                accepted = [r.memory_id for r in batch if r.status == "accepted"]
                client.wait_until_settled(accepted, timeout_s=WAIT_TIMEOUT_S[0])
                wait_for(
                    lambda: store.settled(tenant), f"{session.key} embedded and linked",
                    store=store, detail=lambda: store.unsettled(tenant),
                )  # fmt: skip
                model_log.settle_s += time.monotonic() - began
                model_log.memories += len(accepted)
                usage = store.model_usage()
                model_log.day.update(usage_minus(usage, day_start))
                following = sessions[position + 1] if position + 1 < len(sessions) else None
                run_night(
                    client._app, store, broker, tenant,
                    session.when + shift + timedelta(seconds=len(session.turns)),
                    night_after(session, following) + shift, nights,
                )  # fmt: skip
                day_start = store.model_usage()
                model_log.nights.append(usage_minus(day_start, usage))
                session_s.append(time.monotonic() - began)
                bar.advance()
            replay_s = time.monotonic() - started
            cover = load_cover(store, tenant)
            pure = build_pure_store(conversation, model)
            counter = load_token_counter(settings.tokenizer)
            with progress(f"{label} questions", total=len(conversation.questions)) as qbar:
                before = set(asked.hit_ids)
                asked.hit_ids.clear()
                ask_questions(
                    client, tenant, conversation, cover, pure, counter, layout_of(settings),
                    asked, qbar,
                )  # fmt: skip
                hit_ids = set(asked.hit_ids)
                asked.hit_ids |= before
                evaluate_conversation(conversation, model, pure_tallies, Counter(), qbar)
            gold = [dia for q in conversation.questions for dia in q.gold]
            unreachable = unreachable_gold(store, tenant, gold, written, receipts, hit_ids)
            background = background_counts(store, tenant)
    finally:
        store.close()
        for worker in workers:
            worker.stop()
        drop_database(settings.database_url)
    return {
        "summary": {
            "sample_id": conversation.sample_id,
            "sessions": len(sessions),
            "turns": len(conversation.turns),
            "questions": len(conversation.questions),
            "gold_turns": len(set(gold)),
            "replay_s": round(replay_s, 1),
            "session_s_mean": round(sum(session_s) / len(session_s), 2),
            "elapsed_s": round(time.monotonic() - started, 1),
        },
        "unreachable": unreachable,
        "background": background,
    }


def register_bench(bench: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``bench system-quality``; its own ``func`` overrides the ``bench`` parser's."""
    from config import get_settings

    b = bench.add_parser(
        BENCH,
        help="LoCoMo evidence recall through real workers and simulated nights, beside the "
        "pure pipeline's",
    )
    b.add_argument(
        "--data",
        default=None,
        help=f"LoCoMo-format JSON, read at run time (default {DEFAULT_DATA})",
    )
    b.add_argument("--zh", action="store_true", help="the generated Chinese project set instead")
    b.add_argument("--conversations", type=int, default=None, help="only the first N")
    b.add_argument(
        "--quick",
        action="store_true",
        help=f"one conversation, its first {QUICK_SESSIONS} sessions",
    )
    b.add_argument("--embedder", choices=sorted(EMBEDDERS), default="hashing")
    b.add_argument("--seed", type=int, default=None, help="--zh: the generated set's seed")
    b.add_argument("--sessions", type=int, default=None, help="only each conversation's first N")
    b.add_argument(
        "--llm",
        choices=["offline", "openai"],
        default="offline",
        help="openai: the workers use the model of the MEMHARNESS_LLM_* settings",
    )
    b.add_argument(
        "--wait-timeout",
        type=float,
        default=SETTLE_TIMEOUT_S,
        help="seconds each wait on the workers may take before the run fails",
    )
    add_redis_argument(b)
    b.set_defaults(
        func=lambda args: run(
            get_settings(),
            data=args.data,
            zh=args.zh,
            conversations=args.conversations,
            quick=args.quick,
            embedder=args.embedder,
            seed=args.seed,
            redis_db=args.redis_db,
            llm=args.llm,
            sessions=args.sessions,
            wait_timeout_s=args.wait_timeout,
        )
    )
