"""The store owner's reply slot: direct reads (``workers.read.ask``) served on a thread of
their own, in the process that holds the store, beside the Celery read slot.

It BRPOPs the request list (first in, first served), runs the read's task body in this
process (the same ``memory.recall.*`` function the ``recall`` queue runs, with its metrics,
without Celery's tracer or result backend) and LPUSHes the JSON answer onto the caller's reply
key with an expiry, in one round trip. What the read deferred (an access bump) runs after.

A request whose deadline has passed when it is picked up is dropped, never answered late: its
caller has already raised its timeout. One whose answer is ready only after the deadline is
dropped too, its access bump with it (the caller never saw that context). A request that is
not one (not JSON, an unknown task, a reply key of another shape) is refused and logged;
nothing is written anywhere for it. Safe beside the read slot for the reasons given in
``workers.read.slot``: the engine's calls are serialised by the GIL, the clients are shared
thread-safe.

A request popped by an owner that dies before answering is lost with it; its caller times
out as it would waiting for a dead owner, and may ask again (a read changes nothing).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

import redis

from workers.read.slot import ServingThread
from workers.read.wire import REPLY_TTL_S, REQUESTS_KEY, DirectRequest, encode, reply_json
from workers.tasking import METRICS_KEY

if TYPE_CHECKING:
    from celery import Celery

log = logging.getLogger(__name__)

# How long one BRPOP waits before the thread looks at its stop flag (as the read slot's poll).
POLL_S = 0.5
# Above the poll: a BRPOP that outlives this means the connection died without a word.
SOCKET_TIMEOUT_S = POLL_S + 5.0
RECONNECT_S = 0.5
RECONNECT_MAX_S = 10.0
# A failure's message as much as a caller needs to read; the owner's log has the traceback.
FAILURE_MESSAGE_CHARS = 2000


class ReplySlot(ServingThread):
    """Serves the direct read requests of ``redis_url`` with ``app``'s task bodies."""

    def __init__(self, app: Celery, redis_url: str) -> None:
        super().__init__(name="memharness-reply-slot")
        self._app = app
        self._redis = redis.Redis.from_url(
            redis_url, socket_timeout=SOCKET_TIMEOUT_S, socket_connect_timeout=SOCKET_TIMEOUT_S
        )
        self.dropped = 0
        self.refused = 0

    def run(self) -> None:
        backoff = RECONNECT_S
        try:
            while not self._stopping.is_set():
                try:
                    item = self._redis.brpop([REQUESTS_KEY], timeout=POLL_S)
                    self.ready.set()
                    backoff = RECONNECT_S
                    if item is not None:
                        self._serve(item[1])
                except redis.RedisError as exc:  # Redis went away: reconnect, never die
                    if self._stopping.is_set():
                        break
                    log.warning("reply slot lost Redis (%s); retrying", exc)
                    self._stopping.wait(backoff)
                    backoff = min(backoff * 2, RECONNECT_MAX_S)
        finally:
            self._redis.close()

    def _serve(self, raw: bytes | str) -> None:
        picked = time.time()
        try:
            request = DirectRequest.from_json(raw)
        except ValueError as exc:
            self.refused += 1
            log.error("reply slot refused a request: %s", exc)
            return
        if picked > request.deadline:
            self._drop(request, "picked up", picked)
            return
        task = self._app.tasks[request.task]
        body: dict[str, Any]
        try:
            result = task.run(**request.kwargs)
            if isinstance(result, dict):
                result.pop("trace", None)  # the recall queue's stamps; this reply has its own
            body = {"result": result}
        except Exception as exc:  # the caller gets the failure at once, not a timeout
            log.exception("direct read %s failed", request.task)
            body = {"failed": {"type": type(exc).__name__,
                               "message": str(exc)[:FAILURE_MESSAGE_CHARS]}}  # fmt: skip
        answered = time.time()
        if answered > request.deadline:
            self._drop_deferred()
            self._drop(request, "answered", answered)
            return
        encoded = encode(body)
        trace = {"picked": picked, "answered": answered, "sent": time.time()}
        pipe = self._redis.pipeline(transaction=False)
        pipe.lpush(request.reply, reply_json(trace, encoded))
        pipe.expire(request.reply, REPLY_TTL_S)
        pipe.execute()
        self.served += 1
        self._run_deferred()

    def _drop(self, request: DirectRequest, when: str, at: float) -> None:
        self.dropped += 1
        log.warning(
            "dropped a %s request: %s %.3f s after its caller's deadline",
            request.task,
            when,
            at - request.deadline,
        )
        try:
            self._redis.hincrby(METRICS_KEY.format(name=request.task), "expired", 1)
        except redis.RedisError:
            log.warning("expired read of %s not counted: Redis unavailable", request.task)


_slot: ReplySlot | None = None
_slot_lock = threading.Lock()


def start_reply_slot(app: Celery, redis_url: str) -> ReplySlot:
    """Start this process's reply slot (once)."""
    global _slot
    with _slot_lock:
        if _slot is None or not _slot.is_alive():
            _slot = ReplySlot(app, redis_url)
            _slot.start()
        return _slot


def stop_reply_slot() -> None:
    global _slot
    with _slot_lock:
        slot, _slot = _slot, None
    if slot is not None:
        slot.stop()
