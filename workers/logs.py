"""The workers' log never holds what a task returned, unless it is only counts.

Celery logs every success at INFO as ``Task <name>[<id>] succeeded in <s>s: <return
value>``; a recall answers memories and a context() answers their text, so each read wrote
memory content to the worker log, where a forgotten memory stayed. Celery has no setting for
this, so a filter on its tracer's logger rewrites the value before any handler formats it:
numbers, booleans and None, alone or in a flat object of them (a drain's report), are kept;
anything else is logged as its shape (``<not logged: list of 5>``).
"""

from __future__ import annotations

import ast
import logging
from collections.abc import Mapping
from typing import Any

# The logger of ``celery.app.trace``, which writes the success line.
TRACE_LOGGER = "celery.app.trace"
_SCALARS = (int, float, bool, type(None))


def loggable_result(text: object) -> str:
    """``text`` (Celery's repr of a return value) if it holds only counts, else its shape."""
    if not isinstance(text, str):
        return "<not logged>"
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return "<not logged>"  # a repr cut short at resultrepr_maxsize, or not a literal
    if isinstance(value, _SCALARS):
        return text
    if isinstance(value, dict) and all(
        isinstance(k, str) and k.isidentifier() and isinstance(v, _SCALARS)
        for k, v in value.items()
    ):
        return text
    size = f" of {len(value)}" if isinstance(value, list | tuple | dict | str) else ""
    return f"<not logged: {type(value).__name__}{size}>"


class HideTaskResults(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, Mapping) and "return_value" in args:
            shown = loggable_result(args["return_value"])
            record.args = {**args, "return_value": shown}
            data: Any = getattr(record, "data", None)
            if isinstance(data, Mapping) and "return_value" in data:
                record.data = {**data, "return_value": shown}
        return True


def hide_task_results() -> None:
    """Add the filter to Celery's tracer logger once per process (``create_app`` calls it)."""
    logger = logging.getLogger(TRACE_LOGGER)
    if not any(isinstance(f, HideTaskResults) for f in logger.filters):
        logger.addFilter(HideTaskResults())
