"""Timestamps PostgreSQL holds and a Python datetime cannot: read them clamped, never fail.

The request checks (``pipelines.records.check_instant``) keep such values out, but a row
written before those checks, by hand or by another tool may hold year 10000 or
``infinity``. psycopg refuses to load it (``DataError: timestamp too large``), and one such
row used to fail every listing, get, export and drain that touched it. Loaded through
these loaders it reads as the nearest instant a datetime can hold, so the row stays
readable (and exportable, and erasable) while the rest of the system goes on.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import pq
from psycopg.adapt import Buffer, Loader

if TYPE_CHECKING:
    from psycopg.abc import AdaptContext

EARLIEST = datetime.min.replace(tzinfo=UTC)
LATEST = datetime.max.replace(tzinfo=UTC)


class _Clamping(Loader):
    """Delegates to psycopg's own (C) loader; only a value it cannot load is clamped. The C
    loaders cannot be subclassed, hence the delegation."""

    fmt: pq.Format

    def __init__(self, oid: int, context: AdaptContext | None = None) -> None:
        super().__init__(oid, context)
        loader = psycopg.adapters.get_loader(oid, self.fmt)
        assert loader is not None, "psycopg has a loader for timestamptz"
        self._load = loader(oid, context).load

    def load(self, data: Buffer) -> Any:
        try:
            return self._load(data)
        except psycopg.DataError:
            return EARLIEST if self._before_year_1(bytes(data)) else LATEST

    def _before_year_1(self, data: bytes) -> bool:
        raise NotImplementedError


class ClampingTimestamptzLoader(_Clamping):
    format = fmt = pq.Format.TEXT

    def _before_year_1(self, data: bytes) -> bool:
        # '-infinity' or '0001-12-31 23:00:00+00 BC'
        return data.startswith(b"-") or data.endswith(b" BC")


class ClampingTimestamptzBinaryLoader(_Clamping):
    format = fmt = pq.Format.BINARY

    def _before_year_1(self, data: bytes) -> bool:
        # microseconds since 2000-01-01 UTC, signed; -infinity is the smallest int64
        return int.from_bytes(data[:8], "big", signed=True) < 0


def clamp_timestamps(conn: psycopg.Connection[Any]) -> None:
    """A pool's ``configure`` hook: this connection loads out-of-range timestamps clamped."""
    conn.adapters.register_loader("timestamptz", ClampingTimestamptzLoader)
    conn.adapters.register_loader("timestamptz", ClampingTimestamptzBinaryLoader)
