"""Exactly one beat acts: a Redis lease that the acting beat renews and the others wait on.

Every beat entry's schedule is wrapped in :class:`LeaderGated`. A beat that holds the lease
(or takes it because it expired) runs its entries as usual; any other beat answers "not due"
and looks again a third of the lease later. The leader renews the lease at least that often
(it never sleeps longer), so a standby takes over within one lease after the leader dies.
The lease is checked and renewed by one Lua script: a beat never extends a lease it lost.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
import uuid
from datetime import datetime, timedelta, tzinfo
from typing import Any

import redis
from celery import Celery
from celery.schedules import BaseSchedule, crontab, schedstate
from celery.utils.time import ffwd, remaining

log = logging.getLogger(__name__)

LEADER_KEY = "memharness:beat:leader"

# Take the lease when it is free, renew it when it is ours; 1 when we hold it afterwards.
_ACQUIRE_OR_RENEW = """
local holder = redis.call('get', KEYS[1])
if holder == ARGV[1] then
    redis.call('pexpire', KEYS[1], ARGV[2])
    return 1
end
if not holder then
    redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return 1
end
return 0
"""


class LeaderLock:
    """This process's claim on the lease; cached for a third of it between Redis calls."""

    def __init__(self, redis_url: str, ttl_s: float, key: str = LEADER_KEY) -> None:
        self.redis_url = redis_url
        self.ttl_s = ttl_s
        self.key = key
        self.token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._client: redis.Redis | None = None
        self._leader = False
        self._checked_until = 0.0

    @property
    def recheck_s(self) -> float:
        return self.ttl_s / 3

    def _redis(self) -> redis.Redis:
        if self._client is None:
            self._client = redis.Redis.from_url(
                self.redis_url, socket_timeout=2, socket_connect_timeout=2
            )
        return self._client

    def is_leader(self) -> bool:
        now = time.monotonic()
        if now < self._checked_until:
            return self._leader
        try:
            held = bool(
                self._redis().eval(
                    _ACQUIRE_OR_RENEW, 1, self.key, self.token, int(self.ttl_s * 1000)
                )
            )
        except redis.RedisError:
            # Leadership cannot be proven without Redis; an idle beat is the safe side.
            log.warning("beat leader lease unavailable (Redis error); idling")
            held = False
        if held != self._leader:
            log.info("beat %s %s the leader lease", self.token, "holds" if held else "lost")
        self._leader = held
        self._checked_until = now + self.recheck_s
        return held

    def release(self) -> None:
        """Give the lease up at once (a clean shutdown) instead of letting it expire."""
        with contextlib.suppress(redis.RedisError):
            self._redis().eval(
                "if redis.call('get', KEYS[1]) == ARGV[1] then "
                "return redis.call('del', KEYS[1]) end return 0",
                1,
                self.key,
                self.token,
            )
        self._leader = False
        self._checked_until = 0.0


_LOCKS: dict[tuple[str, str, float], LeaderLock] = {}


def leader_lock(redis_url: str, ttl_s: float, key: str = LEADER_KEY) -> LeaderLock:
    """One lock per process and key: every entry of a beat shares its claim."""
    lookup = (redis_url, key, ttl_s)
    lock = _LOCKS.get(lookup)
    if lock is None or lock.token.split(":")[1] != str(os.getpid()):
        lock = _LOCKS[lookup] = LeaderLock(redis_url, ttl_s, key)
    return lock


class ZonedCrontab(crontab):
    """A crontab read in a given zone (``zone`` None: the machine's local zone), whatever
    the app's timezone: "02:00 local" stays 02:00 local."""

    def __init__(
        self,
        zone: str | None,
        minute: str = "*",
        hour: str = "*",
        day_of_week: str = "*",
        day_of_month: str = "*",
        month_of_year: str = "*",
    ) -> None:
        super().__init__(
            minute=minute,
            hour=hour,
            day_of_week=day_of_week,
            day_of_month=day_of_month,
            month_of_year=month_of_year,
        )
        self.zone = zone
        self.fields = (minute, hour, day_of_week, day_of_month, month_of_year)

    def remaining_estimate(self, last_run_at: datetime, ffwd: type = ffwd) -> timedelta:
        return remaining(*self.remaining_delta(last_run_at, tz=resolve_zone(self.zone), ffwd=ffwd))

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.__class__, (self.zone, *self.fields))


def resolve_zone(zone: str | None) -> tzinfo:
    if zone:
        from zoneinfo import ZoneInfo

        return ZoneInfo(zone)
    import tzlocal

    return tzlocal.get_localzone()


class LeaderGated(BaseSchedule):
    """``inner``'s schedule, acted on only by the beat holding the leader lease."""

    def __init__(
        self,
        inner: BaseSchedule,
        redis_url: str,
        ttl_s: float,
        key: str = LEADER_KEY,
        app: Celery | None = None,
    ) -> None:
        super().__init__(nowfun=None, app=app)
        self.inner = inner
        self.redis_url = redis_url
        self.ttl_s = ttl_s
        self.key = key
        if app is not None:
            inner.app = app

    @property
    def every_s(self) -> float | None:
        run_every = getattr(self.inner, "run_every", None)
        return run_every.total_seconds() if isinstance(run_every, timedelta) else None

    @property
    def app(self) -> Celery:
        return self.inner.app

    @app.setter
    def app(self, app: Celery) -> None:
        self._app = app
        self.inner.app = app

    def remaining_estimate(self, last_run_at: datetime) -> timedelta:
        return self.inner.remaining_estimate(last_run_at)

    def is_due(self, last_run_at: datetime) -> schedstate:
        lock = leader_lock(self.redis_url, self.ttl_s, self.key)
        if not lock.is_leader():
            return schedstate(False, lock.recheck_s)
        due, next_s = self.inner.is_due(last_run_at)
        # Never sleep past a renewal: the lease must not lapse between two due times.
        return schedstate(due, min(float(next_s), lock.recheck_s))

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.__class__, (self.inner, self.redis_url, self.ttl_s, self.key))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LeaderGated):
            return (self.inner, self.redis_url, self.ttl_s, self.key) == (
                other.inner,
                other.redis_url,
                other.ttl_s,
                other.key,
            )
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.redis_url, self.key, self.ttl_s))

    def __repr__(self) -> str:
        return f"<leader-gated {self.inner!r}>"
