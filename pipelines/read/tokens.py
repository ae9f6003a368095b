"""Token counting: the port every budget in the read path is measured with.

Budgets are in the model's tokens, counted by a real tokenizer (the adapter in
``workers/adapters/tokenizer.py`` loads DeepSeek-V4's, the default model's). A character
estimate is off by 2-4x on code, CJK and identifiers, which is exactly the content that
overflows a partition. Only ``count`` is required of an adapter; truncation is built on it
here so that any counter can cut a text at a word boundary.

A counter may also declare ``additive_after_newline``: for every text A that ends in "
"
and every text B whose first character is not whitespace (``str.isspace``),
``count(A + B) == count(A) + count(B)``. Assembly renders every line with its newline and
every line starts with a non-space character, so with such a counter the sum of the line
counts (cached) is the exact count of a partition and of the whole, and the rendered text
need not be encoded again. An adapter declares it only when the tokenizer's structure proves
it (see ``workers/adapters/tokenizer.py``); a counter that says nothing is taken not to have
it, since a BPE whose pieces may span the join merges across it.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from pipelines.text.memo import MEMO_MAX_CHARS

TRUNCATION_MARK = " …"

_BOUNDARY_RE = re.compile(r"\s+")


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens as the model sees them. ``name`` says which tokenizer (kept in stats)."""

    @property
    def name(self) -> str: ...

    def count(self, text: str) -> int: ...


class CachedCounter:
    """A bounded LRU in front of a counter: assembly recounts the same memories every step.
    Only texts of at most ``max_text_chars`` are kept (``pipelines.text.MEMO_MAX_CHARS``),
    so the cache holds at most ``max_entries`` times that much text."""

    def __init__(
        self, inner: TokenCounter, max_entries: int = 20_000, max_text_chars: int = MEMO_MAX_CHARS
    ) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        self._inner = inner
        self._max = max_entries
        self._max_text_chars = max_text_chars
        self._cache: OrderedDict[str, int] = OrderedDict()

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def additive_after_newline(self) -> bool:
        """The inner counter's: a cache changes no count."""
        return is_additive_after_newline(self._inner)

    def count(self, text: str) -> int:
        cached = self._cache.get(text)
        if cached is not None:
            self._cache.move_to_end(text)
            return cached
        value = self._inner.count(text)
        self._store(text, value)
        return value

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """``count`` of each text; the ones not cached go to the inner counter in one batch
        (``count_many``) when it has one."""
        known: dict[str, int] = {}
        for text in texts:
            cached = self._cache.get(text)
            if cached is not None:
                self._cache.move_to_end(text)
                known[text] = cached
        missing = [text for text in dict.fromkeys(texts) if text not in known]
        if missing:
            for text, value in zip(missing, count_many(self._inner, missing), strict=True):
                known[text] = value
                self._store(text, value)
        return [known[text] for text in texts]

    def _store(self, text: str, value: int) -> None:
        if len(text) > self._max_text_chars:
            return
        self._cache[text] = value
        if len(self._cache) > self._max:
            self._cache.popitem(last=False)


def is_additive_after_newline(counter: TokenCounter) -> bool:
    """Whether ``counter`` declares that counts add across a cut after a newline (see the
    module's docstring). Not part of the ``TokenCounter`` protocol, so that a counter written
    without it still is one; such a counter is taken not to be additive."""
    return getattr(counter, "additive_after_newline", False) is True


def starts_non_space(text: str) -> bool:
    """Whether ``text`` may be the right-hand side of an additive cut: it has a first
    character and that character is not whitespace. ``str.isspace`` is the stricter side:
    it also holds for U+001C..U+001F, which the tokenizer's regex engine does not count as
    spaces, so a text that passes starts with no space in either sense."""
    return bool(text) and not text[0].isspace()


def count_many(counter: TokenCounter, texts: Sequence[str]) -> list[int]:
    """The count of each text, in one call when the counter has ``count_many`` (a tokenizer
    that encodes a batch on several threads), else one ``count`` at a time."""
    many = getattr(counter, "count_many", None)
    if many is None:
        return [counter.count(text) for text in texts]
    counts = list(many(texts))
    if len(counts) != len(texts):
        raise ValueError(f"count_many returned {len(counts)} counts for {len(texts)} texts")
    return [int(value) for value in counts]


def count_lines(counter: TokenCounter, lines: list[str]) -> int:
    """Tokens of ``lines`` joined by newlines, counted line by line (each with its newline).

    Each line is counted (and cached) on its own, so a partition can be refilled without
    recounting its whole text. The sum is the exact count of the joined text only when the
    counter is ``additive_after_newline`` and every line starts with a non-space character;
    otherwise ``assemble`` counts the rendered text as a whole, because BPE may merge across
    the joins.
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
