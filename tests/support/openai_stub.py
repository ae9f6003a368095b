"""A small OpenAI-compatible HTTP server for tests: the real ``openai`` client talks to it.

It serves ``POST /v1/chat/completions`` and ``POST /v1/embeddings`` with the bodies the real
API returns (ids, ``created``, ``usage``, base64 or float embeddings), and answers sensibly:
the write-judge prompts are decided by the offline rules of ``pipelines.write_filter`` and the
summary prompt by the extractive summariser, so a worker pointed at it stores what the offline
adapter would have stored, with a reason that says the model answered (``stub model: ...``).

Faults are scripted by whoever holds the URL, over HTTP, so worker subprocesses see them too:

    POST /_control {"mode": "http500", "times": 2}   # the next two calls fail, then ok again
    POST /_control {"mode": "slow", "delay_s": 3}    # every call waits 3 s before answering
    POST /_control {"embed_dim": 32}                 # embeddings of the wrong size
    POST /_reset                                     # back to ok, counters to zero
    GET  /_stats                                     # what was asked and what was answered

Modes: ``ok``, ``slow``, ``invalid_json``, ``bad_schema``, ``truncated`` (the answer's first
half, ``finish_reason: length``, as a model cut at max_tokens), ``reasoning`` (a reasoning
model: its thinking in ``reasoning_content``, the answer in ``content``), ``reasoning_only``
(``content`` empty, the thinking ending with the answer's JSON) and ``httpNNN`` for any status
(``http500``, ``http429``, ``http400``, ``http401``...). ``times`` omitted means until the
next control call. Run it by hand with ``python -m tests.support.openai_stub --port 8765``.

Usage is counted in words and reported as DeepSeek reports it (``usage_style``
``deepseek``: ``prompt_cache_hit_tokens`` / ``prompt_cache_miss_tokens``), as OpenAI does
(``openai``: ``prompt_tokens_details.cached_tokens``) or not at all (``none``). The stub
caches prefixes as DeepSeek's context cache does, by whole messages: a system message it has
answered before is a cache hit for its tokens. Reasoning tokens are reported in
``completion_tokens_details.reasoning_tokens`` and counted in ``completion_tokens``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import itertools
import json
import re
import socket
import struct
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pipelines.read.focus import InfoKind, directive_from_kinds
from pipelines.read.rerank import RerankItem
from pipelines.records import MemoryType, TaskPhase
from pipelines.write.decide import (
    WriteJudgement,
    estimate_importance,
    offline_deep_judge,
    offline_judge,
)
from pipelines.write.summary import extractive_summary
from workers.adapters.embed_hashing import HashingEmbedder
from workers.adapters.llm_offline import OfflineLLM
from workers.adapters.llm_openai import (
    ANNOTATE_PROMPT,
    CALIBRATE_PROMPT,
    CAUSAL_PROMPT,
    COMPRESS_PROMPT,
    CONFIRM_PROMPT,
    DEEP_PROMPT,
    FOCUS_PROMPT,
    JUDGE_PROMPT,
    KNOWLEDGE_PROMPT,
    RERANK_PROMPT,
    REWRITE_PROMPT,
    SUMMARY_PROMPT,
)

MODES = ("ok", "slow", "invalid_json", "bad_schema", "truncated", "reasoning", "reasoning_only")
USAGE_STYLES = ("deepseek", "openai", "none")
# In every reasoning answer's thinking: a test looks for it wherever memories are stored.
REASONING_MARK = "STUB-REASONING-7f3a"
_HTTP_MODE_RE = re.compile(r"^http([45]\d\d)$")
# What the adapter puts before the content when the agent labelled the memory.
_HINT_RE = re.compile(r"^\(the agent labelled it (\w+)\)\n")
_DEEP_USER_RE = re.compile(
    r"^fast reviewer: keep=(True|False) type=(\w+) confidence=([\d.]+) \((.*?)\)\n\n"
    r"interaction:\n",
    re.S,
)
# What a model that ignores the JSON instruction tends to send.
_NOT_JSON = "Sure! Here is my assessment: keep = yes, it looks important."


@dataclass
class StubState:
    """Scripted behaviour and counters, shared by the handler threads."""

    mode: str = "ok"
    delay_s: float = 0.0
    times: int | None = None
    embed_dim: int | None = None
    embed_reversed: bool = False
    usage_style: str = "deepseek"
    seen_prefixes: set[str] = field(default_factory=set)
    counts: Counter[str] = field(default_factory=Counter)
    requests: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopping: threading.Event = field(default_factory=threading.Event)
    ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def take_mode(self) -> tuple[str, float]:
        """The mode this request gets; a scripted fault is used up as the request arrives."""
        with self.lock:
            mode, delay_s = self.mode, self.delay_s
            if mode != "ok" and self.times is not None:
                self.times -= 1
                if self.times <= 0:
                    self.mode, self.times = "ok", None
            return mode, delay_s

    def configure(self, body: dict[str, Any]) -> None:
        with self.lock:
            if "mode" in body:
                mode = str(body["mode"])
                if mode not in MODES and not _HTTP_MODE_RE.match(mode):
                    raise ValueError(f"unknown mode {mode!r}")
                self.mode = mode
                self.delay_s = float(body.get("delay_s", 0.0))
                times = body.get("times")
                self.times = int(times) if times is not None else None
            if "embed_dim" in body:
                self.embed_dim = int(body["embed_dim"]) if body["embed_dim"] else None
            if "embed_reversed" in body:
                self.embed_reversed = bool(body["embed_reversed"])
            if "usage_style" in body:
                style = str(body["usage_style"])
                if style not in USAGE_STYLES:
                    raise ValueError(f"unknown usage_style {style!r}")
                self.usage_style = style

    def reset(self) -> None:
        with self.lock:
            self.mode, self.delay_s, self.times = "ok", 0.0, None
            self.embed_dim, self.embed_reversed = None, False
            self.usage_style = "deepseek"
            self.seen_prefixes.clear()
            self.counts.clear()
            self.requests.clear()

    def record(self, entry: dict[str, Any], *keys: str) -> None:
        with self.lock:
            self.requests.append(entry)
            for key in keys:
                self.counts[key] += 1

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {
                "mode": self.mode,
                "times": self.times,
                "counts": dict(self.counts),
                "requests": list(self.requests),
            }


def _prompt_kind(system: str) -> str:
    if system == JUDGE_PROMPT:
        return "judge"
    if system == DEEP_PROMPT:
        return "deep"
    if system == SUMMARY_PROMPT:
        return "summary"
    if system == CALIBRATE_PROMPT:
        return "calibrate"
    if system in _READ_PROMPTS:
        return _READ_PROMPTS[system]
    if system in _COGNITION_PROMPTS:
        return _COGNITION_PROMPTS[system]
    return "unknown"


_READ_PROMPTS = {FOCUS_PROMPT: "focus", REWRITE_PROMPT: "rewrite", RERANK_PROMPT: "rerank"}
_COGNITION_PROMPTS = {
    ANNOTATE_PROMPT: "annotate",
    COMPRESS_PROMPT: "compress",
    KNOWLEDGE_PROMPT: "knowledge",
    CAUSAL_PROMPT: "causal",
    CONFIRM_PROMPT: "confirm",
}


def _cognition_answer(kind: str, user: str) -> str:
    """Background cognition's prompts, answered by the offline rules (JSON in, JSON out)."""
    from datetime import UTC, datetime

    from pipelines.cognition.offline_compress import OFFLINE
    from pipelines.cognition.protocol import AnnotateRequest, CompressRequest
    from pipelines.records import EpisodicMemory

    body = json.loads(user)
    if kind == "annotate":
        return OFFLINE.annotate_segments(AnnotateRequest.model_validate(body)).model_dump_json()
    if kind == "compress":
        return OFFLINE.compress_segments(CompressRequest.model_validate(body)).model_dump_json()

    def memory(item: dict[str, Any]) -> EpisodicMemory:
        when = datetime.fromisoformat(item["ts"]) if "ts" in item else datetime.now(UTC)
        scope = {"tenant_id": "stub", "task_id": "stub", "session_id": "stub"}
        return EpisodicMemory(id=item["id"], content=item["content"], timestamp=when, **scope)

    offline = OfflineLLM()
    if kind == "confirm":
        from pipelines.own.contradict import CorrectionRequest

        answer = offline.confirm_correction(CorrectionRequest.model_validate(body))
        reason = f"stub model: {answer.reason}"[:500]
        return answer.model_copy(update={"reason": reason}).model_dump_json()
    if kind == "knowledge":
        memories = [memory(m) for m in body["memories"]]
        return offline.extract_knowledge(memories).model_dump_json()
    candidates = [memory(c) for c in body["candidates"]]
    return offline.propose_causal(memory(body["memory"]), candidates).model_dump_json()


