"""``recall()``'s answer: the hits, and whether the index they came from was whole.

A list, so every caller that iterates hits keeps working; ``degraded`` says the vector index
was known to miss live rows when the owner answered, so the hits hold PostgreSQL's keyword
matches besides the dense ones (and an empty answer is not a claim that nothing is stored).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class RecallHits(list[dict[str, Any]]):
    """Hits best first, each a dict (id, score, task_id, session_id, timestamp, type,
    content, importance), with ``degraded``."""

    def __init__(self, hits: Iterable[dict[str, Any]] = (), *, degraded: bool = False) -> None:
        super().__init__(hits)
        self.degraded = degraded


def recall_hits(answer: object) -> RecallHits:
    """The owner's JSON answer (``{"hits": [...], "degraded": bool}``; a bare list from an
    owner that predates the flag) as ``RecallHits``."""
    if isinstance(answer, list):
        return RecallHits(answer)
    if isinstance(answer, dict) and isinstance(answer.get("hits"), list):
        return RecallHits(answer["hits"], degraded=bool(answer.get("degraded", False)))
    raise RuntimeError(f"memory.recall.search answered {type(answer).__name__}")
