"""What the benchmarks share: a scratch store of their own (a database, a Redis database,
a vector directory, the offline adapters) and the percentile they report."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

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
