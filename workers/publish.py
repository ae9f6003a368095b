"""``publish``: the one way a task is sent. The name says the queue; kwargs are JSON."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from workers.queues import TaskName

if TYPE_CHECKING:
    from celery import Celery
    from celery.result import AsyncResult

log = logging.getLogger(__name__)


def publish(
    name: TaskName,
    *,
    app: Celery | None = None,
    countdown: float | None = None,
    **kwargs: Any,
) -> AsyncResult[Any]:
    """Send ``name`` with ``kwargs`` to its queue through ``app`` (default: this process's)."""
    if app is None:
        from workers.app import get_app

        app = get_app()
    return app.send_task(name.value, kwargs=kwargs, queue=name.queue.value, countdown=countdown)


def publish_quietly(name: TaskName, **kwargs: Any) -> bool:
    """Publish after COMMIT, best effort: a lost message is covered by the next sweep, check
    or relay, so a broker hiccup is logged and never undoes work already committed."""
    try:
        publish(name, **kwargs)
    except Exception:
        log.warning("could not publish %s; the next sweep or relay covers it", name, exc_info=True)
        return False
    return True
