"""Tenant activity: when each tenant last wrote. The write drain marks it; the decay sweep
acts only on tenants idle for ``tenant_idle_s``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import redis

# Last write per tenant (epoch seconds): a sorted set, so "who is idle" is one range query.
ACTIVITY_KEY = "memharness:tenant-activity"


def mark_activity(r: redis.Redis, tenant_ids: Sequence[str], at: datetime | None = None) -> None:
    """Record a write for each tenant; the score only moves forward."""
    if tenant_ids:
        stamp = (at or datetime.now(UTC)).timestamp()
        r.zadd(ACTIVITY_KEY, dict.fromkeys(tenant_ids, stamp), gt=True)


def tenant_is_idle(r: redis.Redis, tenant_id: str, now: datetime, idle_s: float) -> bool:
    last = r.zscore(ACTIVITY_KEY, tenant_id)
    return last is None or now.timestamp() - float(last) >= idle_s
