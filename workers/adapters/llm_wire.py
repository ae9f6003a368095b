"""What goes over the wire to an OpenAI-compatible chat endpoint and what comes back, for
``workers.adapters.llm_openai``: the schema sent beside json_object, the answer's JSON object
and its usage.

A reasoning model (deepseek-reasoner) puts its thinking in ``reasoning_content`` beside the
answer in ``content``: only ``content`` is parsed, and nothing of the thinking is returned.
When ``content`` is empty and the thinking ends with a JSON object (a server that never closed
the thinking, or a model that answered inside it), that last object is the answer, checked by
the call's schema like any other; a thinking without one is a malformed answer (retried, then
the offline rules).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from pipelines.errors import MalformedLLMOutput
from workers.ledger import TokenUsage

log = logging.getLogger(__name__)

# llama.cpp's grammar parser refuses a rule repeated more than a few thousand times, and
# llama-cpp-python's server dies on the refusal: a string of maxLength 2,000 (a correction's
# reason) is 2,000 nested optional characters. Lengths stay checked by the answer models after
# parsing; a grammar only needs the shape.
GRAMMAR_MAX_ITEMS = 32


def grammar_safe(schema: Any) -> Any:
    """``schema`` without the bounds a grammar would unroll: every maxLength, and a maxItems
    above ``GRAMMAR_MAX_ITEMS``."""
    if isinstance(schema, Mapping):
        return {
            key: grammar_safe(value)
            for key, value in schema.items()
            if key != "maxLength"
            and not (key == "maxItems" and isinstance(value, int) and value > GRAMMAR_MAX_ITEMS)
        }
    if isinstance(schema, list):
        return [grammar_safe(item) for item in schema]
    return schema


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def usage_of(usage: Any) -> TokenUsage:
    """One answer's ``usage`` as the ledger counts it. DeepSeek reports the prompt tokens its
    context cache served as ``prompt_cache_hit_tokens`` (beside ``prompt_cache_miss_tokens``);
    OpenAI and llama.cpp as ``prompt_tokens_details.cached_tokens``; reasoning tokens come in
    ``completion_tokens_details.reasoning_tokens`` (a part of ``completion_tokens``). A server
    that reports no usage leaves a call with no tokens, never a guess."""
    if usage is None:
        return TokenUsage()
    prompt = _count(getattr(usage, "prompt_tokens", 0))
    completion = _count(getattr(usage, "completion_tokens", 0))
    cached = _count(getattr(usage, "prompt_cache_hit_tokens", None))
    if not cached:
        details = getattr(usage, "prompt_tokens_details", None)
        cached = _count(getattr(details, "cached_tokens", None))
    details = getattr(usage, "completion_tokens_details", None)
    reasoning = _count(getattr(details, "reasoning_tokens", None))
    return TokenUsage(
        prompt=prompt,
        completion=completion,
        cached=min(cached, prompt),
        reasoning=min(reasoning, completion),
    )


def last_json_object(text: str) -> dict[str, Any] | None:
    """The last top-level JSON object in ``text`` (prose around it ignored), or None."""
    decoder = json.JSONDecoder()
    found: dict[str, Any] | None = None
    start = text.find("{")
    while start != -1:
        try:
            value, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            start = text.find("{", start + 1)
            continue
        if isinstance(value, dict):
            found = value
        start = text.find("{", end)
    return found


def answer_of(message: Any) -> dict[str, Any]:
    """The JSON object a chat answer's message holds (see the module on reasoning models)."""
    text = message.content or ""
    if not text.strip():
        reasoning = getattr(message, "reasoning_content", None)
        if isinstance(reasoning, str) and reasoning.strip():
            data = last_json_object(reasoning)
            if data is None:
                raise MalformedLLMOutput("empty answer; the reasoning holds no JSON object")
            log.debug("answer taken from the end of the reasoning (content was empty)")
            return data
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise MalformedLLMOutput(f"invalid JSON: {text[:80]!r}") from None
    if not isinstance(data, dict):
        raise MalformedLLMOutput(f"JSON is a {type(data).__name__}, not an object")
    return data
