"""Quality sampling (``quality`` queue): every summary without a report is checked once; a
failed one is retired, its parents freed and their failures counted, in one transaction.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pipelines.cognition.quality import (
    QualityOutcome,
    QualityReport,
    QualityVerdict,
    apply_quality,
    check_compression,
    summarise_run,
)
from workers.clients import Clients
from workers.cognition.runs import StepOutcome, run_step
from workers.cognition.sql import (
    load_health,
    record_quality,
    row_to_draft,
    row_to_source,
    unchecked_summaries,
)
from workers.db.rows import fetch_rows
from workers.db.runs import Run
from workers.metrics import count_rollbacks
from workers.publish import publish_quietly
from workers.queues import TaskName

log = logging.getLogger(__name__)


def check_summaries(
    ctx: Clients, summary_ids: Sequence[uuid.UUID], now: datetime, run_id: uuid.UUID | None
) -> tuple[list[QualityReport], list[QualityOutcome]]:
    """Check each summary once; apply keep or rollback. Replays find the report and stop."""
    reports: list[QualityReport] = []
    outcomes: list[QualityOutcome] = []
    with ctx.pool.connection() as conn:
        rows = fetch_rows(conn, summary_ids)
    for summary_id in summary_ids:
        row = rows.get(summary_id)
        if row is None or row["status"] != "stored" or not 1 <= row["level"] <= 3:
            continue
        with ctx.pool.connection() as conn:
            parents = fetch_rows(conn, row["parent_ids"])
            health = load_health(conn, list(row["parent_ids"]))
        sources = [row_to_source(parents[p]) for p in row["parent_ids"] if p in parents]
        if not sources:
            continue
        draft = row_to_draft(row)
        report = check_compression(sources, draft)
        if draft.annotate_only and report.verdict is QualityVerdict.ROLLBACK:
            # Nothing gentler than annotate-only is left: keep it, record why.
            report = report.model_copy(
                update={
                    "verdict": QualityVerdict.KEEP,
                    "reason": f"annotate-only summary kept despite: {report.reason}",
                }
            )
        outcome = apply_quality(report, draft, health, now)
        with ctx.pool.connection() as conn:
            if not record_quality(conn, draft, report, outcome, run_id=run_id, now=now):
                continue
        reports.append(report)
        outcomes.append(outcome)
        if outcome.rollback is not None:
            log.info(
                "summary %s (L%s v%s) rolled back: %s",
                draft.id,
                draft.level,
                draft.version,
                report.reason,
            )
    return reports, outcomes


def quality_step(ctx: Clients, run_id: uuid.UUID, clock: datetime) -> StepOutcome:
    def body(run: Run, deadline: float) -> tuple[str | None, bool, dict[str, Any]]:
        stats: dict[str, Any] = {}
        after = uuid.UUID(run.cursor) if run.cursor else None
        limit = ctx.settings.sweep_batch_size
        cursor = run.cursor
        with ctx.pool.connection() as conn:
            ids = unchecked_summaries(conn, after, limit)
        reports: list[QualityReport] = []
        outcomes: list[QualityOutcome] = []
        for summary_id in ids:
            if time.monotonic() > deadline:
                return cursor, False, _quality_stats(run, reports, outcomes)
            done_reports, done_outcomes = check_summaries(ctx, [summary_id], run.clock, run.run_id)
            reports += done_reports
            outcomes += done_outcomes
            cursor = str(summary_id)
        stats = _quality_stats(run, reports, outcomes)
        return cursor, len(ids) < limit, stats

    outcome = run_step(ctx, "quality", run_id, clock, None, body)
    count_rollbacks(int(outcome.stats.get("rolled_back") or 0))
    if outcome.stats.get("rolled_back"):
        publish_quietly(TaskName.DRAIN_EMBEDDINGS)
    return outcome


def _quality_stats(
    run: Run, reports: Sequence[QualityReport], outcomes: Sequence[QualityOutcome]
) -> dict[str, Any]:
    """The figures of the run so far: counters add up, means are over the whole run."""
    step = summarise_run(reports, outcomes)
    recalls = [r.fact_recall for r in reports if r.fact_recall is not None]
    fidelities = [r.decision_fidelity for r in reports if r.decision_fidelity is not None]
    recall_sum = float(run.stats.get("fact_recall_sum", 0.0)) + sum(recalls)
    recall_n = int(run.stats.get("fact_recall_n", 0)) + len(recalls)
    fidelity_sum = float(run.stats.get("decision_fidelity_sum", 0.0)) + sum(fidelities)
    fidelity_n = int(run.stats.get("decision_fidelity_n", 0)) + len(fidelities)
    return {
        "checked": step.checked,
        "kept": step.kept,
        "rolled_back": step.rolled_back,
        "newly_resistant": step.newly_resistant,
        "statements_checked": step.statements_checked,
        "decisions_checked": step.decisions_checked,
        "fact_recall_sum": sum(recalls),
        "fact_recall_n": len(recalls),
        "decision_fidelity_sum": sum(fidelities),
        "decision_fidelity_n": len(fidelities),
        "fact_recall_mean": round(recall_sum / recall_n, 4) if recall_n else None,
        "decision_fidelity_mean": round(fidelity_sum / fidelity_n, 4) if fidelity_n else None,
    }
