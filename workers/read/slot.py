"""The store owner's read slot: the ``recall`` queue served on a thread of its own.

In embedded mode one process owns the vector store and its Celery slot runs the write
path's drains, link passes, index rebuilds and re-embeds one at a time. A ``context()``
queued on that slot would wait for all of them (a rebuild of 100k memories builds its HNSW
graph for minutes). So the owner's Celery consumer leaves ``recall`` alone and this thread
consumes it instead, with a broker connection of its own, in the process that holds the
store: reads and the slot's work run side by side on the same clients.

What makes that safe: the engine's calls are serialised by the GIL (qdrant-edge-py holds it
for each search, upsert and optimize; tests/workers/adapters/test_edge_concurrency.py
hammers a store from several threads), a rebuild builds its new generation's graph in a child
process (``EdgeIndex.build_index``) so the GIL is never held for a whole build, and a
search holds the shard it reads open until it returns (the alias switch cannot close it).
The psycopg pool and the Redis client are thread-safe; ``Clients`` builds each client once
under a lock.

Each message runs through Celery's own tracer (``celery.app.trace``): the same result
storage, signals and task events as on the slot, and late acknowledgement (a message is acked after
its task ran; a process that dies first leaves it unacked for the broker to redeliver).
A message that is not JSON is rejected without running, as the Celery consumer does.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from celery import states
from kombu.exceptions import ContentDisallowed, DecodeError

from workers.queues import CeleryQueue

if TYPE_CHECKING:
    from celery import Celery
    from kombu import Connection
    from kombu.message import Message

log = logging.getLogger(__name__)

# How long one wait for a message lasts before the thread looks at its stop flag: a stop
# (worker shutdown) is seen within this; a message arriving meanwhile is served at once.
POLL_S = 0.5
# Pause before reconnecting after the broker went away (then doubled up to the maximum).
RECONNECT_S = 0.5
RECONNECT_MAX_S = 10.0


class ServingThread(threading.Thread):
    """A thread of the owner's that answers reads: what a read defers (``after_reply``) runs
    once its answer is on its way."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self._stopping = threading.Event()
        self.ready = threading.Event()
        self.served = 0
        self._after_reply: list[Callable[[], None]] = []

    def defer(self, fn: Callable[[], None]) -> None:
        self._after_reply.append(fn)

    def _drop_deferred(self) -> None:
        self._after_reply = []

    def _run_deferred(self) -> None:
        pending, self._after_reply = self._after_reply, []
        for fn in pending:
            try:
                fn()
            except Exception:  # best effort by contract (an access bump): logged, never raised
                log.warning("work deferred after a reply failed", exc_info=True)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Finish the read in hand (a slot's message is acked), then stop serving."""
        self._stopping.set()
        if self.is_alive():
            self.join(timeout_s)


class ReadSlot(ServingThread):
    """Consumes ``queue`` and runs its tasks on this thread, one at a time."""

    def __init__(self, app: Celery, hostname: str, queue: CeleryQueue = CeleryQueue.RECALL) -> None:
        super().__init__(name=f"memharness-read-slot-{queue.value}")
        self._app = app
        self._hostname = hostname
        self._queue = queue

    def run(self) -> None:
        backoff = RECONNECT_S
        while not self._stopping.is_set():
            try:
                with self._app.connection_for_read() as conn:
                    conn.ensure_connection(max_retries=1)
                    backoff = RECONNECT_S
                    self._serve(conn)
            except Exception as exc:  # the broker went away: reconnect, never die
                if self._stopping.is_set():
                    break
                log.warning("read slot lost its broker connection (%s); retrying", exc)
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, RECONNECT_MAX_S)

    def _serve(self, conn: Connection) -> None:
        queue = self._app.amqp.queues[self._queue.value]
        events_conn = conn.clone()
        events = self._app.events.Dispatcher(
            events_conn,
            hostname=self._hostname,
            enabled=bool(self._app.conf.worker_send_task_events),
        )
        errors = conn.connection_errors + conn.channel_errors
        try:
            with conn.Consumer(
                queue,
                accept=list(self._app.conf.accept_content),
                on_message=lambda message: self._handle(message, events, errors),
                prefetch_count=1,
            ):
                self.ready.set()
                while not self._stopping.is_set():
                    try:
                        conn.drain_events(timeout=POLL_S)
                    except TimeoutError:
                        continue
        finally:
            events.close()
            events_conn.release()

    def _handle(
        self, message: Message, events: Any, errors: tuple[type[BaseException], ...]
    ) -> None:
        from celery.app.trace import trace_task

        headers = message.headers or {}
        task = self._app.tasks.get(str(headers.get("task")))
        try:
            if task is None or "id" not in headers:
                raise KeyError(f"not a known task message: {headers.get('task')!r}")
            args, kwargs, embed = message.decode()
        except (ContentDisallowed, DecodeError, KeyError, TypeError, ValueError) as exc:
            # The Celery consumer's rule: a body in a refused format (pickle) or a message
            # that is no task of this app is dropped, never run.
            log.error("read slot refused a message on %s: %s", self._queue.value, exc)
            message.reject_log_error(log, errors, requeue=False)
            return
        received = time.time()
        task_id = str(headers["id"])
        request: dict[str, Any] = dict(headers)
        request.update(embed or {}, is_eager=False, hostname=self._hostname)
        request["delivery_info"] = message.delivery_info
        # Acked after the task ran (acks_late): a process that dies in between leaves the
        # message with the broker. A task's failure is stored as its result, as on the slot.
        _, info, runtime, _ = trace_task(
            task, task_id, args, kwargs, request,
            hostname=self._hostname, loader=self._app.loader, app=self._app,
        )  # fmt: skip
        message.ack_log_error(log, errors)
        self._run_deferred()
        self.served += 1
        # Flower's events, after the answer (three Redis round trips the caller would wait
        # for), each with the time it happened.
        events.send("task-received", uuid=task_id, name=task.name, args=repr(args),
                    kwargs=repr(kwargs), retries=0, eta=None, expires=None,
                    timestamp=received)  # fmt: skip
        events.send("task-started", uuid=task_id, timestamp=received)
        if info is None:
            events.send("task-succeeded", uuid=task_id, runtime=runtime)
        elif info.state == states.RETRY:
            events.send("task-retried", uuid=task_id, exception=repr(info.retval))
        else:
            events.send("task-failed", uuid=task_id, exception=repr(info.retval))


def after_reply(fn: Callable[[], None]) -> None:
    """Run ``fn`` once the task in hand has sent its answer (on a read slot or the reply
    slot), else now.

    For what the caller does not wait for (an access bump): the answer goes first."""
    thread = threading.current_thread()
    if isinstance(thread, ServingThread):
        thread.defer(fn)
    else:
        fn()


_slot: ReadSlot | None = None
_slot_lock = threading.Lock()


def start_read_slot(app: Celery, hostname: str) -> ReadSlot:
    """Start this process's read slot (once)."""
    global _slot
    with _slot_lock:
        if _slot is None or not _slot.is_alive():
            _slot = ReadSlot(app, hostname)
            _slot.start()
        return _slot


def stop_read_slot() -> None:
    global _slot
    with _slot_lock:
        slot, _slot = _slot, None
    if slot is not None:
        slot.stop()
