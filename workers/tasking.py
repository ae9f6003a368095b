"""``memharness_task``: the one way to declare a task, with the project's defaults.

Celery turns a misspelled option into a silent class attribute; this decorator refuses
unknown options, takes the name from ``TaskName`` (which says its queue), retries transient
errors with backoff and jitter, counts runs for ``memharness stats``, and dead-letters a task
whose retries ran out.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
import redis
from celery import Task, shared_task
from celery.exceptions import SoftTimeLimitExceeded

from pipelines.errors import TransientLLMError
from workers.clients import get_clients
from workers.metrics import observe_task
from workers.queues import CeleryQueue, TaskName

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

# Errors worth another try: the database or broker blinked, the model was busy.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    psycopg.OperationalError,
    redis.ConnectionError,
    redis.TimeoutError,
    TransientLLMError,
)

ALLOWED_OPTIONS = frozenset(
    {"ignore_result", "soft_time_limit", "time_limit", "rate_limit", "track_started"}
)

METRICS_KEY = "memharness:metrics:{name}"

REGISTERED: dict[str, CeleryQueue] = {}


class MemharnessTask(Task[Any, Any]):
    """Records a dead letter when a task fails for good (retries exhausted or permanent)."""

    abstract = True

    def on_failure(
        self, exc: BaseException, task_id: str, args: Any, kwargs: Any, einfo: Any
    ) -> None:
        reason = f"{type(exc).__name__}: {exc}"[:2000]
        log.error("task %s[%s] failed for good: %s", self.name, task_id, reason)
        try:
            payload = json.dumps({"args": list(args or ()), "kwargs": dict(kwargs or {})})
            with get_clients().pool.connection() as conn:
                conn.execute(
                    "INSERT INTO dead_letters (task_name, task_id, args, reason) "
                    "VALUES (%s, %s, %s, %s) ON CONFLICT (task_id) DO NOTHING",
                    (self.name, task_id, payload, reason),
                )
        except Exception:  # the store may be what failed; the log line above stays
            log.exception("could not record the dead letter of %s[%s]", self.name, task_id)


# A long job's soft limit comes this long before its hard one: time to log and let go.
LONG_JOB_MARGIN_S = 30


class LongMemharnessTask(MemharnessTask):
    """A job that may run for many minutes (a rebuild of 100k points builds its HNSW graph for
    ~133 s on these machines, DESIGN.md): half the broker's visibility timeout, the bound the
    settings validator sets for every limit. Read from the settings when the task runs."""

    abstract = True

    @property
    def time_limit(self) -> int:  # type: ignore[override]
        return get_clients().settings.broker_visibility_timeout_s // 2

    @property
    def soft_time_limit(self) -> int:  # type: ignore[override]
        return self.time_limit - LONG_JOB_MARGIN_S


def _count(name: str, outcome: str, elapsed_s: float) -> None:
    observe_task(name, outcome, elapsed_s)
    try:
        pipe = get_clients().redis.pipeline(transaction=False)
        key = METRICS_KEY.format(name=name)
        pipe.hincrby(key, outcome, 1)
        pipe.hincrbyfloat(key, "seconds", elapsed_s)
        pipe.execute()
    except redis.RedisError:
        log.warning("metrics for %s not recorded: Redis unavailable", name)


def final_attempt() -> bool:
    """True inside a task running its last attempt: a transient error now would not be
    retried but dead-lettered, so a call with an offline fallback should take it."""
    from celery import current_task

    task = current_task
    if task is None or task.request is None or task.request.called_directly:
        return False
    retries = task.request.retries or 0
    return task.max_retries is not None and retries >= task.max_retries


def memharness_task(
    name: TaskName,
    *,
    retry_on: tuple[type[BaseException], ...] = TRANSIENT_ERRORS,
    max_retries: int = 5,
    long_running: bool = False,
    **options: Any,
) -> Callable[[F], Any]:
    """Declare a task of the project's on ``name``'s queue. It binds to whichever app the
    process builds (``shared_task``): importing a task module builds no app. A
    ``long_running`` task gets the limits of ``LongMemharnessTask``."""
    if not isinstance(name, TaskName):
        raise TypeError(f"task name {name!r} must be a TaskName: names on the wire live there")
    queue = name.queue
    unknown = set(options) - ALLOWED_OPTIONS
    if unknown:
        raise TypeError(f"unknown task option(s) for {name}: {', '.join(sorted(unknown))}")
    if name in REGISTERED:
        raise ValueError(f"task {name!r} is declared twice")

    def decorate(fn: F) -> Any:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                result = fn(*args, **kwargs)
            except retry_on:
                _count(name, "retried", time.perf_counter() - started)
                raise
            except SoftTimeLimitExceeded:
                _count(name, "timed_out", time.perf_counter() - started)
                raise
            except Exception:
                _count(name, "failed", time.perf_counter() - started)
                raise
            _count(name, "succeeded", time.perf_counter() - started)
            return result

        REGISTERED[name.value] = queue
        return shared_task(  # type: ignore[no-untyped-call]
            name=name.value,
            queue=queue.value,
            base=LongMemharnessTask if long_running else MemharnessTask,
            autoretry_for=retry_on,
            retry_backoff=True,
            retry_backoff_max=60,
            retry_jitter=True,
            max_retries=max_retries,
            **options,
        )(run)

    return decorate
