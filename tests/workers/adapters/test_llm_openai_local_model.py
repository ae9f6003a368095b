"""Every call the engine makes of a model, answered by a real one: SmolLM2-135M-Instruct
behind llama.cpp's OpenAI-compatible server, reached through the adapter a worker builds
(``build_llm`` from the settings ``memharness llm serve`` prints).

A 135M model is far too weak to decide well, so these tests check the contract, not the
answers: each port method returns a schema-valid object or raises the adapter's documented
error (MalformedLLMOutput, TransientLLMError), and each pipeline around it ends in a valid
state, falling back to the offline rules with the reason when the model's answers are cut or
wrong. A server killed mid-batch surfaces as a transient error, for the job to retry.

Marked ``model``: only ``make test-model`` runs them; without ``make install-local-llm`` they
skip and say so. ``-rP`` shows what each call returned and how long it took.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pipelines.answers import ask_with_fallback
from pipelines.cognition.causal import CausalBatch
from pipelines.cognition.compress import compress_group
from pipelines.cognition.knowledge import KnowledgeBatch
from pipelines.cognition.protocol import (
    AnnotateRequest,
    AnnotationBatch,
    CompressRequest,
    SourceMemory,
    SummaryOutput,
)
from pipelines.cognition.segments import segment_sources
from pipelines.errors import MalformedLLMOutput, TransientLLMError
from pipelines.own.contradict import (
    CorrectionAnswer,
    Verdict,
    confirm,
    contradicted,
    correction_request,
)
from pipelines.ports import LLM
from pipelines.read.focus import FocusDirective, decide_focus
from pipelines.read.rerank import RerankItem
from pipelines.read.rewrite import QueryVariants, rewrite_query
from pipelines.records import EpisodicMemory, Level, MemoryType, TaskPhase
from pipelines.state.calibration import ResumeCalibration
from pipelines.state.codec import new_checkpoint
from pipelines.state.models import ActionEffect, PendingAction, TaskNode, TaskState
from pipelines.text.words import word_count
from pipelines.write.decide import WriteJudgement, decide_write, offline_judge
from tests.support.local_model import LocalServer, serve_local_model
from workers.adapters import build_llm

pytestmark = [pytest.mark.model, pytest.mark.timeout(900)]

WHEN = datetime(2026, 11, 3, 9, tzinfo=UTC)
DECISION = "We decided to keep invoices in PostgreSQL because the ledger needs transactions."
TURNS = [
    "Dana: Ran the integration suite on branch feature/oauth-2: 114 tests passed.",
    "Agent: We decided to use PKCE for the mobile client because the app cannot keep a secret.",
    "Dana: Thanks, that helps!",
    "Dana: I prefer brief answers with the commands first.",
]
QUESTION = "Why did we decide to keep invoices in PostgreSQL?"
ITEMS = [
    RerankItem(id="a", content=DECISION, timestamp=WHEN, type=MemoryType.DECISION),
    RerankItem(
        id="b",
        content="The reminder job sends e-mails at 09:00 UTC.",
        timestamp=WHEN + timedelta(hours=1),
        type=MemoryType.ACTION,
    ),
    RerankItem(id="c", content="thanks!", timestamp=WHEN + timedelta(hours=2), type=None),
]


@pytest.fixture(scope="module")
def server() -> Iterator[LocalServer]:
    with serve_local_model("smollm2") as running:
        yield running


@pytest.fixture(scope="module")
def llm(server: LocalServer) -> LLM:
    # 256 tokens hold every answer these small inputs need; a model that rambles is cut in
    # seconds instead of running to the 120 s timeout.
    return build_llm(server.settings(llm_max_tokens=256))


@pytest.fixture(autouse=True)
def server_survives(server: LocalServer) -> Iterator[None]:
    # A transient error is a documented answer, but not when the server died of a request:
    # every test ends with the shared server alive, or fails with its log.
    yield
    assert server.process.poll() is None, f"the model server died:\n{server.log_tail()}"


def memory(text: str, minutes: int = 0, **fields: Any) -> EpisodicMemory:
    return EpisodicMemory(
        id=uuid.uuid5(uuid.NAMESPACE_URL, text),
        tenant_id="acme",
        task_id="auth",
        session_id="s1",
        timestamp=WHEN + timedelta(minutes=minutes),
        content=text,
        **fields,
    )


def memories() -> list[EpisodicMemory]:
    return [memory(text, i) for i, text in enumerate(TURNS)]


def sources() -> list[SourceMemory]:
    return [
        SourceMemory(
            id=m.id,
            tenant_id=m.tenant_id,
            task_id=m.task_id,
            session_id=m.session_id,
            timestamp=m.timestamp,
            content=m.content,
            source_words=word_count(m.content),
        )
        for m in memories()
    ]


def annotate_request() -> AnnotateRequest:
    return AnnotateRequest(segments=tuple(segment_sources(sources())))


def compress_request() -> CompressRequest:
    from workers.adapters.llm_offline import OfflineLLM

    request = annotate_request()
    batch = OfflineLLM().annotate_segments(request)
    return CompressRequest(
        level=Level.L1,
        target_words=12,
        segments=request.segments,
        annotations=tuple(batch.segments),
    )


def checkpoint() -> Any:
    state = TaskState(
        phase="execution",
        tree=(
            TaskNode(id="n1", title="write the report", status="done"),
            TaskNode(id="n2", title="publish the report"),
        ),
        current_node_id="n2",
        pending_actions=(
            PendingAction(
                action_id="act-1",
                node_id="n2",
                tool="publish",
                arguments={"path": "reports/q3.md"},
                effect=ActionEffect.EXTERNAL_WRITE,
            ),
        ),
    )
    made, _ = new_checkpoint("acme", "report", state, parent_id=None, created_at=WHEN)
    return made


def _deadline_pair() -> tuple[EpisodicMemory, EpisodicMemory]:
    old = memory("The auth module deadline is May 3.", 0, type="decision")
    new = memory("The auth module deadline is May 10.", 6 * 24 * 60, type="decision")
    return old, new


def _causal_pair() -> tuple[EpisodicMemory, EpisodicMemory]:
    delay = memory("Agent: Status: the auth module is delayed to 2027-01-15 because of SEC-12.")
    blocked = memory("Agent: The mobile release is blocked by the auth module delay.", 5)
    return delay, blocked


# Each port method with its arguments and the type a parsed answer has.
CALLS: dict[str, tuple[Callable[[LLM], object], type]] = {
    "judge_write": (lambda llm: llm.judge_write(DECISION, None), WriteJudgement),
    "deep_judge_write": (
        lambda llm: llm.deep_judge_write(DECISION, None, offline_judge(DECISION, None)),
        WriteJudgement,
    ),
    "summarize": (lambda llm: llm.summarize(" ".join(TURNS), 20), str),
    "calibrate_resume": (lambda llm: llm.calibrate_resume(checkpoint(), 3600.0), ResumeCalibration),
    "focus_directive": (
        lambda llm: llm.focus_directive(QUESTION, TaskPhase.PLANNING, None),
        FocusDirective,
    ),
    "rewrite_query": (
        lambda llm: llm.rewrite_query(QUESTION, "planning", ["decisions"]),
        QueryVariants,
    ),
    "rerank": (
        lambda llm: llm.rerank(
            QUESTION,
            ITEMS,
            phase=TaskPhase.PLANNING,
            focus=decide_focus(QUESTION, phase=TaskPhase.PLANNING),
        ),
        list,
    ),
    "annotate_segments": (lambda llm: llm.annotate_segments(annotate_request()), AnnotationBatch),
    "compress_segments": (lambda llm: llm.compress_segments(compress_request()), SummaryOutput),
    "extract_knowledge": (lambda llm: llm.extract_knowledge(memories()), KnowledgeBatch),
    "propose_causal": (
        lambda llm: llm.propose_causal(_causal_pair()[1], [_causal_pair()[0]]),
        CausalBatch,
    ),
    "confirm_correction": (
        lambda llm: llm.confirm_correction(correction_request(*_deadline_pair())),
        CorrectionAnswer,
    ),
}


def test_every_port_method_is_exercised() -> None:
    assert {name for name in dir(LLM) if not name.startswith("_")} - {"name"} == set(CALLS)


@pytest.mark.parametrize("method", sorted(CALLS))
def test_each_answer_parses_or_fails_as_documented(llm: LLM, method: str) -> None:
    call, parsed_type = CALLS[method]
    started = time.monotonic()
    try:
        answer = call(llm)
    except (MalformedLLMOutput, TransientLLMError) as exc:
        print(f"{method}: {type(exc).__name__} ({exc}) in {time.monotonic() - started:.1f} s")
        return
    print(f"{method}: parsed in {time.monotonic() - started:.1f} s: {answer!r:.300}")
    assert isinstance(answer, parsed_type)
    if method == "rerank":
        assert len(answer) == len(ITEMS)  # type: ignore[arg-type]


# -- the pipelines around the calls end in a valid state ----------------------------------------


def test_a_write_decision_is_the_models_or_the_rules_with_the_reason(llm: LLM) -> None:
    outcome = decide_write(DECISION, None, llm)
    for verdict in outcome.verdicts:
        assert verdict.source in {llm.name, "offline-fallback"}
        if verdict.source == "offline-fallback":
            assert f"(fallback: {llm.name} answered" in verdict.reason
    print([(v.tier, v.source, v.keep, v.reason) for v in outcome.verdicts])


def test_a_compressed_group_is_always_made(llm: LLM) -> None:
    result = compress_group(sources(), Level.L1, llm, version=2)
    draft = result.draft
    assert draft.content.strip()
    assert draft.annotated_by in {llm.name, "offline-fallback"}
    assert draft.compressed_by in {llm.name, "offline-fallback"}
    print(draft.annotated_by, draft.compressed_by, draft.malformed_answers, repr(draft.content))


def test_focus_and_rewrite_answer_whatever_the_model_says(llm: LLM) -> None:
    directive = decide_focus(QUESTION, phase=TaskPhase.PLANNING, llm=llm)
    variants = rewrite_query(QUESTION, llm=llm, phase="planning")
    assert directive.kinds and variants.literal.strip()
    print(directive.source, variants.source)


def test_a_correction_supersedes_only_on_a_valid_answer(llm: LLM) -> None:
    old, new = _deadline_pair()
    proposals = contradicted(new, [old])
    [answer] = confirm(llm, new, [old], proposals)
    assert answer.verdict in set(Verdict)
    assert answer.reason
    print(answer.verdict, answer.reason)


# -- faults: cut answers, slow answers, a dead server --------------------------------------------


def test_answers_cut_at_max_tokens_fall_back_to_the_rules_with_the_reason(
    server: LocalServer,
) -> None:
    # given answers cut after a few tokens, half a JSON object each time
    cut = build_llm(server.settings(llm_max_tokens=4))

    # then the port says so, and ask_with_fallback answers with the rules after one retry
    with pytest.raises(MalformedLLMOutput, match="answer cut at max_tokens"):
        cut.judge_write(DECISION, None)
    fallback = offline_judge(DECISION, None)
    answer, by, malformed = ask_with_fallback(
        lambda: cut.judge_write(DECISION, None), lambda: fallback, cut.name
    )
    assert (answer, by, malformed) == (fallback, "offline-fallback", 2)
    [verdict] = decide_write(DECISION, None, cut).verdicts
    assert verdict.source == "offline-fallback"
    assert "answer cut at max_tokens (4)" in verdict.reason


def test_a_model_slower_than_the_timeout_is_transient(server: LocalServer) -> None:
    # llama.cpp finishes a request its client gave up on: keep that answer short
    slow = build_llm(server.settings(llm_timeout_s=0.01, llm_max_tokens=16))
    with pytest.raises(TransientLLMError, match="LLM timeout"):
        slow.summarize(" ".join(TURNS), 20)


def test_a_server_killed_mid_batch_is_a_transient_error() -> None:
    with serve_local_model("smollm2") as dying:
        llm = build_llm(dying.settings())
        outcomes: list[str] = []
        first_answered = threading.Event()

        def batch() -> None:
            for text in TURNS * 3:
                try:
                    llm.judge_write(text, None)
                    outcomes.append("answered")
                except MalformedLLMOutput:
                    outcomes.append("malformed")
                except TransientLLMError as exc:
                    outcomes.append(f"transient: {exc}")
                first_answered.set()

        # when the server is killed once the batch is under way
        worker = threading.Thread(target=batch)
        worker.start()
        assert first_answered.wait(timeout=300)
        dying.kill()
        worker.join(timeout=300)

        # then every later call is a transient error (the job retries it), none is lost
        assert len(outcomes) == len(TURNS) * 3
        assert outcomes[-1] == "transient: LLM connection failed"
        with pytest.raises(TransientLLMError):
            ask_with_fallback(
                lambda: llm.judge_write(DECISION, None),
                lambda: offline_judge(DECISION, None),
                llm.name,
            )
        with pytest.raises(TransientLLMError):
            decide_write(DECISION, None, llm)
        # and a correction the model cannot confirm keeps both statements, saying why
        old, new = _deadline_pair()
        [kept] = confirm(llm, new, [old], contradicted(new, [old]))
        assert kept.verdict is Verdict.CONFLICT
        assert "TransientLLMError" in kept.reason
        print(outcomes)
