"""The LLM port over any OpenAI-compatible chat endpoint (DeepSeek by default).

The client has an explicit timeout and no retries of its own: a failed call surfaces at once
as :class:`TransientLLMError` (timeout, 429, 5xx, connection) or :class:`MalformedLLMOutput`
(not JSON, or JSON that fails the schema), and the job's own retry policy decides what next.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import openai
from pydantic import ValidationError

from pipelines.checkpoint import ResumeCalibration, TaskCheckpoint, describe_for_calibration
from pipelines.ports import LLMError, MalformedLLMOutput, TransientLLMError, WriteJudgement
from pipelines.records import MemoryType

log = logging.getLogger(__name__)

_TYPES = ", ".join(member.value for member in MemoryType)

JUDGE_PROMPT = f"""You decide what a long-running software agent should remember.
Given one interaction, answer with a JSON object and nothing else:
{{"keep": true|false, "type": one of [{_TYPES}], "confidence": 0..1,
  "importance": 0..1, "reason": "one short sentence"}}
Keep decisions with their reasons, constraints, preferences, status changes, errors with
causes and anything naming files, people, numbers or settings. Drop small talk and
acknowledgements. confidence is how sure you are about keep."""

DEEP_PROMPT = f"""You are the careful second reviewer of an agent's memory writes. A fast
reviewer was unsure about the interaction below. Think about whether a future step of the
task could need it. Answer with a JSON object and nothing else:
{{"keep": true|false, "type": one of [{_TYPES}], "confidence": 0..1,
  "importance": 0..1, "reason": "one short sentence"}}"""

SUMMARY_PROMPT = """Summarise the interaction for an agent's long-term memory in at most
{max_words} words. Keep every decision with its reason, every preference, every status
change, and every identifier (numbers, paths, names, keys) verbatim; resolve pronouns to the
names they stand for. Answer with a JSON object and nothing else: {{"summary": "..."}}"""

CALIBRATE_PROMPT = """An autonomous agent was interrupted and is resuming a task from its last
checkpoint. You decide whether it must check the outside world before it continues. A pending
action whose effect is external_write may already have happened before the interruption:
it must be verified before it is repeated. An external_read may be stale after a long pause.
An action whose effect is local is simply redone. Answer with a JSON object and nothing else:
{"needs_verification": true|false, "reason": "one short sentence",
 "checks": [{"action_id": "<id of a pending action>", "reason": "what to verify"}]}
checks is empty exactly when needs_verification is false."""


class OpenAILLM:
    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        model_fast: str,
        model_deep: str,
        timeout_s: float,
        temperature_summary: float = 0.3,
    ) -> None:
        self._client = openai.OpenAI(
            base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=0
        )
        self._model_fast = model_fast
        self._model_deep = model_deep
        self._temperature_summary = temperature_summary

    @property
    def name(self) -> str:
        return f"openai:{self._model_fast}"

    def _chat_json(self, model: str, system: str, user: str, temperature: float) -> dict[str, Any]:
        try:
            response = self._client.chat.completions.create(
                model=model,
                messages=[
                    {"role": "system", "content": system},
                    {"role": "user", "content": user},
                ],
                temperature=temperature,
                response_format={"type": "json_object"},
            )
        except openai.APITimeoutError as exc:
            raise TransientLLMError("LLM timeout") from exc
        except openai.RateLimitError as exc:
            raise TransientLLMError("LLM rate limited (HTTP 429)") from exc
        except openai.InternalServerError as exc:
            raise TransientLLMError(f"LLM server error (HTTP {exc.status_code})") from exc
        except openai.APIConnectionError as exc:
            raise TransientLLMError("LLM connection failed") from exc
        except openai.APIStatusError as exc:
            if exc.status_code >= 500:
                raise TransientLLMError(f"LLM server error (HTTP {exc.status_code})") from exc
            raise LLMError(f"LLM refused the request (HTTP {exc.status_code})") from exc
        if not response.choices:
            raise MalformedLLMOutput("no choices in the answer")
        text = response.choices[0].message.content or ""
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            raise MalformedLLMOutput(f"invalid JSON: {text[:80]!r}") from None
        if not isinstance(data, dict):
            raise MalformedLLMOutput(f"JSON is a {type(data).__name__}, not an object")
        return data

    def _judgement(self, data: dict[str, Any]) -> WriteJudgement:
        try:
            return WriteJudgement.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise MalformedLLMOutput(f"schema: {where}: {first['msg']}") from None

    def judge_write(self, content: str, type_hint: MemoryType | None) -> WriteJudgement:
        hint = f"(the agent labelled it {type_hint.value})\n" if type_hint else ""
        data = self._chat_json(self._model_fast, JUDGE_PROMPT, hint + content, 0.0)
        return self._judgement(data)

    def deep_judge_write(
        self, content: str, type_hint: MemoryType | None, first: WriteJudgement
    ) -> WriteJudgement:
        user = (
            f"fast reviewer: keep={first.keep} type={first.type.value} "
            f"confidence={first.confidence:.2f} ({first.reason})\n\ninteraction:\n{content}"
        )
        return self._judgement(self._chat_json(self._model_deep, DEEP_PROMPT, user, 0.0))

    def summarize(self, content: str, max_words: int) -> str:
        data = self._chat_json(
            self._model_deep,
            SUMMARY_PROMPT.format(max_words=max_words),
            content,
            self._temperature_summary,
        )
        summary = data.get("summary")
        if not isinstance(summary, str) or not summary.strip():
            raise MalformedLLMOutput("schema: summary: missing or empty")
        return summary.strip()

    def calibrate_resume(self, checkpoint: TaskCheckpoint, elapsed_s: float) -> ResumeCalibration:
        facts = json.dumps(describe_for_calibration(checkpoint, elapsed_s), ensure_ascii=False)
        data = self._chat_json(self._model_fast, CALIBRATE_PROMPT, facts, 0.0)
        try:
            verdict = ResumeCalibration.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "(top level)"
            raise MalformedLLMOutput(f"schema: {where}: {first['msg']}") from None
        known = {action.action_id for action in checkpoint.state.pending_actions}
        unknown = [check.action_id for check in verdict.checks if check.action_id not in known]
        if unknown:
            raise MalformedLLMOutput(f"schema: checks: unknown pending action {unknown[0]!r}")
        return verdict
