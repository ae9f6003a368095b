"""The offline LLM adapter: deterministic rules, no network, no key.

It implements the same port as the OpenAI-compatible adapter, so every pipeline runs (and is
tested) without a model; its answers are the rule-based ones in ``pipelines``.
"""

from __future__ import annotations

from pipelines.checkpoint import ResumeCalibration, TaskCheckpoint, offline_calibration
from pipelines.ports import WriteJudgement
from pipelines.records import MemoryType
from pipelines.summarize import extractive_summary
from pipelines.write_filter import offline_deep_judge, offline_judge


class OfflineLLM:
    @property
    def name(self) -> str:
        return "offline"

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
