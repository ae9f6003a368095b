"""The offline LLM adapter: deterministic rules, no network, no key.

It implements the same port as the OpenAI-compatible adapter, so every pipeline runs (and is
tested) without a model; its answers are the rule-based ones in ``pipelines``. It spends no
tokens and records nothing in the token ledger (``workers.ledger``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pipelines.read.config import DEFAULT_CONFIG
from pipelines.read.focus import FocusDirective, offline_focus
from pipelines.read.recall import MemoryView
from pipelines.read.rerank import RerankItem, keyword_coverage, kind_match
from pipelines.read.rewrite import QueryVariants, offline_rewrite
from pipelines.records import MemoryType, TaskPhase
from pipelines.state.calibration import ResumeCalibration, offline_calibration
from pipelines.state.models import TaskCheckpoint
from pipelines.text.analyzer import analyze
from pipelines.text.identifiers import holds_identifiers
from pipelines.write.decide import WriteJudgement, offline_deep_judge, offline_judge
from pipelines.write.summary import extractive_summary

if TYPE_CHECKING:  # background cognition's records
    from pipelines.cognition.causal import CausalBatch
    from pipelines.cognition.knowledge import KnowledgeBatch
    from pipelines.cognition.protocol import (
        AnnotateRequest,
        AnnotationBatch,
        CompressRequest,
        SummaryOutput,
    )
    from pipelines.own.contradict import CorrectionAnswer, CorrectionRequest
    from pipelines.records import EpisodicMemory


class OfflineLLM:
    @property
    def name(self) -> str:
        return "offline"

    def billed_to(self, tenant_id: str) -> OfflineLLM:
        """Itself: the rules cost nothing to bill."""
        return self

    def judge_write(self, content: str, type_hint: MemoryType | None) -> WriteJudgement:
        return offline_judge(content, type_hint)

    def deep_judge_write(
        self, content: str, type_hint: MemoryType | None, first: WriteJudgement
    ) -> WriteJudgement:
        return offline_deep_judge(content, type_hint, first)

    def summarize(self, content: str, max_words: int) -> str:
        return extractive_summary(content, max_words)

    def calibrate_resume(self, checkpoint: TaskCheckpoint, elapsed_s: float) -> ResumeCalibration:
        return offline_calibration(checkpoint, elapsed_s)

    # -- the read path -------------------------------------------------------------------

    def focus_directive(
        self, query: str, phase: TaskPhase | None, hint: str | None
    ) -> FocusDirective:
        return offline_focus(query, phase, hint)

    def rewrite_query(self, query: str, phase: str | None, focus: Sequence[str]) -> QueryVariants:
        return offline_rewrite(query)

    def rerank(
        self,
        query: str,
        items: Sequence[RerankItem],
        *,
        phase: TaskPhase | None,
        focus: FocusDirective,
    ) -> list[float]:
        """The offline reranker's kind match alone: Σ weight·match over the focus's kinds,
        in [0, 1] (``pipelines.retrieve.offline_rerank`` adds it to the local score)."""
        variants = offline_rewrite(query)
        query_terms = [term for word in variants.keywords for term in analyze(word)]
        coverage = keyword_coverage(query_terms, [set(analyze(item.content)) for item in items])
        identifiers = [e for e in variants.entities if holds_identifiers(e) and not e.istitle()]
        now = max((item.timestamp for item in items), default=None)
        scores = []
        for index, item in enumerate(items):
            memory = MemoryView(
                id=item.id, content=item.content, timestamp=item.timestamp, type=item.type
            )
            match = sum(
                kind.weight
                * kind_match(
                    kind.kind,
                    memory,
                    coverage=coverage[index],
                    query_identifiers=identifiers,
                    now=now or item.timestamp,
                    recency_scale_hours=DEFAULT_CONFIG.recency_scale_hours,
                )
                for kind in focus.kinds
            )
            scores.append(min(1.0, max(0.0, match)))
        return scores

    # -- background cognition: the rules of pipelines.compress, .consolidate and .link -------

    def annotate_segments(self, request: AnnotateRequest) -> AnnotationBatch:
        from pipelines.cognition.offline_compress import OFFLINE

        return OFFLINE.annotate_segments(request)

    def compress_segments(self, request: CompressRequest) -> SummaryOutput:
        from pipelines.cognition.offline_compress import OFFLINE

        return OFFLINE.compress_segments(request)

    def extract_knowledge(self, memories: Sequence[EpisodicMemory]) -> KnowledgeBatch:
        from pipelines.cognition.knowledge import extract_offline

        return extract_offline(memories)

    def propose_causal(
        self, memory: EpisodicMemory, candidates: Sequence[EpisodicMemory]
    ) -> CausalBatch:
        from pipelines.cognition.causal import propose_causal_offline

        return propose_causal_offline(memory, candidates)

    def confirm_correction(self, request: CorrectionRequest) -> CorrectionAnswer:
        from pipelines.own.contradict import offline_confirmation

        return offline_confirmation(request)
