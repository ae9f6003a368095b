"""The LLM port over any OpenAI-compatible chat endpoint (DeepSeek by default).

The client has an explicit timeout and no retries of its own: a failed call surfaces at once
as :class:`TransientLLMError` (timeout, 429, 5xx, connection) or :class:`MalformedLLMOutput`
(not JSON, or JSON that fails the schema), and the job's own retry policy decides what next.

Every answer's usage goes to the ledger (``workers.ledger``) under the tenant the adapter is
bound to (``billed_to``) and the call's kind, malformed answers included: they were billed.
Prompts keep their stable part (instructions, schema, examples) in the system message, the
same bytes on every call of a kind, and the memories in the user message after it, so a
provider's prefix cache (DeepSeek's context cache) serves the instructions at its cache price.

A reasoning model's answer is read by ``workers.adapters.llm_wire``: its thinking is never
returned, nor stored.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import openai
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pipelines.errors import LLMError, MalformedLLMOutput, TransientLLMError
from pipelines.read.focus import FocusDirective, InfoKind, directive_from_weights
from pipelines.read.rerank import RerankItem
from pipelines.read.rewrite import QueryVariants
from pipelines.records import MemoryType, TaskPhase
from pipelines.state.calibration import ResumeCalibration, describe_for_calibration
from pipelines.state.models import TaskCheckpoint
from pipelines.write.decide import WriteJudgement
from workers.adapters.llm_wire import answer_of, grammar_safe, usage_of
from workers.ledger import UNATTRIBUTED, LLMCall, UsageLedger

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

_TYPES = ", ".join(member.value for member in MemoryType)

JUDGE_PROMPT = f"""You decide what a long-running software agent should remember.
Given one interaction, answer with a JSON object and nothing else:
{{"keep": true|false, "type": one of [{_TYPES}], "confidence": 0..1,
  "importance": 0..1, "reason": "one short sentence"}}
Keep decisions with their reasons, constraints, preferences, status changes, errors with
causes and anything naming files, people, numbers or settings. Keep every statement of fact,
however short: a person's fact ("I'm allergic to peanuts."), a setting, a choice, a plan, an
event, a number. Drop only small talk, acknowledgements and noise (greetings, thanks, "lol",
emoji, "hmm let me think"). confidence is how sure you are about keep."""

DEEP_PROMPT = f"""You are the careful second reviewer of an agent's memory writes. A fast
reviewer was unsure about the interaction below. Think about whether a future step of the
task could need it; a statement of fact, however short, is kept, and only chatter (greetings,
thanks, acknowledgements, noise) is dropped. Answer with a JSON object and nothing else:
{{"keep": true|false, "type": one of [{_TYPES}], "confidence": 0..1,
  "importance": 0..1, "reason": "one short sentence"}}"""

# The language rule of every prompt whose answer holds text taken from memories: memories in
# Chinese (or mixed with English) are summarised, annotated and restated in that language,
# and identifiers are copied, never translated, so the offline checks (verbatim segments,
# identifier recall, fact recall) read a model's answer as they read the rules' answer.
LANGUAGE_RULE = """Language: write every text field in the language of the memories it comes
from (Chinese memories in Chinese, English in English, mixed Chinese and English as mixed as
the original), never translated. Keep identifiers verbatim: numbers, paths, ids, tickets,
names of people, modules, keys and code exactly as written."""

SUMMARY_PROMPT = (
    """Summarise the interaction for an agent's long-term memory in at most
max_words words. Keep every decision with its reason, every preference, every status
change, and every identifier (numbers, paths, names, keys) verbatim; resolve pronouns to the
names they stand for. The user message is a JSON object {"max_words": <n>, "interaction":
"..."}. Answer with a JSON object and nothing else: {"summary": "..."}
"""
    + LANGUAGE_RULE
)

CALIBRATE_PROMPT = """An autonomous agent was interrupted and is resuming a task from its last
checkpoint. You decide whether it must check the outside world before it continues. A pending
action whose effect is external_write may already have happened before the interruption:
it must be verified before it is repeated. An external_read may be stale after a long pause.
An action whose effect is local is simply redone. Answer with a JSON object and nothing else:
{"needs_verification": true|false, "reason": "one short sentence",
 "checks": [{"action_id": "<id of a pending action>", "reason": "what to verify"}]}
