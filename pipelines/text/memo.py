"""Memos of pure functions of a text, bounded by the text's length."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache, wraps
from typing import Concatenate, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

# The longest text a per-text memo keeps. A stored memory may hold 64 KiB: a memo of 16k of
# those could grow past a gigabyte. Longer texts are rare and simply computed each time.
MEMO_MAX_CHARS = 4_096


def memo_texts(
    maxsize: int, max_chars: int = MEMO_MAX_CHARS
) -> Callable[[Callable[Concatenate[str, P], T]], Callable[Concatenate[str, P], T]]:
    """``lru_cache`` for a pure function of a text (its first argument) that keeps only
    texts of at most ``max_chars`` characters, so the memo holds at most ``maxsize`` times
    that much text."""

    def decorate(fn: Callable[Concatenate[str, P], T]) -> Callable[Concatenate[str, P], T]:
        cached = lru_cache(maxsize=maxsize)(fn)

        @wraps(fn)
        def call(text: str, /, *args: P.args, **kwargs: P.kwargs) -> T:
            if len(text) <= max_chars:
                return cached(text, *args, **kwargs)  # type: ignore[arg-type]
            return fn(text, *args, **kwargs)

        return call

    return decorate
