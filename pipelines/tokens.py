"""Token counting: the port every budget in the read path is measured with.

Budgets are in the model's tokens, counted by a real tokenizer (the adapter in
``workers/adapters/tokenizer.py`` loads DeepSeek-V4's, the default model's). A character
estimate is off by 2-4x on code, CJK and identifiers, which is exactly the content that
overflows a partition. Only ``count`` is required of an adapter; truncation is built on it
here so that any counter can cut a text at a word boundary.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import Protocol, runtime_checkable

TRUNCATION_MARK = " …"

_BOUNDARY_RE = re.compile(r"\s+")


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens as the model sees them. ``name`` says which tokenizer (kept in stats)."""

    @property
    def name(self) -> str: ...

    def count(self, text: str) -> int: ...


class CachedCounter:
    """A bounded LRU in front of a counter: assembly recounts the same memories every step."""

    def __init__(self, inner: TokenCounter, max_entries: int = 20_000) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        self._inner = inner
        self._max = max_entries
        self._cache: OrderedDict[str, int] = OrderedDict()

    @property
    def name(self) -> str:
        return self._inner.name

    def count(self, text: str) -> int:
        cached = self._cache.get(text)
        if cached is not None:
            self._cache.move_to_end(text)
            return cached
        value = self._inner.count(text)
        self._cache[text] = value
        if len(self._cache) > self._max:
            self._cache.popitem(last=False)
        return value


def count_lines(counter: TokenCounter, lines: list[str]) -> int:
    """Tokens of ``lines`` joined by newlines, counted line by line (each with its newline).

    Additive, so a partition can be refilled without recounting its whole text; the final
    render is still counted as a whole (see ``assemble``) because BPE merges across joins.
    """
    return sum(counter.count(line + "\n") for line in lines)


def truncate_to_tokens(counter: TokenCounter, text: str, max_tokens: int) -> str:
    """The longest prefix of ``text`` that fits in ``max_tokens`` together with the mark.

    Cut at whitespace when a word boundary fits, otherwise at a character (CJK text has no
    spaces). Binary search: O(log n) counts. Returns "" when nothing fits.
    """
    if max_tokens < 0:
        raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
    if counter.count(text) <= max_tokens:
        return text
    words = [match.start() for match in _BOUNDARY_RE.finditer(text) if match.start() > 0]
    best = _longest_prefix(counter, text, words, max_tokens)
    if not best:
        best = _longest_prefix(counter, text, list(range(1, len(text))), max_tokens)
    return best


def _longest_prefix(counter: TokenCounter, text: str, cuts: list[int], max_tokens: int) -> str:
    low, high, best = 0, len(cuts) - 1, ""
    while low <= high:
        middle = (low + high) // 2
        prefix = text[: cuts[middle]].rstrip()
        candidate = prefix + TRUNCATION_MARK
        if prefix and counter.count(candidate) <= max_tokens:
            best, low = candidate, middle + 1
        else:
            high = middle - 1
    return best
