"""The automatic path of corrections: which older memory a new one supersedes, which pairs are
kept as conflicts, and what a model's confirmation changes."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from pipelines.errors import MalformedLLMOutput, TransientLLMError
from pipelines.own.contradict import (
    ConfirmVerdict,
    CorrectionAnswer,
    CorrectionRequest,
    Verdict,
    confirm,
    contradicted,
    judge_pair,
)
from pipelines.own.statements import has_correction_cue
from pipelines.records import EpisodicMemory, Level

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def memory(text: str, kind: str = "preference", minute: int = 0, **extra: object) -> EpisodicMemory:
    fields: dict[str, object] = {
        "id": uuid.uuid4(),
        "tenant_id": "acme",
        "user_id": "dana",
        "task_id": "t",
        "session_id": "s",
        "timestamp": T0 + timedelta(minutes=minute),
        "type": kind,
        "content": text,
        "status": "stored",
    }
    fields.update(extra)
    return EpisodicMemory.model_validate(fields)


@pytest.mark.parametrize(
    ("old", "new", "kind"),
    [
        (
            "I prefer tabs for indentation.",
            "Actually I now prefer spaces for indentation.",
            "preference",
        ),
        ("I like brief answers.", "I want detailed answers.", "preference"),
        (
            "We decided to use PostgreSQL for storage.",
            "Actually we decided to use MySQL for storage instead.",
            "decision",
        ),
        ("我喜欢用制表符缩进。", "我现在改用空格缩进。", "preference"),
        ("数据库决定使用 PostgreSQL 存储。", "数据库改为使用 MySQL 存储。", "decision"),
    ],
)
def test_a_later_opposite_statement_on_the_same_topic_supersedes(
    old: str, new: str, kind: str
) -> None:
    earlier, later = memory(old, kind), memory(new, kind, minute=5)

    [found] = contradicted(later, [earlier])

    assert (found.old_id, found.new_id) == (earlier.id, later.id)
    assert found.verdict is Verdict.SUPERSEDE
    assert found.reason.startswith("automatic:")


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # a single value changed, with or without a cue
        ("The auth module deadline is May 3.", "The auth module deadline is May 10."),
        ("支付模块负责人是张工。", "支付模块负责人改为李工。"),
        ("上线时间定在 5 月 3 日。", "上线时间推迟到 5 月 10 日。"),
        (
            "The API rate limit is 100 requests per minute.",
            "The API rate limit is now 200 requests per minute.",
        ),
        # the same module's choice changed, each with its own reason
        (
            "报表模块的缓存决定用 Redis，不用 Memcached，因为运维组已经在生产上跑了两年。",
            "变更：报表模块的缓存不再用 Redis，改成 Memcached，因为云厂商的托管版本更便宜。",
        ),
        # the same statement negated
        (
            "We will migrate to Kubernetes this quarter.",
            "We will not migrate to Kubernetes this quarter.",
        ),
    ],
)
def test_a_changed_value_of_the_same_thing_supersedes(old: str, new: str) -> None:
    [found] = contradicted(memory(new, "decision", minute=5), [memory(old, "decision")])
    assert found.verdict is Verdict.SUPERSEDE


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # different topics
        (
            "We decided to use PostgreSQL for storage.",
            "We decided to ship the login page on Friday.",
        ),
        ("We decided to use PostgreSQL for storage.", "We decided to use Redis as the broker."),
        # the same stance restated
        ("I prefer brief answers.", "Please keep answers short."),
        # each holds in its own situation
        ("When reviewing architecture I want detailed answers.", "I like brief answers."),
        # another named thing, or two values changed at once: another subject
        (
            "We decided to run the canary of webhook retries in region eu-10.",
            "We decided to run the canary of webhook retries in region eu-15.",
        ),
        (
            "We decided the nightly backup of bucket archive-3 runs at 02:03 UTC.",
            "We decided the nightly backup of bucket archive-8 runs at 02:08 UTC.",
        ),
        # a new value, but of another thing named in other words
        (
            "We decided the rate limit of the search endpoint is 100 per minute.",
            "We decided the rate limit of the login endpoint is 5 per minute.",
        ),
        # the same decision and the same stock reason about two other modules (seen hiding
        # 20 true memories of the Chinese project set through real workers)
        (
            "我们决定选定 Kubernetes 作为账单系统的部署方式，Serverless 先不考虑了，"
            "因为团队里三个人都用过，上手快。",
            "我们决定选定 Kubernetes 作为支付模块的部署方式，Serverless 先不考虑了，"
            "因为供应商明年起不再给旧版本打补丁。",
        ),
        (
            "我们决定评审后确定：报表模块的数据库采用 TiDB，原因是供应商明年起不再给旧版本打补丁。",
            "我们决定网关的数据库用 TiDB，不用 MySQL，因为供应商明年起不再给旧版本打补丁。",
        ),
        # the same module, another of its parts (数据库 / 消息队列)
        (
            "我们决定评审后确定：报表模块的数据库采用 TiDB，原因是结账链路的 p99 要压在 321 毫秒。",
            "我们决定评审后确定：报表模块的消息队列采用 RabbitMQ，原因是供应商明年起不再打补丁。",
        ),
        (
            "We decided the billing service stores invoices in PostgreSQL because the ledger "
            "needs transactions.",
            "We decided the search service stores its index in Elasticsearch instead, because "
            "the ledger needs transactions.",
        ),
        # a long note that agrees in one sentence and is negative in another
        (
            "We decided to keep the outbox in PostgreSQL because it commits with the memory.",
            "We reviewed the billing rewrite today. The team decided to keep invoices in "
            "PostgreSQL because the ledger needs transactions. Status: the payments module is "
            "blocked on SEC-12 until the audit finishes. Nobody complained about lunch.",
        ),
    ],
)
def test_what_does_not_contradict_is_left_alone(old: str, new: str) -> None:
    kind = "decision" if "decided" in old else "preference"
    assert contradicted(memory(new, kind, minute=5), [memory(old, kind)]) == []


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # a question about the earlier statement (seen superseding a day-1 constraint)
        (
            "关键约束二：认证模块的 JWT 迁移不能影响线上用户会话，必须灰度发布。",
            "认证模块的JWT迁移有什么约束？",
        ),
        ("The auth module deadline is May 3.", "Is the auth module deadline still May 3?"),
        # an unrelated turn of a chat (seen superseding a hike and a campfire)
        (
            "Melanie: We roasted marshmallows around the campfire and then went on a hike.",
            "Melanie: Nope, never been to something like that. What was it about?",
        ),
        # copies and elaborations
        (
            "Remind me to renew the TLS certificate on Friday.",
            "Remind me to renew the TLS certificate on Friday.",
        ),
        ("提醒：周五前续签 TLS 证书。", "提醒：周五前续签TLS证书，别忘了。"),
        (
            "We use PostgreSQL for the orders database.",
            "We use PostgreSQL for the orders database, with a read replica.",
        ),
        # another speaker
        (
            "Dana: I think we should use Kafka for the event bus.",
            "Lee: I think we should use RabbitMQ for the event bus.",
        ),
        # an agreement, worded the other way round
        ("周报请用简洁的要点式。", "周报不要写太长，要简洁。"),
        # a report that mentions it
        (
            "We decided the release date is May 3.",
            "Weekly update: the release date is May 10, the billing rewrite started, QA found "
            "two bugs, and the team offsite moved to June.",
        ),
    ],
)
def test_questions_copies_other_speakers_and_reports_supersede_nothing(old: str, new: str) -> None:
    found = contradicted(memory(new, "decision", minute=5), [memory(old, "decision")])
    assert [f for f in found if f.verdict is Verdict.SUPERSEDE] == []


def test_weaker_signs_keep_both_as_a_conflict() -> None:
    earlier = memory(
        "Keep the weekly status report brief, in bullet points for the whole team.", "preference"
    )
    later = memory("I want detailed weekly status reports.", "preference", minute=5)

    [found] = contradicted(later, [earlier])

    assert found.verdict is Verdict.CONFLICT
    assert "may state the opposite" in found.reason


def test_only_earlier_episodes_of_the_same_user_and_a_correctable_type_count() -> None:
    new = memory("I want detailed answers.", minute=5)
    candidates = [
        memory("I like brief answers.", minute=9),  # later
        memory("I like brief answers.", user_id="sam"),  # another user
        memory("I like brief answers.", kind="observation"),  # not a preference or decision
        memory("I like brief answers.", level=Level.L1),  # a summary
    ]
    assert contradicted(new, candidates) == []
    assert contradicted(memory("Noted.", kind="observation"), candidates) == []


def test_correction_cues_in_both_languages() -> None:
    assert has_correction_cue("Actually, let's use spaces")
    assert has_correction_cue("we no longer deploy on Fridays")
    assert has_correction_cue("以后改用空格")
    assert not has_correction_cue("We use spaces")


def test_a_report_stating_a_correction_plainly_makes_a_conflict_not_a_supersession() -> None:
    earlier = memory("We decided to use PostgreSQL for storage.", "decision")
    later = memory(
        "Meeting notes from Tuesday. Actually we decided to use MySQL for storage instead. "
        "Bob will share the plan on Friday.",
        "decision",
        minute=5,
    )

    [found] = contradicted(later, [earlier])

    assert found.old_id == earlier.id
    assert found.verdict is Verdict.CONFLICT
    assert found.reason.startswith("automatic: a later decision a report")


class Model:
    """A CorrectionLLM answering from a script: a verdict, or an exception to raise."""

    name = "scripted"

    def __init__(self, *answers: ConfirmVerdict | Exception) -> None:
        self.answers = list(answers)
        self.asked: list[CorrectionRequest] = []

    def confirm_correction(self, request: CorrectionRequest) -> CorrectionAnswer:
        self.asked.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return CorrectionAnswer(verdict=answer, reason="scripted")


def _proposal() -> tuple[EpisodicMemory, EpisodicMemory]:
    return (
        memory("The auth module deadline is May 3.", "decision"),
        memory("The auth module deadline is May 10.", "decision", minute=5),
    )


@pytest.mark.parametrize(
    ("answers", "expected"),
    [
        ((ConfirmVerdict.SUPERSEDES,), Verdict.SUPERSEDE),
        ((ConfirmVerdict.CONFLICT,), Verdict.CONFLICT),
        ((ConfirmVerdict.UNRELATED,), None),
        # one retry on a malformed answer, as every protocol gets
        ((MalformedLLMOutput("invalid JSON"), ConfirmVerdict.SUPERSEDES), Verdict.SUPERSEDE),
        # no answer: both stay, never a supersession on the rule's word alone
        ((MalformedLLMOutput("x"), MalformedLLMOutput("y")), Verdict.CONFLICT),
        ((TransientLLMError("LLM timeout"),), Verdict.CONFLICT),
    ],
)
def test_the_model_confirms_or_weakens_each_proposal(
    answers: tuple[ConfirmVerdict | Exception, ...], expected: Verdict | None
) -> None:
    old, new = _proposal()
    proposals = contradicted(new, [old])
    model = Model(*answers)

    confirmed = confirm(model, new, [old], proposals)

    assert [c.verdict for c in confirmed] == ([expected] if expected else [])
    assert model.asked[0].older.content == old.content
    assert model.asked[0].newer.date == "2026-11-01"
    if expected is Verdict.CONFLICT:
        assert "both kept" in confirmed[0].reason or "model:" in confirmed[0].reason


def test_the_model_cannot_turn_a_conflict_into_a_supersession() -> None:
    earlier = memory(
        "Keep the weekly status report brief, in bullet points for the whole team.", "preference"
    )
    later = memory("I want detailed weekly status reports.", "preference", minute=5)
    proposals = contradicted(later, [earlier])

    [kept] = confirm(Model(ConfirmVerdict.SUPERSEDES), later, [earlier], proposals)

    assert kept.verdict is Verdict.CONFLICT


def test_the_offline_confirmation_is_the_rule_itself() -> None:
    assert judge_pair("I like brief answers.", "I like brief answers.") is None


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # the old value named again beside its replacement, with a cue
        ("The mobile app uses Redux for state.", "We dropped Redux in the mobile app for Zustand."),
        ("移动端的状态管理用 Redux。", "移动端去掉了 Redux，状态管理用 Zustand。"),
        # one kind of value changed, the rest said again with a reason added
        (
            "Sprint 14 ends on the 9th.",
            "We're extending sprint 14 by a week, so it ends on the 16th.",
        ),
        ("接口限流是每个密钥每分钟100次。", "接口限流调到每个密钥每分钟300次。"),
        (
            "Migration window: Saturday 02:00-04:00 UTC.",
            "Migration window: Sunday 01:00-03:00 UTC.",
        ),
    ],
)
def test_a_replaced_value_of_the_same_statement_supersedes(old: str, new: str) -> None:
    judged = judge_pair(old, new)

    assert judged is not None and judged[0] is Verdict.SUPERSEDE


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # another subject: a word of the old statement besides its value is not said again
        ("The staging database runs PostgreSQL 14.", "The production database runs PostgreSQL 16."),
        ("搜索接口限流每分钟100次。", "登录接口限流每分钟5次。"),
        # a name and a date changed at once
        ("The iOS beta ships on March 3.", "The Android beta ships on March 10."),
        # the side and the thing changed at once
        ("I prefer tabs in Go files.", "I prefer spaces in YAML files."),
        # the same protocol decision about two modules (the project history's template)
        (
            "赵工：我们选定 GraphQL 作为认证模块的接口协议，REST 先不考虑了。",
            "赵工：我们选定 gRPC 作为账单系统的接口协议，GraphQL 先不考虑了。",
        ),
        # a new value where the old named none: an addition, even with a cue word
        (
            "Keep audit logs for one year.",
            "Audit logs older than 30 days move to cold storage but are kept for the year.",
        ),
    ],
)
def test_another_subject_or_an_addition_supersedes_nothing(old: str, new: str) -> None:
    judged = judge_pair(old, new)

    assert judged is None or judged[0] is Verdict.CONFLICT


@pytest.mark.parametrize(
    "new",
    [
        "Release notes 4.1: rate limit raised to 300 requests per minute; new export button.",
        "Rate limit raised to 300 per minute; new export button; bug fixes.",
    ],
)
def test_a_labelled_report_or_a_list_is_a_conflict_at_most(new: str) -> None:
    judged = judge_pair("The rate limit is 100 requests per minute.", new)

    assert judged is None or judged[0] is Verdict.CONFLICT