def _read_answer(kind: str, user: str) -> str:
    """The read path's prompts, answered by the offline adapter's rules (JSON in, JSON out)."""
    body = json.loads(user)
    offline = OfflineLLM()
    if kind == "focus":
        phase = TaskPhase(body["phase"]) if body.get("phase") else None
        directive = offline.focus_directive(body["query"], phase, body.get("hint"))
        kinds = [{"kind": k.kind.value, "weight": round(k.weight, 4)} for k in directive.kinds]
        return json.dumps({"kinds": kinds, "terms": list(directive.terms)})
    if kind == "rewrite":
        variants = offline.rewrite_query(body["question"], body.get("phase"), body["focus"])
        return variants.model_dump_json(exclude={"source"})
    focus = directive_from_kinds([InfoKind(k) for k in body["focus"]], [])
    items = [
        RerankItem(id=str(m["n"]), content=m["content"], timestamp=m["when"], type=m["type"])
        for m in body["memories"]
    ]
    phase = TaskPhase(body["phase"]) if body.get("phase") else None
    scores = offline.rerank(body["question"], items, phase=phase, focus=focus)
    return json.dumps({"scores": [round(score, 4) for score in scores]})


def _judge_answer(user: str) -> WriteJudgement:
    type_hint: MemoryType | None = None
    match = _HINT_RE.match(user)
    if match:
        type_hint = MemoryType(match.group(1))
        user = user[match.end() :]
    return offline_judge(user, type_hint)