checks is empty exactly when needs_verification is false."""


_KINDS = ", ".join(kind.value for kind in InfoKind)

FOCUS_PROMPT = f"""An autonomous software agent is about to take a step and will read a context
assembled from its memory. Decide which kinds of information this step needs most. Kinds:
[{_KINDS}]. Answer with a JSON object and nothing else:
{{"kinds": [{{"kind": "<kind>", "weight": 0..1}}, ...], "terms": ["key term", ...]}}
List one to four kinds, most needed first; weights are relative. terms are the few words or
identifiers the step is about, copied from the query."""

REWRITE_PROMPT = """Rewrite an agent's question into three search queries over its memory of
past interactions. literal: the question as asked, cleaned up. intent: its content words and
entities without question grammar. associative: the entities and keywords plus words that
memories about the same thing would likely use. Write the queries in the question's language
(a question in Chinese gets Chinese queries), never translated. Keep every identifier (paths,
names, numbers, keys) verbatim. Answer with a JSON object and nothing else:
{"literal": "...", "intent": "...", "associative": "...", "keywords": ["..."],
 "entities": ["..."]}"""

RERANK_PROMPT = """You rank memories for an autonomous agent's next step. Given the agent's
question, its task phase, what the step needs (focus) and numbered memories, rate how useful
each memory is for answering the question in this phase, from 0 (useless) to 1 (exactly what
is needed). Answer with a JSON object and nothing else: {"scores": [s0, s1, ...]}
with one number per memory, in the memories' order."""

# A memory longer than this is cut in the rerank prompt: the head says what it is about, and
# 30 memories of 1,000 characters stay near 10k tokens.
RERANK_ITEM_MAX_CHARS = 1_000


class _FocusAnswer(BaseModel):
    model_config = ConfigDict(extra="ignore")

    class Kind(BaseModel):
        kind: InfoKind
        weight: float = Field(gt=0.0, le=1.0)

    kinds: list[Kind] = Field(min_length=1, max_length=len(InfoKind))
    terms: list[str] = Field(default_factory=list, max_length=20)


class _RerankAnswer(BaseModel):
    model_config = ConfigDict(extra="ignore")

    scores: list[float]


def _schema_error(exc: ValidationError) -> MalformedLLMOutput:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "(top level)"
    return MalformedLLMOutput(f"schema: {where}: {first['msg']}")


@functools.cache
def _schema_of(model: type[BaseModel]) -> Mapping[str, Any]:
    return model.model_json_schema()


SUMMARY_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {"summary": {"type": "string", "minLength": 1}},
    "required": ["summary"],
}


def _rewrite_schema() -> Mapping[str, Any]:
    # The adapter sets the source itself: the model is not asked for it.
    schema = dict(_schema_of(QueryVariants))
    schema["properties"] = {k: v for k, v in schema["properties"].items() if k != "source"}
    return schema


