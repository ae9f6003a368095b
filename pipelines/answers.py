"""What to do with a model's answer: parse its JSON against the schema it was asked for,
and give a malformed answer one retry before the offline rules answer instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from pipelines.errors import MalformedLLMOutput

M = TypeVar("M", bound=BaseModel)


def parse_json(raw: str, model: type[M]) -> M:
    """An LLM's JSON answer as ``model``; any schema error is MalformedLLMOutput."""
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise MalformedLLMOutput(
            f"{model.__name__}: {exc.error_count()} schema error(s): {exc.errors()[0]['msg']}"
        ) from None


T = TypeVar("T")


def ask_with_fallback(
    call: Callable[[], T], fallback: Callable[[], T], llm_name: str
) -> tuple[T, str, int]:
    """One call, one retry on a malformed answer, then the offline rules.

    Returns the answer, who gave it, and how many LLM attempts were malformed. Transient
    errors propagate so that the job is retried with backoff.
    """
    failures = 0
    for _ in range(2):
        try:
            return call(), llm_name, failures
        except MalformedLLMOutput:
            failures += 1
    return fallback(), "offline-fallback", failures