def _deep_answer(user: str) -> WriteJudgement:
    match = _DEEP_USER_RE.match(user)
    if not match:
        raise ValueError("deep prompt without the fast reviewer's verdict")
    content = user[match.end() :]
    memory_type = MemoryType(match.group(2))
    first = WriteJudgement(
        keep=match.group(1) == "True",
        type=memory_type,
        confidence=float(match.group(3)),
        importance=estimate_importance(content, memory_type),
        reason=match.group(4) or "fast reviewer",
    )
    return offline_deep_judge(content, None, first)


def _calibrate_answer(user: str) -> str:
    """What the calibration rules say of the facts: verify each pending external write."""
    writes = [a for a in json.loads(user)["pending_actions"] if a["effect"] == "external_write"]
    checks = [
        {"action_id": a["action_id"], "reason": f"stub model: check {a['tool']} took effect"}
        for a in writes
    ]
    reason = "stub model: an external write may have happened" if writes else "stub model: local"
    return json.dumps({"needs_verification": bool(writes), "reason": reason, "checks": checks})


def _answer_ok(kind: str, system: str, user: str) -> str:
    if kind == "calibrate":
        return _calibrate_answer(user)
    if kind in _READ_PROMPTS.values():
        return _read_answer(kind, user)
    if kind in _COGNITION_PROMPTS.values():
        return _cognition_answer(kind, user)
    if kind == "summary":
        body = json.loads(user)
        return json.dumps(
            {"summary": extractive_summary(body["interaction"], int(body["max_words"]))}
        )
    judgement = _judge_answer(user) if kind == "judge" else _deep_answer(user)
    reason = f"stub model: {judgement.reason}"[:500]
    return judgement.model_copy(update={"reason": reason}).model_dump_json()


