"""Whether each vector collection holds every live row of PostgreSQL, as last measured.

The index is derived data: a restored volume, a deleted directory or a crash mid-write can
leave it short of PostgreSQL, and a dense search over a short index answers less than the
store holds without any error. So the index's owner measures each collection (two counts:
PostgreSQL's live rows, the collection's points) when it starts, before its read slot serves
anything, on every index check, and after each step of a restore (``workers.index.restore``),
and records the figures in Redis. Readers (``recall()``, ``context()``) and the metrics scrape
read that record, in any process: a read against a collection known to be short says so
(``degraded``) and adds PostgreSQL's keyword search instead of answering empty.

The record stays until the next measurement, with no expiry: an owner that died in the
middle of a restore leaves its collection marked short, which it still is.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

import redis

from config import Settings
from workers.clients import Clients
from workers.index.targets import KINDS, IndexSpec, index_spec

log = logging.getLogger(__name__)

STATE_KEY = "memharness:index:state:{alias}"
# A reader re-reads a collection's record at most this often: one Redis GET (~0.15 ms here)
# per read is spared, and a restore's end is seen this much later.
STATE_REUSE_S = 1.0


@dataclass(frozen=True)
class IndexState:
    """One measurement of a collection against PostgreSQL."""

    kind: str
    collection: str
    live: int
    indexed: int
    restoring: bool = False
    measured_at: float = 0.0

    @property
    def missing(self) -> int:
        """Live rows the collection has no point for, at least (orphan points, rows
        deleted behind the index's back, only hide more of them: the restore's closing
        reconciliation counts them exactly)."""
        return max(0, self.live - self.indexed)

    @property
    def degraded(self) -> bool:
        return self.missing > 0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "missing": self.missing, "degraded": self.degraded}

    @classmethod
    def from_json(cls, raw: bytes | str) -> IndexState:
        data = json.loads(raw)
        return cls(
            kind=str(data["kind"]),
            collection=str(data["collection"]),
            live=int(data["live"]),
            indexed=int(data["indexed"]),
            restoring=bool(data.get("restoring", False)),
            measured_at=float(data.get("measured_at", 0.0)),
        )


# (the Redis client's id, alias) -> (when read, the record): by client, so two deployments
# (or two tests) in one process never share an answer.
_cache: dict[tuple[int, str], tuple[float, IndexState | None]] = {}
_cache_lock = threading.Lock()


def count_live(ctx: Clients, spec: IndexSpec) -> int:
    with ctx.pool.connection() as conn:
        row = conn.execute(
            f"SELECT count(*) FROM {spec.table} WHERE status = ANY(%s)",
            (list(spec.live_statuses),),
        ).fetchone()
    return int(row[0]) if row else 0


def measure_index(ctx: Clients, kind: str, *, restoring: bool = False) -> IndexState:
    """Count ``kind``'s live rows and its collection's points, and record the figures.

    Only in the process that may open the store (its owner, embedded)."""
    spec = index_spec(ctx.settings, kind)
    live = count_live(ctx, spec)
    indexed = ctx.vectors.count(spec.alias) if ctx.vectors.resolve(spec.alias) else 0
    state = IndexState(
        kind=kind,
        collection=spec.alias,
        live=live,
        indexed=indexed,
        restoring=restoring,
        measured_at=time.time(),
    )
    record_state(ctx.redis, state)
    return state


def record_state(client: redis.Redis, state: IndexState) -> None:
    client.set(STATE_KEY.format(alias=state.collection), json.dumps(state.as_dict()))
    with _cache_lock:
        _cache[(id(client), state.collection)] = (time.monotonic(), state)


def read_states(client: redis.Redis, settings: Settings) -> dict[str, IndexState]:
    """The last record of every collection that has one (the metrics scrape's view)."""
    specs = [index_spec(settings, kind) for kind in KINDS]
    raws = client.mget([STATE_KEY.format(alias=spec.alias) for spec in specs])
    return {
        spec.kind: IndexState.from_json(raw)
        for spec, raw in zip(specs, raws, strict=True)
        if raw is not None
    }


def known_state(ctx: Clients, kind: str) -> IndexState | None:
    """``kind``'s last record, re-read from Redis at most every ``STATE_REUSE_S``; None
    when nothing was measured yet (or Redis does not answer: a read is never failed for
    want of the record, it is answered as before)."""
    alias = index_spec(ctx.settings, kind).alias
    client = ctx.redis
    key = (id(client), alias)
    now = time.monotonic()
    with _cache_lock:
        cached = _cache.get(key)
    if cached is not None and now - cached[0] < STATE_REUSE_S:
        return cached[1]
    try:
        raw = client.get(STATE_KEY.format(alias=alias))
    except redis.RedisError as exc:
        log.warning("index state of %s unreadable: %s", alias, exc)
        return cached[1] if cached is not None else None
    state = IndexState.from_json(raw) if raw is not None else None
    with _cache_lock:
        _cache[key] = (now, state)
    return state


def index_degraded(ctx: Clients, kind: str) -> bool:
    """Whether ``kind``'s collection is known to miss live rows."""
    state = known_state(ctx, kind)
    return state is not None and state.degraded
