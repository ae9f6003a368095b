"""Ports: what the pure pipelines need from the outside world, as Protocols.

Adapters in ``workers/adapters`` implement them (the ``openai`` client, qdrant-client, the
hashing embedder, the offline rules). Nothing in ``pipelines`` imports celery, psycopg,
qdrant_client or openai; a test checks that.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from pipelines.checkpoint import ResumeCalibration, TaskCheckpoint
from pipelines.records import MemoryType


class LLMError(Exception):
    """Base of the errors an LLM adapter raises."""


class TransientLLMError(LLMError):
    """Worth retrying later: a timeout, a rate limit, a 5xx, a dropped connection."""


class MalformedLLMOutput(LLMError):
    """The model answered, but not with JSON that fits the schema."""


class WriteJudgement(BaseModel):
    """A tier-2 or tier-3 answer: keep the memory or not, what it is, how sure."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    keep: bool
    type: MemoryType
    confidence: float = Field(ge=0.0, le=1.0)
    importance: float = Field(0.5, ge=0.0, le=1.0)
    reason: str = Field(min_length=1, max_length=500)


@runtime_checkable
class LLM(Protocol):
    """The cognitive engine. ``name`` says which adapter answered (kept with decisions)."""

    @property
    def name(self) -> str: ...

    def judge_write(self, content: str, type_hint: MemoryType | None) -> WriteJudgement:
        """Tier 2: a fast call. Is this worth keeping, what type, how confident?"""
        ...

    def deep_judge_write(
        self, content: str, type_hint: MemoryType | None, first: WriteJudgement
    ) -> WriteJudgement:
        """Tier 3: a careful second look when tier 2 was unsure."""
        ...

    def summarize(self, content: str, max_words: int) -> str:
        """A short summary that keeps decisions, preferences, state changes, identifiers."""
        ...

    def calibrate_resume(self, checkpoint: TaskCheckpoint, elapsed_s: float) -> ResumeCalibration:
        """Resuming ``checkpoint`` after ``elapsed_s``: which pending actions must be checked
        against the outside world first (``pipelines.checkpoint.offline_calibration``)."""
        ...


@runtime_checkable
class Embedder(Protocol):
    @property
    def version(self) -> str:
        """Model and size, e.g. ``hashing-v1/384``: scores never mix two versions."""
        ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class VectorPoint(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: uuid.UUID
    vector: list[float]
    payload: dict[str, Any]


class VectorHit(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: uuid.UUID
    score: float
    payload: dict[str, Any] = Field(default_factory=dict)


@runtime_checkable
class VectorIndex(Protocol):
    """A narrow vector store: tenant scope is a required argument of every read."""

    def ensure_collection(self, name: str, dim: int) -> None: ...

    def upsert(self, collection: str, points: Sequence[VectorPoint]) -> None: ...

    def delete(self, collection: str, ids: Sequence[uuid.UUID]) -> None: ...

    def count(self, collection: str, tenant_id: str | None = None) -> int: ...

    def search(
        self,
        collection: str,
        vector: Sequence[float],
        *,
        tenant_id: str,
        task_id: str | None = None,
        limit: int = 10,
    ) -> list[VectorHit]: ...

    def close(self) -> None: ...
