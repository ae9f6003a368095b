"""The ``write`` queue's work: claim due outbox jobs in a batch, decide, summarise, embed,
upsert vectors, then record every outcome in one transaction.

Messages are coalesced: ``record()`` publishes a drain only when none is already queued (a
Redis flag), and a drain takes every due job, so a burst of writes costs a few tasks rather
than one per write. The outbox in PostgreSQL, not the message, is what guarantees delivery.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from pipelines.errors import LLMError, TransientLLMError
from pipelines.index.context_vector import context_text
from pipelines.index.vectors import VectorPoint
from pipelines.records import MemoryType
from pipelines.write.decide import WriteOutcome, decide_write
from pipelines.write.summary import needs_summary
from workers.activity import mark_activity
from workers.adapters.llm_offline import OfflineLLM
from workers.clients import Clients
from workers.db.jobs import WRITE_JOB, ClaimedJob, claim_jobs
from workers.index.points import code_vectors
from workers.index.reembed import write_target
from workers.index.targets import EPISODIC, IndexNotReady, episodic_payload
from workers.metrics import count_decision, count_drain, observe_embedding
from workers.publish import publish_quietly
from workers.queues import TaskName
from workers.write.sql import (
    DeadResult,
    DiscardedResult,
    RetryResult,
    StoredResult,
    fetch_memories,
    finish_batch_isolated,
)
from workers.write.wake import DRAIN_FLAG

log = logging.getLogger(__name__)

SUMMARY_MAX_WORDS = 60
# With a remote model every item costs a network call of up to llm_timeout_s; a small batch
# keeps the whole claim well inside its lease.
REMOTE_LLM_BATCH = 8


@dataclass
class DrainReport:
    claimed: int = 0
    stored: int = 0
    discarded: int = 0
    dead: int = 0
    retried: int = 0
    already_done: int = 0
    more: bool = False
    next_retry_s: float | None = None
    tenants: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "claimed": self.claimed,
            "stored": self.stored,
            "discarded": self.discarded,
            "dead": self.dead,
            "retried": self.retried,
            "already_done": self.already_done,
            "more": self.more,
            "next_retry_s": self.next_retry_s,
        }


def backoff_s(base_s: float, attempts: int) -> float:
    """Exponential backoff with full jitter, capped at five minutes."""
    ceiling: float = min(300.0, base_s * (2 ** max(0, attempts - 1)))
    return ceiling / 2 + random.uniform(0, ceiling / 2)


def drain_writes(ctx: Clients) -> DrainReport:
    """Claim one batch of due write jobs and finish it. ``more`` says whether to go on."""
    settings = ctx.settings
    try:
        ctx.redis.delete(DRAIN_FLAG)  # writes from now on publish a fresh drain
    except redis.RedisError:
        log.warning("drain flag not cleared: Redis unavailable; the relay covers new writes")
    limit = settings.write_batch_size
    if settings.llm_is_remote:
        limit = min(limit, REMOTE_LLM_BATCH)
    with ctx.pool.connection() as conn:
        jobs = claim_jobs(conn, kind=WRITE_JOB, limit=limit, lease_s=settings.job_lease_s)
    report = DrainReport(claimed=len(jobs))
    if jobs:
        started = time.perf_counter()
        process_batch(ctx, jobs, report)
        count_drain(
            claimed=len(jobs), seconds=time.perf_counter() - started,
            stored=report.stored, discarded=report.discarded, dead=report.dead,
        )  # fmt: skip
    report.more = len(jobs) == limit
    if jobs:
        # Background cognition: the tenants are active now; linking waits until the backlog
        # is drained, so it never takes the owner's only slot from waiting writes.
        after_write_batch(ctx, tenants=report.tenants, caught_up=not report.more)
    return report


def _decide(
    ctx: Clients, job: ClaimedJob, row: dict[str, Any], type_hint: MemoryType | None
) -> tuple[WriteOutcome, str | None]:
    """Tier 2/3 with the configured LLM; on the last attempt, the fallback policy."""
    content: str = row["content"]
    try:
        outcome = decide_write(content, type_hint, ctx.llm_for(row["tenant_id"]))
    except TransientLLMError as exc:
        if job.attempts < ctx.settings.job_max_attempts or ctx.settings.llm_fallback != "offline":
            raise
        outcome = decide_write(content, type_hint, OfflineLLM())
        note = f"fallback to offline rules after {job.attempts} attempts: {exc}"
        verdicts = tuple(
            v.model_copy(update={"source": "offline-fallback", "reason": f"{v.reason} ({note})"})
            for v in outcome.verdicts
        )
        return outcome.model_copy(update={"verdicts": verdicts}), note
    return outcome, None


def _summarise(ctx: Clients, job: ClaimedJob, row: dict[str, Any], fell_back: bool) -> str:
    """The model's summary; the extractive one when the model refused, or when it is
    unavailable on the last attempt under the offline fallback (as ``_decide`` does)."""
    content: str = row["content"]
    if not needs_summary(content):
        return content
    if fell_back:  # the model just failed every attempt: don't wait on it once more
        return OfflineLLM().summarize(content, SUMMARY_MAX_WORDS)
    try:
        return ctx.llm_for(row["tenant_id"]).summarize(content, SUMMARY_MAX_WORDS)
    except TransientLLMError:
        if job.attempts < ctx.settings.job_max_attempts or ctx.settings.llm_fallback != "offline":
            raise
        return OfflineLLM().summarize(content, SUMMARY_MAX_WORDS)
    except LLMError:
        return OfflineLLM().summarize(content, SUMMARY_MAX_WORDS)


def process_batch(ctx: Clients, jobs: list[ClaimedJob], report: DrainReport) -> None:
    settings = ctx.settings
    with ctx.pool.connection() as conn:
        memories = fetch_memories(conn, [job.memory_id for job in jobs])
    stored: list[StoredResult] = []
    discarded: list[DiscardedResult] = []
    dead: list[DeadResult] = []
    retries: list[RetryResult] = []
    done: list[int] = []
    kept: list[tuple[ClaimedJob, dict[str, Any], WriteOutcome, str]] = []
    deadline = time.monotonic() + settings.write_drain_deadline_s

    for job in jobs:
        row = memories.get(job.memory_id)
        if row is None or row["status"] != "pending":
            done.append(job.job_id)  # a replay: the work is already done
            report.already_done += 1
            continue
        if job.attempts > settings.job_max_attempts:
            reason = (
                f"gave up after {job.attempts - 1} attempts; last error: "
                f"{job.last_error or 'worker lost before finishing (lease expired)'}"
            )
            dead.append(DeadResult(job.job_id, job.memory_id, row["tenant_id"], reason))
            continue
        if time.monotonic() > deadline:
            # Out of time: hand the job back untouched, without spending an attempt.
            retries.append(RetryResult(job.job_id, "released at drain deadline", 0.0))
            continue
        type_hint = MemoryType(row["type"]) if row["type"] else None
        try:
            outcome, fallback_note = _decide(ctx, job, row, type_hint)
            count_decision(outcome.verdicts)
            fell_back = fallback_note is not None
            summary = _summarise(ctx, job, row, fell_back) if outcome.keep else ""
        except TransientLLMError as exc:
            if job.attempts >= settings.job_max_attempts:
                reason = f"LLM unavailable after {job.attempts} attempts: {exc}"
                dead.append(DeadResult(job.job_id, job.memory_id, row["tenant_id"], reason))
            else:
                wait = backoff_s(settings.job_retry_base_s, job.attempts)
                retries.append(RetryResult(job.job_id, f"{exc}", wait))
            continue
        except LLMError as exc:  # permanent: a refused request, a bad key
            reason = f"LLM refused the request: {type(exc).__name__}: {exc}"
            dead.append(DeadResult(job.job_id, job.memory_id, row["tenant_id"], reason))
            continue
        except Exception as exc:
            # Something about this row alone (its content broke a rule of the pipeline): it
            # is dead-lettered with the reason, and its siblings go on. Retrying the whole
            # batch would only fail it again, with every other job of it held ``running``.
            log.exception("memory %s could not be decided", job.memory_id)
            reason = f"the write decision failed: {type(exc).__name__}: {exc}"[:2000]
            dead.append(DeadResult(job.job_id, job.memory_id, row["tenant_id"], reason))
            continue
        if not outcome.keep and row.get("supersedes") is not None:
            # A correction is the user's own word on what holds now: never dropped as noise.
            outcome = outcome.model_copy(
                update={
                    "keep": True,
                    "importance": max(outcome.importance, 0.5),
                    "reason": f"{outcome.reason}; kept: it corrects memory {row['supersedes']}",
                }
            )
            summary = _summarise(ctx, job, row, fell_back)
        if outcome.keep:
            kept.append((job, row, outcome, summary))
        else:
            discarded.append(
                DiscardedResult(
                    job.job_id,
                    job.memory_id,
                    row["tenant_id"],
                    outcome.type.value,
                    outcome.reason,
                    outcome.verdicts,
                )
            )

    if kept:
        try:
            # Content and context vectors in one embedder call (docs/embedders.md).
            texts = [row["content"] for _, row, _, _ in kept]
            texts += [
                context_text(row.get("metadata"), outcome.type.value, row["task_id"])
                for _, row, outcome, _ in kept
            ]
            embed_started = time.perf_counter()
            vectors = ctx.embedder.embed(texts)
            # A code memory's own vector: its code read as words (docs/embedders.md).
            codes = code_vectors(ctx.code_embedder, [row for _, row, _, _ in kept])
            observe_embedding(time.perf_counter() - embed_started)
        except TransientLLMError as exc:
            for job, *_ in kept:
                wait = backoff_s(settings.job_retry_base_s, job.attempts)
                retries.append(RetryResult(job.job_id, f"embedding: {exc}", wait))
            kept = []
            vectors = []
            codes = []
        except (LLMError, ValueError) as exc:
            # Permanent: a refused key or model, or vectors of the wrong size. Retrying
            # cannot help; say so instead of leaving the jobs to expire their leases.
            for job, row, _, _ in kept:
                reason = f"embedding failed: {type(exc).__name__}: {exc}"
                dead.append(DeadResult(job.job_id, job.memory_id, row["tenant_id"], reason))
            kept = []
            vectors = []
            codes = []
        if kept:
            try:
                # The generation of this embedder's version: during a re-embed run, the one
                # being built, never the old one (workers.index.reembed.write_target).
                collection = write_target(ctx, EPISODIC)
            except IndexNotReady as exc:
                for job, *_ in kept:
                    wait = backoff_s(settings.job_retry_base_s, job.attempts)
                    retries.append(RetryResult(job.job_id, f"vector index: {exc}", wait))
                kept = []
        if kept:
            contexts = vectors[len(kept) :]
            # Point id = memory id: a replayed upsert overwrites the same point.
            ctx.vectors.upsert(
                collection,
                [
                    VectorPoint(
                        id=job.memory_id,
                        vector=vector,
                        context=context,
                        code=code,
                        # The payload rebuilds and reconciliation write too; every point says
                        # which embedder made it (docs/embedders.md).
                        payload=episodic_payload(
                            {**row, "type": outcome.type.value, "importance": outcome.importance},
                            ctx.embedder.version,
                        ),
                    )
                    for (job, row, outcome, _), vector, context, code in zip(
                        kept, vectors[: len(kept)], contexts, codes, strict=True
                    )
                ],
            )
            stored = [
                StoredResult(
                    job.job_id,
                    job.memory_id,
                    row["tenant_id"],
                    outcome.type.value,
                    outcome.importance,
                    summary,
                    ctx.embedder.version,
                    outcome.verdicts,
                )
                for job, row, outcome, summary in kept
            ]

    with ctx.pool.connection() as conn:
        moved_on, refused = finish_batch_isolated(
            conn, stored=stored, discarded=discarded, dead=dead, retries=retries, done_job_ids=done
        )
    if refused:
        gone = {result.memory_id for result in refused}
        # A refused stored result's point was upserted above; its row says dead: it must go.
        moved_on = [*moved_on, *(r.memory_id for r in stored if r.memory_id in gone)]
        stored = [result for result in stored if result.memory_id not in gone]
        discarded = [result for result in discarded if result.memory_id not in gone]
        dead = [*dead, *refused]
    if moved_on:
        # Corrected or forgotten while this batch embedded them: the settle job may already
        # have deleted their points, so delete the ones upserted above.
        ctx.vectors.delete(collection, moved_on)
    report.stored += len(stored)
    report.discarded += len(discarded)
    report.dead += len(dead)
    report.retried += len(retries)
    if retries:
        soonest = min(r.backoff_s for r in retries)
        if report.next_retry_s is None or soonest < report.next_retry_s:
            report.next_retry_s = soonest
    for result in dead:
        log.warning("memory %s dead-lettered: %s", result.memory_id, result.reason)
    report.tenants.extend({*(r.tenant_id for r in stored), *(r.tenant_id for r in discarded)})


def after_write_batch(ctx: Clients, *, tenants: Sequence[str], caught_up: bool) -> None:
    """After COMMIT: tenants written to are active now (the decay sweep waits for them to go
    idle), and once the write backlog is drained the unlinked memories get their links.
    Linking costs milliseconds a memory on the owner's single slot; deferring it while writes
    wait keeps ingest at the drain's speed. Best effort: the relay links what a lost message
    left unlinked."""
    try:
        mark_activity(ctx.redis, sorted(set(tenants)))
    except redis.RedisError:
        log.warning("tenant activity not marked: Redis unavailable")
    if caught_up and tenants:
        publish_quietly(TaskName.LINK_MEMORIES, memory_ids=None)