def _rerank_schema(count: int) -> Mapping[str, Any]:
    scores = {"type": "number", "minimum": 0.0, "maximum": 1.0}
    return {
        "type": "object",
        "properties": {
            "scores": {"type": "array", "items": scores, "minItems": count, "maxItems": count}
        },
        "required": ["scores"],
    }


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
        max_tokens: int = 4096,
        send_schema: bool = False,
        ledger: UsageLedger | None = None,
    ) -> None:
        self._client = openai.OpenAI(
            base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=0
        )
        self._model_fast = model_fast
        self._model_deep = model_deep
        self._temperature_summary = temperature_summary
        self._max_tokens = max_tokens
        self._send_schema = send_schema
        self._ledger = ledger
        self._tenant = UNATTRIBUTED

    @property
    def name(self) -> str:
        return f"openai:{self._model_fast}"

    def billed_to(self, tenant_id: str) -> OpenAILLM:
        """This adapter (the same client) with its calls recorded under ``tenant_id``."""
        bound = copy.copy(self)
        bound._tenant = tenant_id
        return bound

    def _chat_json(
        self,
        call: LLMCall,
        model: str,
        system: str,
        user: str,
        temperature: float,
        *,
        schema: Mapping[str, Any],
    ) -> dict[str, Any]:
        # llama.cpp's servers read a schema beside json_object and constrain the answer to
        # it; DeepSeek documents json_object alone, so the schema goes only when asked for.
        response_format: Any = {"type": "json_object"}  # "schema" is outside OpenAI's types
        if self._send_schema:
            response_format["schema"] = grammar_safe(schema)
        try:
            response = self._client.chat.completions.create(
                model=model,
                messages=[
                    {"role": "system", "content": system},
                    {"role": "user", "content": user},
                ],
                temperature=temperature,
                max_tokens=self._max_tokens,
                response_format=response_format,
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
        if self._ledger is not None:  # an answer, whatever it holds, was billed
            self._ledger.record(self._tenant, call, model, usage_of(response.usage))
        if not response.choices:
            raise MalformedLLMOutput("no choices in the answer")
        choice = response.choices[0]
        if choice.finish_reason == "length":
            raise MalformedLLMOutput(f"answer cut at max_tokens ({self._max_tokens})")
        return answer_of(choice.message)

    def _judgement(self, data: dict[str, Any]) -> WriteJudgement:
        try:
            return WriteJudgement.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise MalformedLLMOutput(f"schema: {where}: {first['msg']}") from None

    def judge_write(self, content: str, type_hint: MemoryType | None) -> WriteJudgement:
        hint = f"(the agent labelled it {type_hint.value})\n" if type_hint else ""
        data = self._chat_json(
            LLMCall.JUDGE,
            self._model_fast,
            JUDGE_PROMPT,
            hint + content,
            0.0,
            schema=_schema_of(WriteJudgement),
        )
        return self._judgement(data)

    def deep_judge_write(
        self, content: str, type_hint: MemoryType | None, first: WriteJudgement
    ) -> WriteJudgement:
        user = (
            f"fast reviewer: keep={first.keep} type={first.type.value} "
            f"confidence={first.confidence:.2f} ({first.reason})\n\ninteraction:\n{content}"
        )
        return self._judgement(
            self._chat_json(
                LLMCall.DEEP_JUDGE,
                self._model_deep,
                DEEP_PROMPT,
                user,
                0.0,
                schema=_schema_of(WriteJudgement),
            )
        )

    def summarize(self, content: str, max_words: int) -> str:
        # The word budget varies by caller: it goes with the content, after the prefix.
        user = json.dumps({"max_words": max_words, "interaction": content}, ensure_ascii=False)
        data = self._chat_json(
            LLMCall.SUMMARY,
            self._model_deep,
            SUMMARY_PROMPT,
            user,
            self._temperature_summary,
            schema=SUMMARY_SCHEMA,
        )
        summary = data.get("summary")
        if not isinstance(summary, str) or not summary.strip():
            raise MalformedLLMOutput("schema: summary: missing or empty")
        return summary.strip()

    def calibrate_resume(self, checkpoint: TaskCheckpoint, elapsed_s: float) -> ResumeCalibration:
        facts = json.dumps(describe_for_calibration(checkpoint, elapsed_s), ensure_ascii=False)
        data = self._chat_json(
            LLMCall.CALIBRATE,
            self._model_fast,
            CALIBRATE_PROMPT,
            facts,
            0.0,
            schema=_schema_of(ResumeCalibration),
        )
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

    # -- the read path -------------------------------------------------------------------

    def focus_directive(
        self, query: str, phase: TaskPhase | None, hint: str | None
    ) -> FocusDirective:
        user = json.dumps(
            {"query": query, "phase": phase.value if phase else None, "hint": hint},
            ensure_ascii=False,
        )
        data = self._chat_json(
            LLMCall.FOCUS,
            self._model_fast,
            FOCUS_PROMPT,
            user,
            0.0,
            schema=_schema_of(_FocusAnswer),
        )
        try:
            answer = _FocusAnswer.model_validate(data)
        except ValidationError as exc:
            raise _schema_error(exc) from None
        weights: dict[InfoKind, float] = {}
        for item in answer.kinds:  # a kind named twice counts once, at its larger weight
            weights[item.kind] = max(weights.get(item.kind, 0.0), item.weight)
        terms = [term.strip() for term in answer.terms if term.strip()]
        return directive_from_weights(weights, terms, self.name)

    def rewrite_query(self, query: str, phase: str | None, focus: Sequence[str]) -> QueryVariants:
        user = json.dumps(
            {"question": query, "phase": phase, "focus": list(focus)}, ensure_ascii=False
        )
        data = self._chat_json(
            LLMCall.REWRITE, self._model_fast, REWRITE_PROMPT, user, 0.0, schema=_rewrite_schema()
        )
        try:
            return QueryVariants.model_validate({**data, "source": self.name})
        except ValidationError as exc:
            raise _schema_error(exc) from None

    def rerank(
        self,
        query: str,
        items: Sequence[RerankItem],
        *,
        phase: TaskPhase | None,
        focus: FocusDirective,
    ) -> list[float]:
        if not items:
            return []
        user = json.dumps(
            {
                "question": query,
                "phase": phase.value if phase else None,
                "focus": [item.kind.value for item in focus.kinds],
                "memories": [
                    {
                        "n": index,
                        "when": item.timestamp.isoformat(),
                        "type": item.type.value if item.type else None,
                        "content": item.content[:RERANK_ITEM_MAX_CHARS],
                    }
                    for index, item in enumerate(items)
                ],
            },
            ensure_ascii=False,
        )
        data = self._chat_json(
            LLMCall.RERANK,
            self._model_fast,
            RERANK_PROMPT,
            user,
            0.0,
            schema=_rerank_schema(len(items)),
        )
        try:
            answer = _RerankAnswer.model_validate(data)
        except ValidationError as exc:
            raise _schema_error(exc) from None
        if len(answer.scores) != len(items):
            raise MalformedLLMOutput(
                f"schema: scores: {len(answer.scores)} scores for {len(items)} memories"
            )
        if not all(0.0 <= score <= 1.0 for score in answer.scores):
            raise MalformedLLMOutput("schema: scores: every score must be in [0, 1]")
        return list(answer.scores)

    # -- background cognition (pipelines.compress, .consolidate, .link) -----------------------

    def annotate_segments(self, request: AnnotateRequest) -> AnnotationBatch:
        from pipelines.cognition.protocol import AnnotationBatch, parse_annotations

        user = json.dumps(
            {"segments": [json.loads(s.model_dump_json()) for s in request.segments]},
            ensure_ascii=False,
        )
        data = self._chat_json(
            LLMCall.ANNOTATE,
            self._model_deep,
            ANNOTATE_PROMPT,
            user,
            0.0,
            schema=_schema_of(AnnotationBatch),
        )
        return parse_annotations(json.dumps(data), request)

    def compress_segments(self, request: CompressRequest) -> SummaryOutput:
        from pipelines.cognition.protocol import SummaryOutput, parse_summary

        user = json.dumps(json.loads(request.model_dump_json()), ensure_ascii=False)
        data = self._chat_json(
            LLMCall.COMPRESS,
            self._model_deep,
            COMPRESS_PROMPT,
            user,
            self._temperature_summary,
            schema=_schema_of(SummaryOutput),
        )
        return parse_summary(json.dumps(data), request)

    def extract_knowledge(self, memories: Sequence[EpisodicMemory]) -> KnowledgeBatch:
        from pipelines.cognition.knowledge import KnowledgeBatch, parse_knowledge

        user = json.dumps(
            {
                "memories": [
                    {"id": str(m.id), "ts": m.timestamp.isoformat(), "content": m.content}
                    for m in memories
                ]
            },
            ensure_ascii=False,
        )
        data = self._chat_json(
            LLMCall.KNOWLEDGE,
            self._model_deep,
            KNOWLEDGE_PROMPT,
            user,
            0.0,
            schema=_schema_of(KnowledgeBatch),
        )
        return parse_knowledge(json.dumps(data))

    def propose_causal(
        self, memory: EpisodicMemory, candidates: Sequence[EpisodicMemory]
    ) -> CausalBatch:
        from pipelines.cognition.causal import CausalBatch, parse_causal

        user = json.dumps(
            {
                "memory": {"id": str(memory.id), "content": memory.content},
                "candidates": [{"id": str(c.id), "content": c.content} for c in candidates],
            },
            ensure_ascii=False,
        )
        data = self._chat_json(
            LLMCall.CAUSAL,
            self._model_fast,
            CAUSAL_PROMPT,
            user,
            0.0,
            schema=_schema_of(CausalBatch),
        )
        return parse_causal(json.dumps(data))

    def confirm_correction(self, request: CorrectionRequest) -> CorrectionAnswer:
        from pipelines.own.contradict import CorrectionAnswer

        # The instructions are the stable prefix; the two statements come last.
        user = json.dumps(json.loads(request.model_dump_json()), ensure_ascii=False)
        data = self._chat_json(
            LLMCall.CONFIRM,
            self._model_deep,
            CONFIRM_PROMPT,
            user,
            0.0,
            schema=_schema_of(CorrectionAnswer),
        )
        try:
            return CorrectionAnswer.model_validate(data)
        except ValidationError as exc:
            raise _schema_error(exc) from None


# -- prompts of background cognition -----------------------------------------------------------

CONFIRM_PROMPT = """You check an automatic correction in an agent's long-term memory. An older
and a newer statement of the same user are given with their dates. If the newer statement
replaces the older one, the older one is hidden from the agent from now on, so say so only
when it is certain: the same subject and the same attribute (an owner, a deadline, a
technology, a setting, a limit, a preference) with a changed value, or an explicit change of
mind. A question about the older statement, a restatement, an elaboration, a report or
summary that mentions it, another person's opinion, a different subject sharing words, or a
rule for another situation replaces nothing. Answer with a JSON object and nothing else:
{"verdict": "supersedes" | "conflict" | "unrelated", "reason": "one short sentence"}
supersedes: the newer statement replaces the older one. conflict: they disagree and it is
not certain which holds (both are kept and shown side by side). unrelated: they do not
contradict each other."""


ANNOTATE_PROMPT = (
    """You annotate segments of an agent's memories before compression. For
each segment give its kind: decision_rationale, outcome, user_preference, status_change,
error_root_cause, debug_output or chatter (these names, whatever the segment's language); its
entities; its identifiers (numbers, paths, names, ids exactly as written); "resolved": the
segment with pronouns replaced by the names they stand for and relative dates made absolute
against the segment's timestamp, nothing else changed; for a decision its rationale verbatim
(因为/由于/原因是… in Chinese), for an error its root cause verbatim.
Answer with a JSON object and nothing else:
{"segments": [{"index": <segment index>, "kind": "...", "resolved": "...", "entities": [],
  "identifiers": [], "rationale": null, "root_cause": null}]} with one entry per segment.
"""
    + LANGUAGE_RULE
)

COMPRESS_PROMPT = (
    """You compress annotated segments of an agent's memories into one summary of
at most target_words words (a Chinese word is about 1.5 characters). Keep decision
rationales, user preferences, status changes and errors with their root cause verbatim (add
an absolute date in brackets to relative dates); compress only outcomes and debug output;
drop chatter; keep every identifier. Answer with a JSON object and nothing else:
{"text": "the summary", "kept_verbatim": [segment indexes], "dropped": [segment indexes]}
"""
    + LANGUAGE_RULE
)

KNOWLEDGE_PROMPT = (
    """You consolidate an agent's episodic memories into reusable knowledge:
user preferences, effective patterns, mistakes to avoid, project conventions, owners (who
owns or is assigned a module, a service or a piece of work) and the stack (the language,
database, framework or broker chosen for an aspect). State each as one self-contained
sentence, cite the ids of the memories it comes from, give a confidence in [0, 1] and, when
it only holds in some situations, its conditions ("for architecture questions", "遇到架构问题
时"). A wish said several times is one item citing every mention. Never state knowledge from
status reports, summaries, questions, chatter or hypotheticals. Answer with a JSON object and
nothing else:
{"items": [{"kind": "preference|pattern|mistake|convention|owner|stack", "statement": "...",
  "confidence": 0.0, "source_ids": ["<memory id>"], "conditions": null}]}
"""
    + LANGUAGE_RULE
)

CAUSAL_PROMPT = (
    """You find cause and effect between a new memory of a software project and
earlier ones: a delay, a blocker, a failure or a decision in one that affects another
(Chinese says it with 因为, 由于, 导致, 会影响, 推迟, 延期, 依赖, 阻塞, 等待 ...). Only
propose an edge when the text supports it, with its direction (cause_id causes or affects
effect_id); one of the two ids must be the new memory's. Answer with a JSON object and
nothing else: {"edges": [{"cause_id": "<id>", "effect_id": "<id>", "confidence": 0.0,
"reason": "one short sentence"}]}
"""
    + LANGUAGE_RULE
)