def _answer_bad_schema(kind: str) -> str:
    if kind in _COGNITION_PROMPTS.values():
        return json.dumps({"segments": "none", "text": 3, "items": [{}], "edges": "x"})
    if kind == "focus":
        return json.dumps({"kinds": [{"kind": "gossip", "weight": 3}]})
    if kind == "rewrite":
        return json.dumps({"literal": "", "intent": 7})
    if kind == "rerank":
        return json.dumps({"scores": ["high", "low"]})
    if kind == "summary":
        return json.dumps({"text": "the summary under the wrong key"})
    return json.dumps({"keep": "maybe", "type": "gossip", "confidence": 7, "reason": ""})


def _tokens(text: str) -> int:
    return max(1, len(text.split()))


def _thinking(kind: str) -> str:
    return (
        f"The user wants a {kind} answer. Let me think about it step by step "
        f"({REASONING_MARK}): the rules say what to keep, so I answer with JSON."
    )


def _usage(
    state: StubState, system: str, user: str, content: str, reasoning: str
) -> dict[str, Any] | None:
    """The answer's ``usage`` in the configured style, with the stub's prefix cache."""
    with state.lock:
        style = state.usage_style
        hit = system in state.seen_prefixes
        state.seen_prefixes.add(system)
    prompt_tokens = _tokens(system) + _tokens(user)
    cached = _tokens(system) if hit else 0
    reasoning_tokens = _tokens(reasoning) if reasoning else 0
    completion_tokens = (_tokens(content) if content else 0) + reasoning_tokens
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if style == "none":
        return None
    if style == "deepseek":
        usage["prompt_cache_hit_tokens"] = cached
        usage["prompt_cache_miss_tokens"] = prompt_tokens - cached
    else:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    if reasoning:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return usage


