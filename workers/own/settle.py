"""The owner's share of corrections and erasures, one batch a run: forget requests first (an
erasure is owed to someone), then the settle jobs of corrections."""

from __future__ import annotations

import logging
from typing import Any

from workers.clients import Clients
from workers.own.correct import settle_corrections
from workers.own.forget import WindowBusy, claim_forget_requests, fail_forget, run_forget

log = logging.getLogger(__name__)

# A tenant's erasure purges thousands of points; a few requests a run keep the run short.
FORGET_REQUESTS_PER_RUN = 4


def settle_ownership(ctx: Clients) -> dict[str, Any]:
    stats: dict[str, Any] = {"forget_done": 0, "forget_retried": 0, "forget_dead": 0}
    claimed = claim_forget_requests(ctx, FORGET_REQUESTS_PER_RUN)
    for request_id, attempts in claimed:
        try:
            run_forget(ctx, request_id)
            stats["forget_done"] += 1
        except WindowBusy as exc:
            fail_forget(ctx, request_id, str(exc), dead=False)
            stats["forget_retried"] += 1
        except Exception as exc:
            dead = attempts >= ctx.settings.job_max_attempts
            log.warning("forget request %s failed (attempt %s): %s", request_id, attempts, exc)
            fail_forget(ctx, request_id, f"{type(exc).__name__}: {exc}", dead=dead)
            stats["forget_dead" if dead else "forget_retried"] += 1
    corrections = settle_corrections(ctx, ctx.settings.sweep_batch_size)
    stats.update(corrections)
    stats["more"] = (
        len(claimed) == FORGET_REQUESTS_PER_RUN
        or corrections["corrections"] + corrections["busy"] >= ctx.settings.sweep_batch_size
    )
    return stats
