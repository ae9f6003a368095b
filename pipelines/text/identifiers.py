"""Identifiers in text: numbers, paths, tickets, keys, code names and the names of people,
the things a summary must not lose and a search must match exactly.

Three detectors for three jobs: :func:`count_identifiers` (a quick count, for importance and
focus), :func:`holds_identifiers` (configuration keys and CamelCase too, for eviction) and
:func:`find_identifiers` (the identifiers themselves, for the compression protocol).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pipelines.text.words import (
    STOPWORDS,
    fold,
)

_IDENTIFIER_RE = re.compile(
    r"(?:[\w.-]+/[\w./-]+|\b\w+\.\w{1,5}\b|\b[A-Z]{2,}-\d+\b|\b\d+(?:\.\d+)*\b|"
    r"\b[A-Z_]{3,}\b|`[^`]+`|#\d+)"
)


def count_identifiers(content: str) -> int:
    return len(_IDENTIFIER_RE.findall(content))


# Names (a capitalised word after a lower-case one), configuration keys (snake_case,
# dotted.keys, KEY=value, --flags) and CamelCase, on top of write_filter's paths and numbers.
_NAME_OR_KEY_RE = re.compile(
    r"(?<=[a-z,;:] )[A-Z][a-z]+\b|\b[a-z]+_[a-z0-9_]+\b|\b[a-z]+(?:\.[a-z_]+){2,}\b|"
    r"\b\w+=\S+|(?<!\w)--[a-z][\w-]+|\b[a-z]+[A-Z]\w*\b|\b[A-Z][a-z]+[A-Z]\w*\b"
)


def holds_identifiers(text: str) -> bool:
    """Paths, names, numbers or configuration keys: the things a summary must not lose."""
    return count_identifiers(text) > 0 or _NAME_OR_KEY_RE.search(text) is not None


_IDENTIFIER_SHAPES = re.compile(
    r"^(?:\d[\d.,:/-]*\w*|[\w.-]*[/\\][\w./\\-]+|[A-Za-z]+-\d+|#\d+|\w+_\w+|[A-Za-z]+\d\w*|"
    r"[a-z]+[A-Z]\w*|[A-Z]{2,}\w*|\w+\.\w{1,5}|v\d[\w.]*|`[^`]+`)$"
)
WORD_SPAN_RE = re.compile(r"`[^`]+`|\S+")
EDGE_PUNCT = "\"'“”‘’()[]{}<>,.;:!?…*"


def is_capitalised_name(word: str) -> bool:
    return len(word) > 1 and word[0].isupper() and not word.isupper() and word.isalpha()


def find_identifiers(text: str, exclude: Iterable[str] = (), *, names: bool = True) -> list[str]:
    """Numbers, paths, ids, code names, and capitalised names not at a sentence start.

    ``names=False`` for logs and code, where capitals ("File", "Traceback") are not names.
    """
    skip = {fold(e) for e in exclude}
    found: list[str] = []
    seen: set[str] = set()
    sentence_start = True
    for raw in WORD_SPAN_RE.findall(text):
        word = raw.strip(EDGE_PUNCT) if not raw.startswith("`") else raw
        word = re.sub(r"['’]s$", "", word)
        ends_sentence = raw.rstrip("\"')”’").endswith((".", "!", "?"))
        if word and fold(word) not in skip:
            is_id = bool(_IDENTIFIER_SHAPES.match(word)) and any(c.isalnum() for c in word)
            is_name = (
                names
                and not sentence_start
                and is_capitalised_name(word)
                and fold(word) not in STOPWORDS
                and word not in {"I", "I'm", "I've", "I'd", "I'll"}
            )
            if (is_id or is_name) and fold(word) not in seen:
                seen.add(fold(word))
                found.append(word)
        sentence_start = ends_sentence
    return found