class _Handler(BaseHTTPRequestHandler):
    server: StubServer
    protocol_version = "HTTP/1.0"  # one request per connection: nothing idles at shutdown

    def log_message(self, format: str, *args: Any) -> None:  # keep pytest output clean
        pass

    # -- plumbing --------------------------------------------------------------------------

    def _read_json(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b"{}"
        body = json.loads(raw or b"{}")
        if not isinstance(body, dict):
            raise ValueError("the request body must be a JSON object")
        return body

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode("utf-8")
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("x-request-id", f"req_stub_{next(self.server.state.ids)}")
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its timeout ran out): exactly what slow mode is for

    def _error(self, status: int, message: str, error_type: str, code: str | None) -> None:
        headers = {"retry-after": "1"} if status == 429 else None
        body = {"error": {"message": message, "type": error_type, "param": None, "code": code}}
        self._send(status, body, headers)

    def _fault(self, mode: str, delay_s: float) -> bool:
        """Serve a scripted HTTP fault or wait out a slow one. True when answered."""
        if mode == "slow":
            # Interruptible, so stopping the server never waits for a sleeping handler.
            self.server.state.stopping.wait(delay_s)
            return False
        match = _HTTP_MODE_RE.match(mode)
        if not match:
            return False
        status = int(match.group(1))
        kinds = {
            400: ("invalid_request_error", "bad request (scripted)"),
            401: ("authentication_error", "Incorrect API key provided (scripted)"),
            429: ("rate_limit_error", "Rate limit reached (scripted)"),
        }
        error_type, message = kinds.get(
            status, ("server_error" if status >= 500 else "invalid_request_error", "scripted")
        )
        self._error(status, f"{message}: HTTP {status}", error_type, None)
        return True

    # -- routes ----------------------------------------------------------------------------

    def do_GET(self) -> None:
        if self.path == "/_stats":
            self._send(200, self.server.state.snapshot())
        elif self.path == "/v1/models":
            model = {"id": "deepseek-chat", "object": "model", "created": 0, "owned_by": "stub"}
            self._send(200, {"object": "list", "data": [model]})
        else:
            self._error(404, f"no route {self.path}", "invalid_request_error", "not_found")

    def do_POST(self) -> None:
        try:
            body = self._read_json()
        except (ValueError, UnicodeDecodeError) as exc:
            self._error(400, f"invalid request body: {exc}", "invalid_request_error", None)
            return
        state = self.server.state
        if self.path == "/_control":
            try:
                state.configure(body)
            except (TypeError, ValueError) as exc:
                self._error(400, str(exc), "invalid_request_error", None)
                return
            self._send(200, state.snapshot())
        elif self.path == "/_reset":
            state.reset()
            self._send(200, state.snapshot())
        elif self.path == "/v1/chat/completions":
            self._chat(body)
        elif self.path == "/v1/embeddings":
            self._embeddings(body)
        else:
            self._error(404, f"no route {self.path}", "invalid_request_error", "not_found")

    def _chat(self, body: dict[str, Any]) -> None:
        state = self.server.state
        messages = body.get("messages") or []
        system = next((m.get("content", "") for m in messages if m.get("role") == "system"), "")
        user = next((m.get("content", "") for m in messages if m.get("role") == "user"), "")
        kind = _prompt_kind(system)
        mode, delay_s = state.take_mode()
        state.record(
            {
                "endpoint": "chat",
                "kind": kind,
                "mode": mode,
                "model": body.get("model"),
                "temperature": body.get("temperature"),
                "response_format": body.get("response_format"),
                "max_tokens": body.get("max_tokens"),
                "authorization": self.headers.get("Authorization"),
                "messages": messages,
            },
            "chat",
            f"chat:{kind}",
            f"mode:{mode}",
        )
        if self._fault(mode, delay_s):
            return
        if kind == "unknown":
            self._error(400, "stub: unrecognised system prompt", "invalid_request_error", None)
            return
        finish_reason = "stop"
        if mode == "invalid_json":
            content = _NOT_JSON
        elif mode == "bad_schema":
            content = _answer_bad_schema(kind)
        else:
            try:
                content = _answer_ok(kind, system, user)
            except ValueError as exc:
                self._error(400, f"stub: {exc}", "invalid_request_error", None)
                return
            if mode == "truncated":
                content, finish_reason = content[: len(content) // 2], "length"
        message: dict[str, Any] = {"role": "assistant", "content": content}
        reasoning = ""
        if mode == "reasoning":
            reasoning = message["reasoning_content"] = _thinking(kind)
        elif mode == "reasoning_only":
            reasoning = message["reasoning_content"] = f"{_thinking(kind)}\n{content}"
            message["content"] = ""
        usage = _usage(state, system, user, message["content"], reasoning)
        self._send(
            200,
            {
                "id": f"chatcmpl-stub{next(state.ids)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", "deepseek-chat"),
                "system_fingerprint": "fp_stub",
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "logprobs": None,
                        "finish_reason": finish_reason,
                    }
                ],
                "usage": usage,
            },
        )

    def _embeddings(self, body: dict[str, Any]) -> None:
        state = self.server.state
        raw_input = body.get("input", [])
        texts = [raw_input] if isinstance(raw_input, str) else list(raw_input)
        encoding = body.get("encoding_format", "float")
        mode, delay_s = state.take_mode()
        state.record(
            {"endpoint": "embeddings", "mode": mode, "model": body.get("model"),
             "inputs": len(texts), "encoding_format": encoding},
            "embeddings",
            f"mode:{mode}",
        )  # fmt: skip
        if self._fault(mode, delay_s):
            return
        if mode in ("invalid_json", "bad_schema"):
            self._error(500, "stub: malformed modes are for chat only", "server_error", None)
            return
        with state.lock:
            dim = state.embed_dim or self.server.default_embed_dim
            reversed_order = state.embed_reversed
        embedder = HashingEmbedder(dim)
        data = []
        for index, text in enumerate(texts):
            vector = embedder.embed_one(str(text)).tolist()
            embedding: Any = vector
            if encoding == "base64":  # what the openai client asks for by default
                embedding = base64.b64encode(struct.pack(f"<{dim}f", *vector)).decode("ascii")
            data.append({"object": "embedding", "index": index, "embedding": embedding})
        if reversed_order:
            data.reverse()
        tokens = sum(_tokens(str(text)) for text in texts)
        self._send(
            200,
            {
                "object": "list",
                "data": data,
                "model": body.get("model", "stub-embedding"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )


class StubServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, embed_dim: int = 64) -> None:
        super().__init__((host, port), _Handler)
        self.state = StubState()
        self.default_embed_dim = embed_dim

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hung up mid-answer is normal here; anything else is a stub bug.
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | socket.timeout):
            return
        super().handle_error(request, client_address)


