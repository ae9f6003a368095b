"""A caller's side of a read the store's owner answers (embedded mode: ``recall()`` and
``context()`` of ``MemoryClient``).

Two ways to the owner, chosen by ``read_transport``:

- ``direct`` (the default): one compact JSON request LPUSHed onto the list the owner's reply
  slot serves (``workers.read.reply``), then a BLPOP on this call's own reply key
  (``memharness:reply:<uuid4 hex>``, with an expiry). Two Redis round trips, no Celery message,
  no result backend: the caller waits for the engine's answer plus one round trip.
- ``celery``: the task on the ``recall`` queue, its answer through the result backend (the
  owner's read slot, ``workers.read.slot``). Kept for a deployment that wants every read as a
  task Flower sees.

Either way a call the owner does not answer within ``timeout_s`` raises Celery's
``TimeoutError`` (what the HTTP API turns into a 504), and the owner drops a direct request
whose deadline has passed instead of answering it late.

Each call leaves its stage trace (``last_trace``): where the milliseconds went between the
caller and the owner. Stamps are wall-clock times, compared across the two processes (one
machine in embedded mode).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import redis

from workers.queues import TaskName
from workers.read.wire import REPLY_PREFIX, REQUESTS_KEY, REQUESTS_TTL_S, DirectRequest

if TYPE_CHECKING:
    from celery import Celery

    from config import Settings

# One BLPOP waits at most this long; a longer wait is several. The connection's socket timeout
# is above it, so a connection that died without a word cannot hang a caller past its deadline.
WAIT_SLICE_S = 5.0
SOCKET_MARGIN_S = 5.0

_local = threading.local()


class ReadFailed(RuntimeError):
    """The owner ran the read and it raised (its type and message, as the owner logged)."""


def last_trace() -> dict[str, float] | None:
    """The stages of this thread's last answered read, in milliseconds:
    ``client_encode``, ``publish``, ``pickup``, ``engine``, ``reply_encode`` (direct only),
    ``reply_wake`` (owner's reply sent -> in the caller's hands; on celery from the answer's
    end, the result backend's store and wake-up included) and ``client_decode``."""
    trace: dict[str, float] | None = getattr(_local, "trace", None)
    return trace


def _stages(stamps: dict[str, float], owner: dict[str, Any]) -> dict[str, float]:
    picked, answered = float(owner["picked"]), float(owner["answered"])
    out = {
        "client_encode": stamps["encoded"] - stamps["started"],
        "publish": stamps["published"] - stamps["encoded"],
        "pickup": picked - stamps["published"],
        "engine": answered - picked,
    }
    if "sent" in owner:
        out["reply_encode"] = float(owner["sent"]) - answered
        out["reply_wake"] = stamps["received"] - float(owner["sent"])
    else:
        out["reply_wake"] = stamps["received"] - answered
    out["client_decode"] = stamps["decoded"] - stamps["received"]
    return {stage: round(seconds * 1000, 3) for stage, seconds in out.items()}


def _timeout(name: TaskName, timeout_s: float) -> Exception:
    from celery.exceptions import TimeoutError as ResultTimeout

    return ResultTimeout(
        f"{name.value}: no answer from the store owner within {timeout_s:g} s "
        "(is the owner worker, the one consuming the recall queue, running?)"
    )


class OwnerReads:
    """A client's way to the store's owner: one per client, safe to share between threads."""

    def __init__(self, settings: Settings, app: Callable[[], Celery]) -> None:
        self._settings = settings
        self._app = app
        self._redis: redis.Redis | None = None
        self._lock = threading.Lock()

    @property
    def direct(self) -> bool:
        return self._settings.store_is_embedded and self._settings.read_transport == "direct"

    def _waiting_redis(self) -> redis.Redis:
        # Its own pool: the client's shared connection times out after 2 s, below a BLPOP.
        with self._lock:
            if self._redis is None:
                self._redis = redis.Redis.from_url(
                    self._settings.redis_url,
                    socket_timeout=WAIT_SLICE_S + SOCKET_MARGIN_S,
                    socket_connect_timeout=SOCKET_MARGIN_S,
                )
            return self._redis

    def close(self) -> None:
        with self._lock:
            client, self._redis = self._redis, None
        if client is not None:
            client.close()

    def ask(self, name: TaskName, kwargs: dict[str, Any], timeout_s: float) -> Any:
        """The owner's JSON answer to ``name(**kwargs)``, within ``timeout_s``."""
        _local.trace = None
        if self.direct:
            return self._ask_direct(name, kwargs, timeout_s)
        return self._ask_celery(name, kwargs, timeout_s)

    def _ask_direct(self, name: TaskName, kwargs: dict[str, Any], timeout_s: float) -> Any:
        started = time.time()
        deadline = started + timeout_s
        reply_key = REPLY_PREFIX + uuid.uuid4().hex
        body = DirectRequest(name.value, kwargs, reply_key, deadline).to_json()
        r = self._waiting_redis()
        encoded = time.time()
        pipe = r.pipeline(transaction=False)
        pipe.lpush(REQUESTS_KEY, body)
        pipe.expire(REQUESTS_KEY, max(REQUESTS_TTL_S, int(timeout_s) + 1))
        pipe.execute()
        published = time.time()
        while True:
            remaining = deadline - time.time()
            if remaining <= 0.001:  # BLPOP's 0 would wait for ever
                raise _timeout(name, timeout_s)
            popped = r.blpop([reply_key], timeout=min(remaining, WAIT_SLICE_S))
            if popped is not None:
                break
        received = time.time()
        reply = json.loads(popped[1])
        decoded = time.time()
        stamps = {"started": started, "encoded": encoded, "published": published,
                  "received": received, "decoded": decoded}  # fmt: skip
        _local.trace = _stages(stamps, reply["trace"])
        failed = reply.get("failed")
        if isinstance(failed, dict):
            raise ReadFailed(
                f"{name.value} failed on the store owner: {failed.get('type')}: "
                f"{failed.get('message')}"
            )
        return reply["result"]

    def _ask_celery(self, name: TaskName, kwargs: dict[str, Any], timeout_s: float) -> Any:
        from workers.publish import publish

        started = time.time()
        result = publish(name, app=self._app(), **kwargs)
        published = time.time()
        try:
            answer = result.get(timeout=timeout_s)
        except Exception:
            # Dropped, so that a long-lived client keeps no result subscription per unanswered
            # call.
            with contextlib.suppress(Exception):
                result.forget()
            raise
        received = time.time()
        owner = answer.pop("trace", None) if isinstance(answer, dict) else None
        if isinstance(owner, dict):
            stamps = {"started": started, "encoded": started, "published": published,
                      "received": received, "decoded": received}  # fmt: skip
            _local.trace = _stages(stamps, owner)
        return answer
