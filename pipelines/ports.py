"""Ports: what the pure pipelines need from the outside world, as Protocols.

Each pipeline declares the narrow protocol it calls (``WriteLLM``, ``FocusLLM``,
``CompressionLLM``, ...), next to the records it exchanges; :class:`LLM` is their composition,
the whole cognitive engine an adapter implements. The vector index and the embedder are the
index's ports (``pipelines.index.vectors``), the token counter the read path's
(``pipelines.read.tokens``); they are named here too, so that one import gives a worker every
port it binds.

Adapters in ``workers/adapters`` implement them (the ``openai`` client, qdrant-edge,
qdrant-client, the hashing embedder, the offline rules). Nothing in ``pipelines`` imports
celery, psycopg, qdrant_client or openai, and no pipeline imports this module; tests check
both.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from pipelines.cognition.causal import CausalProposer
from pipelines.cognition.knowledge import KnowledgeExtractor
from pipelines.cognition.protocol import CompressionLLM
from pipelines.index.vectors import Embedder, VectorIndex
from pipelines.own.contradict import CorrectionLLM
from pipelines.read.focus import FocusLLM
from pipelines.read.rerank import RerankLLM
from pipelines.read.rewrite import RewriteLLM
from pipelines.read.tokens import TokenCounter
from pipelines.read.window import Summarizer
from pipelines.state.calibration import CalibrationLLM
from pipelines.write.decide import WriteLLM

__all__ = ["LLM", "Embedder", "TokenCounter", "VectorIndex"]


@runtime_checkable
class LLM(
    WriteLLM,
    Summarizer,
    CalibrationLLM,
    FocusLLM,
    RewriteLLM,
    RerankLLM,
    CompressionLLM,
    KnowledgeExtractor,
    CausalProposer,
    CorrectionLLM,
    Protocol,
):
    """The cognitive engine: every call a pipeline makes of a model. ``name`` says which
    adapter answered (kept with decisions and summaries)."""
