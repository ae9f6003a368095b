"""The working-memory window of the recent-interactions partition, per task and session.

The last 20 turns verbatim; once more than 25 turns are unsummarised, all but the last 20 are
folded, in chunks of at most 4,000 tokens, into summaries of at most 500 tokens each (the LLM
port's ``summarize``, which keeps decisions, preferences and state changes). Where the turns
and summaries live (the Redis pool) is the caller's business; the window logic is here.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from pipelines.read.tokens import (
    TokenCounter,
    truncate_to_tokens,
)
from pipelines.records import MemoryType

# The window: 20 turns verbatim, summarise past 25, chunks <= 4,000 tokens,
# summaries <= 500 tokens. The 5-turn gap means a summary call every 5 turns, not every turn.
WINDOW_VERBATIM_TURNS = 20
WINDOW_SUMMARISE_AFTER = 25
CHUNK_MAX_TOKENS = 4_000
SUMMARY_MAX_TOKENS = 500
SUMMARY_MIN_TARGET_TOKENS = 100
# English runs about 1.3 DeepSeek tokens a word; ask for fewer words than the token cap and
# check the result with the real counter anyway.
WORDS_PER_TOKEN = 0.7


class Turn(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    speaker: str
    content: str = Field(min_length=1)
    timestamp: datetime
    type: MemoryType | None = None

    def line(self) -> str:
        return f"{self.speaker}: {self.content}"


class TurnSummary(BaseModel):
    model_config = ConfigDict(frozen=True)

    first_turn_id: str
    last_turn_id: str
    turn_count: int = Field(ge=1)
    content: str = Field(min_length=1)
    timestamp: datetime
    tokens: int = Field(ge=0, le=SUMMARY_MAX_TOKENS)

    @property
    def id(self) -> str:
        return f"summary:{self.first_turn_id}..{self.last_turn_id}"


class WindowPlan(BaseModel):
    model_config = ConfigDict(frozen=True)

    summaries: tuple[TurnSummary, ...]
    verbatim: tuple[Turn, ...]
    to_summarise: tuple[tuple[Turn, ...], ...]


class Summarizer(Protocol):
    """What the window (and the write path's summary of a long memory) asks of the LLM port:
    a short summary that keeps decisions, preferences, state changes and identifiers (the
    offline adapter's is extractive)."""

    def summarize(self, content: str, max_words: int) -> str: ...


def chunk_turns(
    turns: Sequence[Turn], counter: TokenCounter, max_tokens: int = CHUNK_MAX_TOKENS
) -> list[tuple[Turn, ...]]:
    """Consecutive runs of turns of at most ``max_tokens`` (a longer turn is a chunk alone
    and is cut when it is summarised)."""
    chunks: list[tuple[Turn, ...]] = []
    current: list[Turn] = []
    size = 0
    for turn in turns:
        tokens = counter.count(turn.line() + "\n")
        if current and size + tokens > max_tokens:
            chunks.append(tuple(current))
            current, size = [], 0
        current.append(turn)
        size += tokens
    if current:
        chunks.append(tuple(current))
    return chunks


def plan_window(
    turns: Sequence[Turn],
    summaries: Sequence[TurnSummary],
    counter: TokenCounter,
    *,
    verbatim_turns: int = WINDOW_VERBATIM_TURNS,
    summarise_after: int = WINDOW_SUMMARISE_AFTER,
    chunk_max_tokens: int = CHUNK_MAX_TOKENS,
) -> WindowPlan:
    """Which turns stay verbatim and which runs must be summarised now.

    ``turns`` are the session's turns in order; ``summaries`` cover a prefix of them (each
    ends at ``last_turn_id``). Turns after the last summary are unsummarised: up to
    ``summarise_after`` of them stay verbatim; past that, all but the last ``verbatim_turns``
    are chunked for summarising.
    """
    if not 0 < verbatim_turns <= summarise_after:
        raise ValueError("need 0 < verbatim_turns <= summarise_after")
    start = 0
    if summaries:
        last = summaries[-1].last_turn_id
        position = next((i for i, t in enumerate(turns) if t.id == last), None)
        start = 0 if position is None else position + 1
    pending = list(turns[start:])
    if len(pending) <= summarise_after:
        return WindowPlan(summaries=tuple(summaries), verbatim=tuple(pending), to_summarise=())
    older, recent = pending[:-verbatim_turns], pending[-verbatim_turns:]
    return WindowPlan(
        summaries=tuple(summaries),
        verbatim=tuple(recent),
        to_summarise=tuple(chunk_turns(older, counter, chunk_max_tokens)),
    )


def summarise_chunk(
    chunk: Sequence[Turn],
    summarizer: Summarizer,
    counter: TokenCounter,
    max_tokens: int = SUMMARY_MAX_TOKENS,
    chunk_max_tokens: int = CHUNK_MAX_TOKENS,
) -> TurnSummary:
    """One summary of at most ``max_tokens`` real tokens for a chunk of turns.

    The summarizer is asked for a word count below the cap; an answer over the cap is asked
    again with fewer words (twice), then cut at a word boundary.
    """
    if not chunk:
        raise ValueError("cannot summarise an empty chunk")
    content = truncate_to_tokens(counter, "\n".join(t.line() for t in chunk), chunk_max_tokens)
    # Aim at a quarter of the chunk (a full 4,000-token chunk gets the whole 500-token cap);
    # a short chunk copied whole into its "summary" would save nothing.
    target = min(max_tokens, max(SUMMARY_MIN_TARGET_TOKENS, counter.count(content) // 4))
    words = max(1, int(target * WORDS_PER_TOKEN))
    summary = ""
    for _ in range(3):
        summary = summarizer.summarize(content, words).strip()
        tokens = counter.count(summary)
        if summary and tokens <= max_tokens:
            break
        words = max(1, int(words * max_tokens / max(tokens, 1) * 0.9))
    summary = truncate_to_tokens(counter, summary, max_tokens) if summary else ""
    if not summary:  # the summarizer gave nothing usable: keep the start of the chunk
        summary = truncate_to_tokens(counter, content, max_tokens) or chunk[0].speaker
    return TurnSummary(
        first_turn_id=chunk[0].id,
        last_turn_id=chunk[-1].id,
        turn_count=len(chunk),
        content=summary,
        timestamp=chunk[-1].timestamp,
        tokens=counter.count(summary),
    )


def advance_window(
    turns: Sequence[Turn],
    summaries: Sequence[TurnSummary],
    summarizer: Summarizer,
    counter: TokenCounter,
) -> WindowPlan:
    """Plan the window and summarise what it says must be; the result has nothing left to
    summarise. The caller stores the new summaries (and may drop the turns they cover)."""
    plan = plan_window(turns, summaries, counter)
    added = [summarise_chunk(chunk, summarizer, counter) for chunk in plan.to_summarise]
    return WindowPlan(summaries=(*plan.summaries, *added), verbatim=plan.verbatim, to_summarise=())
