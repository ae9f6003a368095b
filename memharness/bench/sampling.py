"""A deterministic sample of a labeled set: ``bench cognition --limit N --seed S``.

A model on a shared CPU answers a call in seconds, so a whole labeled set can take an hour;
a sample keeps the rules and the model on the same items in the same run. At most ``limit``
items per language, drawn with ``random.Random(seed)`` from each language's items in file
order and returned in file order, so one (limit, seed) always names the same items.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Sample:
    limit: int
    seed: int = 0

    def __post_init__(self) -> None:
        if self.limit < 1:
            raise ValueError(f"limit: at least 1 item per language, got {self.limit}")

    def as_dict(self) -> dict[str, int]:
        return {"limit_per_language": self.limit, "seed": self.seed}


def take(items: Sequence[T], sample: Sample | None, lang: Callable[[T], str]) -> list[T]:
    """``items`` whole (no sample), or at most ``sample.limit`` of each language."""
    if sample is None:
        return list(items)
    by_lang: dict[str, list[int]] = {}
    for position, item in enumerate(items):
        by_lang.setdefault(lang(item), []).append(position)
    rng = random.Random(sample.seed)
    chosen: set[int] = set()
    for language in sorted(by_lang):
        positions = by_lang[language]
        chosen.update(rng.sample(positions, min(sample.limit, len(positions))))
    return [item for position, item in enumerate(items) if position in chosen]
