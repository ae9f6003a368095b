"""Summaries and imported memories into the index (``embed`` queue, the store's owner): their
rows are embedded (content and context vectors, a code memory's code vector too) and their
``embedding_version`` recorded; retired and evicted rows are unindexed.
"""

from __future__ import annotations

from typing import Any

from workers.clients import Clients
from workers.cognition.sql import (
    close_jobs,
    set_embedding_versions,
)
from workers.db.jobs import EMBED_JOB, UNINDEX_JOB, claim_jobs
from workers.db.rows import fetch_rows
from workers.index.points import build_points
from workers.index.reembed import write_target
from workers.index.targets import EPISODIC, index_spec


def drain_embeddings(ctx: Clients) -> dict[str, Any]:
    """Embed new summary rows and unindex retired or evicted ones; one batch of each."""
    settings = ctx.settings
    limit = settings.sweep_batch_size
    collection = ctx.episodic_collection
    with ctx.pool.connection() as conn:
        jobs = claim_jobs(conn, kind=EMBED_JOB, limit=limit, lease_s=settings.job_lease_s)
        rows = fetch_rows(conn, [j.memory_id for j in jobs])
    todo = [(job, rows[job.memory_id]) for job in jobs if job.memory_id in rows]
    todo = [(job, row) for job, row in todo if row["status"] == "stored"]
    version = ctx.embedder.version
    if todo:
        # Content and context vectors, as the drain and the rebuilds make them: a summary or an
        # imported memory without its context vector would rank lower than its peers.
        points = build_points(
            ctx.embedder,
            index_spec(settings, EPISODIC),
            [r for _, r in todo],
            ctx.code_embedder,
        )
        # During a re-embed run the new generation takes the new model's vectors; raises
        # IndexNotReady (the jobs' leases then expire and they are retried) until it exists.
        collection = write_target(ctx, EPISODIC)
        ctx.vectors.upsert(collection, points)
    with ctx.pool.connection() as conn:
        set_embedding_versions(
            conn, [(row["id"], version) for _, row in todo], [j.job_id for j in jobs]
        )
        gone = claim_jobs(conn, kind=UNINDEX_JOB, limit=limit, lease_s=settings.job_lease_s)
    if gone:
        # Through the alias, whatever its model: a point a re-embed run copies meanwhile is
        # removed by the run's own verification, which treats non-live rows as orphans.
        if ctx.vectors.resolve(collection) is not None:
            ctx.vectors.delete(collection, [j.memory_id for j in gone])
        with ctx.pool.connection() as conn:
            close_jobs(conn, [j.job_id for j in gone])
    return {
        "embedded": len(todo),
        "skipped": len(jobs) - len(todo),
        "unindexed": len(gone),
        "more": len(jobs) == limit or len(gone) == limit,
    }
