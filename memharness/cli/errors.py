"""One line, not a traceback, when a command cannot reach PostgreSQL or Redis.

An operator who runs ``memharness stats`` against a stopped database needs to read which
service, at which address, and what to do; a 60-line psycopg traceback hides that. The
address is shown without its password (host, port, database), and only errors that mean
"unreachable" are turned into a line: any other failure is a bug and keeps its traceback.
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

from config import Settings

# Exit status of a command that could not reach a service it needs (2 is a bad argument).
EXIT_UNREACHABLE = 3
# Processes that run until stopped: their reconnect messages are what an operator watches.
LONG_RUNNING = frozenset({"worker", "beat", "serve", "mcp", "demo", "llm"})
# Loggers that print each failed reconnect attempt (the pool's two-line message, the result
# backend's 20 retries): a one-shot command ends with one line saying the same.
RETRY_LOGGERS = ("psycopg.pool", "celery.backends.redis", "celery.backends.asynchronous")


def quiet_connection_retries(command: str) -> None:
    """Silence the retry loggers of a one-shot command (``--verbose`` keeps them)."""
    if command in LONG_RUNNING:
        return
    for name in RETRY_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)


def postgres_address(database_url: str) -> str:
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(database_url)
    except Exception:  # a malformed URL: say so rather than echo it (it may hold a password)
        return "MEMHARNESS_DATABASE_URL (not a valid URL)"
    host = params.get("host") or "localhost"
    port = params.get("port") or 5432
    return f"{host}:{port}/{params.get('dbname') or ''}"


def redis_address(redis_url: str) -> str:
    try:
        parts = urlsplit(redis_url)
        return f"{parts.hostname or 'localhost'}:{parts.port or 6379}{parts.path or ''}"
    except ValueError:
        return "MEMHARNESS_REDIS_URL (not a valid URL)"


def _reason(exc: BaseException) -> str:
    """The first line of the driver's message, without the address it repeats."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if "pool initialization incomplete" in text:
        return "no connection " + text.rpartition("incomplete ")[2]
    if "Connection refused" in text or "ECONNREFUSED" in text or "Errno 111" in text:
        return "connection refused"
    if "timeout" in text.lower() or "timed out" in text.lower():
        return "no answer in time"
    return text[:160]


def unreachable_line(command: str, exc: BaseException, settings: Settings) -> str | None:
    """``memharness <command>: PostgreSQL is unreachable at host:port/db (...); ...`` when
    ``exc`` (or what caused it) is an unreachable PostgreSQL or Redis; else None."""
    import psycopg

    from memharness.server.errors import unavailable_cause

    cause = unavailable_cause(exc)
    if cause is None:
        return None
    if isinstance(cause, psycopg.Error) and "does not exist" in str(cause):
        return (
            f"memharness {command}: PostgreSQL at {postgres_address(settings.database_url)} "
            "has no such database: create it with `memharness migrate`"
        )
    if isinstance(cause, psycopg.Error):
        service, where, setting = (
            "PostgreSQL", postgres_address(settings.database_url), "MEMHARNESS_DATABASE_URL"
        )  # fmt: skip
    else:
        service, where, setting = (
            "Redis", redis_address(settings.redis_url), "MEMHARNESS_REDIS_URL"
        )  # fmt: skip
    return (
        f"memharness {command}: {service} is unreachable at {where} ({_reason(cause)}); "
        f"start it (`make services`) or point {setting} at a running one"
    )
