"""What the benchmarks share: a scratch store of their own (a database, a Redis database,
a vector directory, the offline adapters) and the percentile they report."""

from __future__ import annotations

import argparse
import json
import os
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import redis
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from config import Settings


def scratch_settings(
    base: Settings, *, db_suffix: str, qdrant_path: Path, redis_db: int | None
) -> Settings:
    """``base`` on database ``<base db>_<db_suffix>`` (``_r<redis_db>`` added when a Redis
    database is given, so two runs on different Redis databases never drop each other's
    scratch database), Redis database ``redis_db`` (None: base's own), an embedded store at
    ``qdrant_path``, the hashing embedder and the offline LLM: figures that depend on
    nothing outside the run."""
    params = conninfo_to_dict(base.database_url)
    suffix = db_suffix if redis_db is None else f"{db_suffix}_r{redis_db}"
    database_url = make_conninfo(
        base.database_url, dbname=f"{params.get('dbname', 'memharness')}_{suffix}"
    )
    redis_url = base.redis_url
    if redis_db is not None:
        redis_url = base.redis_url.rsplit("/", 1)[0] + f"/{redis_db}"
    return base.model_copy(
        update={
            "database_url": database_url,
            "redis_url": redis_url,
            "qdrant_url": "",
            "qdrant_path": qdrant_path,
            "embedder": "hashing",
            "llm_provider": "offline",
        }
    )


# A benchmark's Redis database: ``"auto"`` (the first empty one, claimed), a number (that
# one, which must be empty) or None (the caller's own: the tests, which flush theirs).
RedisChoice = int | Literal["auto"] | None
AUTO: Literal["auto"] = "auto"
CLAIM_KEY = "memharness:bench:claim"


def _claimant() -> str:
    """Who holds a claim: this host and process, for whoever finds the key."""
    return f"{socket.gethostname()}:{os.getpid()}"


class BusyRedisDatabase(RuntimeError):
    """The Redis database asked for holds keys: another run's tasks or claim."""


def claim_redis_db(redis_url: str, wanted: RedisChoice) -> int | None:
    """The Redis database a benchmark may own, claimed with a key of its own.

    Two runs on one database consume each other's tasks and flush each other's queues, so
    a run takes only an empty database and marks it at once (``SET NX``: of two runs that
    saw it empty at the same moment, one wins and the other moves on). ``"auto"`` tries
    1, 2, ... up to the server's last database; a number is that database or an error.
    """
    if wanted is None:
        return None
    server = redis_url.rsplit("/", 1)[0]
    try:
        configured = redis.Redis.from_url(redis_url, decode_responses=True).config_get("databases")
        count = int(str(configured.get("databases") or 16))
    except redis.ResponseError:  # CONFIG renamed or refused (a managed Redis)
        count = 16
    if wanted != AUTO and not 0 <= wanted < count:
        raise BusyRedisDatabase(f"redis_db must be within 0..{count - 1}, got {wanted}")
    candidates = range(1, count) if wanted == AUTO else (wanted,)
    for number in candidates:
        client = redis.Redis.from_url(f"{server}/{number}")
        if client.dbsize() == 0 and client.set(CLAIM_KEY, _claimant(), nx=True):
            return number
    if wanted == AUTO:
        raise BusyRedisDatabase(f"no empty Redis database among 1..{count - 1} on {server}")
    raise BusyRedisDatabase(
        f"Redis database {wanted} is not empty: a benchmark refuses to share one (another "
        "run's tasks would be consumed); pick another with --redis-db or leave it out"
    )


def refuse(exc: BusyRedisDatabase) -> int:
    """A benchmark's answer when its Redis database is taken: one JSON line, exit 2."""
    print(json.dumps({"error": str(exc)}))
    return 2


def redis_choice(text: str) -> int | Literal["auto"]:
    """``--redis-db``'s type: ``auto`` or a database number."""
    if text == AUTO:
        return AUTO
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'auto' or a number, got {text!r}") from None


def add_redis_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--redis-db",
        type=redis_choice,
        default=AUTO,
        help="the run's Redis database: 'auto' (default: the first empty one) or a number, "
        "which must be empty",
    )


def clear_redis(settings: Settings, *, claimed: bool) -> None:
    """Empty the run's Redis database between phases, keeping its claim."""
    client = redis.Redis.from_url(settings.redis_url)
    client.flushdb()
    if claimed:
        client.set(CLAIM_KEY, _claimant())


def release_redis(settings: Settings) -> None:
    """Empty the run's Redis database at its end, claim included."""
    redis.Redis.from_url(settings.redis_url).flushdb()


def worker_env(settings: Settings) -> dict[str, str]:
    """The environment of a worker (or another process) on ``settings``' scratch stores."""
    return {
        "MEMHARNESS_DATABASE_URL": settings.database_url,
        "MEMHARNESS_REDIS_URL": settings.redis_url,
        "MEMHARNESS_QDRANT_URL": "",
        "MEMHARNESS_QDRANT_PATH": str(settings.qdrant_path),
        "MEMHARNESS_EMBEDDER": "hashing",
        "MEMHARNESS_LLM_PROVIDER": "offline",
    }


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile ``q`` (0-1) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