class OpenAIStub:
    """The test process's handle: the URL for clients and the control API over HTTP."""

    def __init__(self, server: StubServer) -> None:
        self._server = server
        host, port = server.server_address[:2]
        self.root = f"http://{host!s}:{port}"
        self.url = f"{self.root}/v1"
        self.api_key = "test-key"

    def worker_env(self, **settings: str | float | int) -> dict[str, str]:
        """Env of a worker process whose LLM is this stub, plus ``MEMHARNESS_<NAME>`` extras."""
        env = {
            "MEMHARNESS_LLM_PROVIDER": "openai",
            "MEMHARNESS_LLM_BASE_URL": self.url,
            "MEMHARNESS_LLM_API_KEY": self.api_key,
        }
        env.update({f"MEMHARNESS_{name.upper()}": str(value) for name, value in settings.items()})
        return env

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = json.dumps(body).encode("utf-8") if body is not None else None
        request = urllib.request.Request(
            self.root + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer

    def control(
        self,
        mode: str | None = None,
        *,
        times: int | None = None,
        delay_s: float = 0.0,
        embed_dim: int | None = None,
        embed_reversed: bool | None = None,
        usage_style: str | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if mode is not None:
            body.update({"mode": mode, "times": times, "delay_s": delay_s})
        if embed_dim is not None:
            body["embed_dim"] = embed_dim
        if embed_reversed is not None:
            body["embed_reversed"] = embed_reversed
        if usage_style is not None:
            body["usage_style"] = usage_style
        return self._call("POST", "/_control", body)

    def reset(self) -> dict[str, Any]:
        return self._call("POST", "/_reset", {})

    def stats(self) -> dict[str, Any]:
        return self._call("GET", "/_stats")

    def count(self, key: str) -> int:
        """A counter from ``/_stats``: ``chat``, ``chat:judge``, ``embeddings``, ``mode:slow``."""
        return int(self.stats()["counts"].get(key, 0))


@contextlib.contextmanager
def serve_stub(*, embed_dim: int = 64, port: int = 0) -> Iterator[OpenAIStub]:
    """Run the stub on 127.0.0.1 (a free port unless given) in a background thread."""
    server = StubServer("127.0.0.1", port, embed_dim=embed_dim)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield OpenAIStub(server)
    finally:
        server.state.stopping.set()  # wakes handlers sleeping in slow mode
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--embed-dim", type=int, default=64)
    args = parser.parse_args()
    with serve_stub(embed_dim=args.embed_dim, port=args.port) as stub:
        print(f"OpenAI-compatible stub on {stub.url} (Ctrl-C stops it)")
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
