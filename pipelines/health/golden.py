"""Golden queries: questions whose right answer is known, asked on a schedule to see whether
retrieval still finds it.

A tenant's user sets them (a query and the memory it must find), or they are drawn from the
tenant's stored memories: a memory's own most distinctive run of words is the query and the
memory itself the expected hit. A broken index, stale embeddings or a bad rewrite make those
misses first.
"""

from __future__ import annotations

import math
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from pipelines.errors import InvalidInput
from pipelines.health.signals import percentile
from pipelines.records import ID_NAMESPACE, check_id
from pipelines.text.analyzer import analyze

# A query of 6-10 words reads like a question an agent asks and is specific enough to have
# one right answer among thousands of memories.
WINDOW_WORDS = 8
MIN_DISTINCT_TERMS = 4
QUERY_MAX_CHARS = 1000
MAX_GOLDEN_PER_TENANT = 1000


@dataclass(frozen=True)
class GoldenQuery:
    query: str
    expected_id: str
    source: str  # "user" or "drawn"

    @property
    def id(self) -> uuid.UUID:
        """Deterministic: setting the same query twice keeps one row."""
        return uuid.uuid5(ID_NAMESPACE, f"golden\x1f{self.expected_id}\x1f{self.query}")


def check_golden_query(query: object, expected_id: object, index: int | None = None) -> GoldenQuery:
    """A user's golden query, checked; raises InvalidInput naming the field and the limit."""
    prefix = f"queries[{index}]." if index is not None else ""
    if not isinstance(query, str) or not query.strip():
        raise InvalidInput(f"{prefix}query", "must be a non-empty string")
    if len(query) > QUERY_MAX_CHARS:
        raise InvalidInput(
            f"{prefix}query", f"is {len(query)} characters long", f"{QUERY_MAX_CHARS} characters"
        )
    if not isinstance(expected_id, str | uuid.UUID):
        raise InvalidInput(f"{prefix}expected_id", "must be a memory id (a UUID)")
    try:
        memory_id = str(uuid.UUID(str(expected_id)))
    except ValueError:
        raise InvalidInput(f"{prefix}expected_id", "must be a memory id (a UUID)") from None
    return GoldenQuery(" ".join(query.split()), memory_id, "user")


def check_golden_set(tenant_id: str, items: Sequence[object]) -> list[GoldenQuery]:
    """The whole list a user sets: each item is ``{"query": ..., "expected_id": ...}`` or
    a (query, expected_id) pair; at most MAX_GOLDEN_PER_TENANT."""
    check_id("tenant_id", tenant_id)
    if len(items) > MAX_GOLDEN_PER_TENANT:
        raise InvalidInput("queries", f"has {len(items)} items", str(MAX_GOLDEN_PER_TENANT))
    out = []
    for index, item in enumerate(items):
        if isinstance(item, dict):
            out.append(check_golden_query(item.get("query"), item.get("expected_id"), index))
        elif isinstance(item, tuple | list) and len(item) == 2:
            out.append(check_golden_query(item[0], item[1], index))
        else:
            raise InvalidInput(f"queries[{index}]", "must be {query, expected_id} or a pair")
    return out


def distinctive_phrase(
    content: str, document_frequency: Counter[str], documents: int, window: int = WINDOW_WORDS
) -> tuple[str, float] | None:
    """The run of ``window`` words of ``content`` whose terms are rarest among the tenant's
    memories (summed idf), with its score; None when no run has enough distinct terms."""
    words = content.split()
    if not words:
        return None
    best: tuple[str, float] | None = None
    for start in range(max(1, len(words) - window + 1)):
        text = " ".join(words[start : start + window])
        terms = set(analyze(text))
        if len(terms) < MIN_DISTINCT_TERMS:
            continue
        score = sum(math.log((1 + documents) / (1 + document_frequency[t])) for t in terms)
        if best is None or score > best[1]:
            best = (text, score)
    return best


def draw_golden_queries(memories: Sequence[tuple[str, str]], count: int) -> list[GoldenQuery]:
    """Up to ``count`` golden queries from (memory id, content) pairs: the memories with the
    most distinctive phrasing, each asked with that phrasing. Deterministic for the same
    input; two memories with the same phrase give one query (its answer would be ambiguous)."""
    frequency: Counter[str] = Counter()
    for _, content in memories:
        frequency.update(set(analyze(content)))
    scored: list[tuple[float, str, str]] = []
    for memory_id, content in memories:
        phrase = distinctive_phrase(content, frequency, len(memories))
        if phrase is not None:
            scored.append((phrase[1], memory_id, phrase[0]))
    scored.sort(key=lambda s: (-s[0], s[1]))
    chosen: list[GoldenQuery] = []
    seen: set[str] = set()
    for _, memory_id, text in scored:
        key = text.lower()
        if key in seen:
            continue
        seen.add(key)
        chosen.append(GoldenQuery(text, memory_id, "drawn"))
        if len(chosen) >= count:
            break
    return chosen


@dataclass(frozen=True)
class GoldenOutcome:
    """One query's answer: did the expected memory come back in the top K, how fast."""

    expected_id: str
    hit: bool
    rank: int | None
    seconds: float


@dataclass(frozen=True)
class GoldenSummary:
    queries: int
    hits: int
    hit_ratio: float | None
    p50_s: float | None
    p95_s: float | None
    mrr: float | None

    @property
    def outcome(self) -> str:
        return "empty" if self.hit_ratio is None else "ran"


def judge(expected_id: str, returned_ids: Sequence[str], seconds: float) -> GoldenOutcome:
    rank = next((i + 1 for i, got in enumerate(returned_ids) if got == expected_id), None)
    return GoldenOutcome(expected_id, rank is not None, rank, seconds)


def summarise(outcomes: Sequence[GoldenOutcome]) -> GoldenSummary:
    if not outcomes:
        return GoldenSummary(0, 0, None, None, None, None)
    hits = sum(o.hit for o in outcomes)
    latencies = [o.seconds for o in outcomes]
    return GoldenSummary(
        queries=len(outcomes),
        hits=hits,
        hit_ratio=hits / len(outcomes),
        p50_s=percentile(latencies, 0.5),
        p95_s=percentile(latencies, 0.95),
        mrr=sum(1 / o.rank for o in outcomes if o.rank) / len(outcomes),
    )
