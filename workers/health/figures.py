"""The figures operations read from PostgreSQL and Redis: one short statement each, under a
statement timeout, on a connection of their own (a scrape must never wait on the pool the
tasks use, nor hold it)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
import redis

from config import Settings
from pipelines.health.signals import drift_ratio, reason_class
from workers.index.completeness import IndexState, read_states
from workers.ledger import LedgerRow, read_totals
from workers.queues import CeleryQueue

log = logging.getLogger(__name__)

# A ping waits this long for replies, whatever the number of workers: a worker slower than
# this to answer is busy enough to count as down for a probe.
PING_TIMEOUT_S = 0.5
OUTBOX_KINDS = ("write", "embed", "unindex", "settle")
# Reasons read per source before they are classed: enough for every class a deployment has,
# bounded so a flood of distinct messages cannot make a scrape slow.
REASON_ROWS = 200

OUTBOX_LAG_SQL = (
    "SELECT kind, EXTRACT(EPOCH FROM now() - min(created_at))::float8 FROM jobs "
    "WHERE status IN ('pending', 'running') AND lease_until <= now() GROUP BY kind"
)
FORGET_LAG_SQL = (
    "SELECT EXTRACT(EPOCH FROM now() - min(created_at))::float8 FROM forget_requests "
    "WHERE status IN ('pending', 'running') AND lease_until <= now()"
)
DEAD_LETTERS_SQL = (
    "SELECT left(reason, 120), count(*) FROM dead_letters GROUP BY 1 ORDER BY 2 DESC LIMIT %s"
)
DEAD_JOBS_SQL = (
    "SELECT left(coalesce(dead_reason, last_error, ''), 120), count(*) FROM jobs "
    "WHERE status = 'dead' GROUP BY 1 ORDER BY 2 DESC LIMIT %s"
)
MEMORIES_SQL = (
    "SELECT level, status, count(*), count(*) FILTER (WHERE superseded_by IS NULL) "
    "FROM memories GROUP BY 1, 2"
)
RESISTANT_SQL = "SELECT count(*) FROM compression_health WHERE resistant"
FACT_RECALL_SQL = (
    "SELECT (stats->>'fact_recall_mean')::float8 FROM cognition_runs "
    "WHERE kind = 'quality' AND stats->>'fact_recall_mean' IS NOT NULL "
    "ORDER BY started_at DESC LIMIT 1"
)
LAST_COMPRESSION_SQL = (
    "SELECT EXTRACT(EPOCH FROM now() - max(started_at))::float8 FROM cognition_runs "
    "WHERE kind IN ('compress', 'quality')"
)
GOLDEN_SQL = (
    "SELECT DISTINCT ON (tenant_id) tenant_id, hit_ratio, p95_s, "
    "EXTRACT(EPOCH FROM now() - ran_at)::float8 FROM golden_runs ORDER BY tenant_id, ran_at DESC"
)
INDEX_SQL = (
    "SELECT index_points, live_rows FROM golden_runs WHERE index_points IS NOT NULL "
    "ORDER BY ran_at DESC LIMIT 1"
)


@dataclass
class Figures:
    """What one scrape (or one health check) read; an unreadable source leaves its field
    empty and says why in ``errors``."""

    outbox_lag_s: dict[str, float] = field(default_factory=dict)
    dead_letters: dict[str, int] = field(default_factory=dict)
    memories: dict[tuple[int, str], int] = field(default_factory=dict)
    live_episodic: int = 0
    resistant: int | None = None
    fact_recall: float | None = None
    last_compression_age_s: float | None = None
    golden: dict[str, tuple[float | None, float | None, float]] = field(default_factory=dict)
    index_points: dict[str, int] | None = None
    index_rows: dict[str, int] | None = None
    # The owner's last measurement of each collection against PostgreSQL (Redis).
    index_states: dict[str, IndexState] | None = None
    queue_depth: dict[str, int] = field(default_factory=dict)
    llm_usage: list[LedgerRow] | None = None
    workers_up: int | None = None
    postgres_error: str | None = None
    redis_error: str | None = None
    errors: list[str] = field(default_factory=list)

    def capacity_ratio(self, settings: Settings) -> float:
        watermark_rows = settings.episodic_capacity * settings.capacity_watermark
        return self.live_episodic / watermark_rows

    def drift(self) -> dict[str, float]:
        if self.index_points is None or self.index_rows is None:
            return {}
        return {
            kind: drift_ratio(points, self.index_rows.get(kind, 0))
            for kind, points in self.index_points.items()
        }


Step = Callable[[psycopg.Connection[Any], Figures], None]


class FigureReader:
    """Reads ``Figures``; keeps one connection and one Redis client between scrapes and
    reconnects after an error."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._conn: psycopg.Connection[Any] | None = None
        self._redis: redis.Redis | None = None

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
        if self._redis is not None:
            with contextlib.suppress(Exception):
                self._redis.close()
            self._redis = None

    def connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            timeout_ms = int(self.settings.metrics_scrape_timeout_s * 1000)
            self._conn = psycopg.connect(
                self.settings.database_url,
                autocommit=True,
                connect_timeout=max(1, int(self.settings.metrics_scrape_timeout_s)),
                options=f"-c statement_timeout={timeout_ms}",
                application_name="memharness-metrics",
            )
        return self._conn

    def _redis_client(self) -> redis.Redis:
        if self._redis is None:
            timeout = self.settings.metrics_scrape_timeout_s
            self._redis = redis.Redis.from_url(
                self.settings.redis_url, socket_timeout=timeout, socket_connect_timeout=timeout
            )
        return self._redis

    def _run(self, figures: Figures, what: str, step: Step) -> None:
        """One step's statements; a failure is noted, and a broken connection dropped."""
        try:
            step(self.connection(), figures)
        except psycopg.errors.UndefinedTable:
            figures.errors.append(f"{what}: table missing (migrate)")
        except psycopg.Error as exc:
            message = f"{type(exc).__name__}: {exc}".strip()[:300]
            figures.errors.append(f"{what}: {message}")
            if isinstance(exc, psycopg.OperationalError):
                figures.postgres_error = message
                self.close()

    def read(self, *, ping_workers: bool = True) -> Figures:
        figures = Figures()
        self._read_postgres(figures)
        self._read_redis(figures)
        if ping_workers and figures.redis_error is None:
            figures.workers_up = self._ping()
        return figures

    def _read_postgres(self, figures: Figures) -> None:
        steps = (
            ("outbox lag", self._outbox),
            ("dead letters", self._dead),
            ("memories", self._memories),
            ("compression", self._compression),
            ("golden runs", self._golden),
            ("llm ledger", self._ledger),
        )
        for what, step in steps:
            if figures.postgres_error is not None:
                return
            self._run(figures, what, step)

    def _outbox(self, conn: psycopg.Connection[Any], figures: Figures) -> None:
        lag = dict.fromkeys(OUTBOX_KINDS, 0.0)
        for kind, seconds in conn.execute(OUTBOX_LAG_SQL).fetchall():
            lag[kind] = max(0.0, float(seconds or 0.0))
        figures.outbox_lag_s = lag
        try:
            row = conn.execute(FORGET_LAG_SQL).fetchone()
            figures.outbox_lag_s["forget"] = max(0.0, float(row[0] or 0.0)) if row else 0.0
        except psycopg.errors.UndefinedTable:
            pass

    def _dead(self, conn: psycopg.Connection[Any], figures: Figures) -> None:
        classes: dict[str, int] = {}
        for sql, prefix in ((DEAD_LETTERS_SQL, "task"), (DEAD_JOBS_SQL, "job")):
            for reason, n in conn.execute(sql, (REASON_ROWS,)).fetchall():
                key = f"{prefix}:{reason_class(reason)}"
                classes[key] = classes.get(key, 0) + int(n)
        figures.dead_letters = classes

    def _memories(self, conn: psycopg.Connection[Any], figures: Figures) -> None:
        live = 0
        for level, status, n, unsuperseded in conn.execute(MEMORIES_SQL).fetchall():
            figures.memories[(int(level), str(status))] = int(n)
            if status == "stored":
                live += int(unsuperseded)
        figures.live_episodic = live

    def _compression(self, conn: psycopg.Connection[Any], figures: Figures) -> None:
        row = conn.execute(RESISTANT_SQL).fetchone()
        figures.resistant = int(row[0]) if row else 0
        row = conn.execute(FACT_RECALL_SQL).fetchone()
        figures.fact_recall = float(row[0]) if row and row[0] is not None else None
        row = conn.execute(LAST_COMPRESSION_SQL).fetchone()
        figures.last_compression_age_s = float(row[0]) if row and row[0] is not None else None

    def _golden(self, conn: psycopg.Connection[Any], figures: Figures) -> None:
        for tenant, ratio, p95, age in conn.execute(GOLDEN_SQL).fetchall():
            figures.golden[tenant] = (
                None if ratio is None else float(ratio),
                None if p95 is None else float(p95),
                float(age),
            )
        row = conn.execute(INDEX_SQL).fetchone()
        if row is not None:
            figures.index_points = {str(k): int(v) for k, v in (row[0] or {}).items()}
            figures.index_rows = {str(k): int(v) for k, v in (row[1] or {}).items()}

    def _ledger(self, conn: psycopg.Connection[Any], figures: Figures) -> None:
        figures.llm_usage = read_totals(conn)

    def _read_redis(self, figures: Figures) -> None:
        try:
            client = self._redis_client()
            pipe = client.pipeline(transaction=False)
            for queue in CeleryQueue:
                pipe.llen(queue.value)
            depths = pipe.execute()
            figures.queue_depth = {
                q.value: int(n) for q, n in zip(CeleryQueue, depths, strict=True)
            }
            figures.index_states = read_states(client, self.settings)
        except redis.RedisError as exc:
            figures.redis_error = f"{type(exc).__name__}: {exc}"[:300]
            self.close()

    def _ping(self) -> int | None:
        try:
            from workers.app import get_app

            replies = get_app(self.settings).control.ping(
                timeout=min(PING_TIMEOUT_S, self.settings.metrics_scrape_timeout_s)
            )
            return len(replies or [])
        except Exception as exc:  # a broker hiccup: the gauge is absent, not wrong
            log.debug("worker ping failed: %s", exc)
            return None
