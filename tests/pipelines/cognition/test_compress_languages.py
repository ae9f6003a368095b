"""The two-stage protocol and the offline compressor in both languages: every rule written for
Chinese beside the English rule it mirrors (turns, clauses, labels, kinds, rationales, root
causes, chatter, telegraphic outcomes, pronouns, identifiers), and the whole two-week project
compressed in English, Chinese and mixed text."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pipelines.cognition.compress import compress_group, plan_groups
from pipelines.cognition.kinds import classify_segment, strip_reactions
from pipelines.cognition.levels import LevelPolicy
from pipelines.cognition.offline_compress import OFFLINE, resolve_references, telegraphic
from pipelines.cognition.protocol import (
    AnnotateRequest,
    CompressRequest,
    SegmentAnnotation,
    SegmentKind,
    SourceMemory,
    SummaryOutput,
    check_summary,
    missing_identifiers,
    parse_annotations,
)
from pipelines.cognition.quality import QualityVerdict, check_compression
from pipelines.cognition.segments import (
    is_question,
    segment_sources,
    split_clauses_han,
    split_turn,
)
from pipelines.records import Level
from pipelines.text.words import word_count
from tests.support.project_history import history
from tests.support.project_history_zh import history_mixed, history_zh

T0 = datetime(2026, 11, 3, 9, tzinfo=UTC)


def source(n: int, content: str, *, at: datetime = T0) -> SourceMemory:
    return SourceMemory(
        id=uuid.UUID(int=n),
        tenant_id="acme",
        task_id="task-1",
        session_id="s1",
        timestamp=at + timedelta(seconds=n),
        content=content,
        source_words=word_count(content),
    )


# -- turns and clauses -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "speaker", "body"),
    [
        ("Dana: Ran the suite.", "Dana", "Ran the suite."),
        ("王经理：周报请用简洁的要点式。", "王经理", "周报请用简洁的要点式。"),
        ("助手: 状态：工单 PAY-1 已完成。", "助手", "状态：工单 PAY-1 已完成。"),
        # a label before the colon says what the line is, not who said it
        ("状态：工单 PAY-1 已完成。", None, "状态：工单 PAY-1 已完成。"),
        ("决策记录：会话存储用 Redis。", None, "决策记录：会话存储用 Redis。"),
        ("Status：ticket PAY-1 moved to done，已完成。", None, None),
    ],
)
def test_a_turn_is_split_from_its_speaker_but_not_from_its_label(
    line: str, speaker: str | None, body: str | None
) -> None:
    assert split_turn(line) == (speaker, body if body is not None else line)


def test_chinese_clauses_end_at_full_width_marks_and_keep_identifiers_whole() -> None:
    sentence = (
        "在分支 feature/pay-0 上跑了测试：100 个通过，"
        + "tests/test_a.py::x 里有 2 个不稳定；02:00 再跑"
    )
    assert split_clauses_han(sentence) == [
        "在分支 feature/pay-0 上跑了测试",
        "100 个通过",
        "tests/test_a.py::x 里有 2 个不稳定",
        "02:00 再跑",
    ]


def test_a_question_ends_with_either_question_mark() -> None:
    assert is_question("How are you doing?") and is_question("你们明天几点开会？")
    assert not is_question("好的。")


def test_chinese_segments_are_sentences_with_speakers_and_addressees() -> None:
    rows = [
        source(1, "王经理：周报请用简洁的要点式。先写结论再写细节。"),
        source(2, "助手：好的。状态：工单 PAY-1 已完成。"),
    ]
    segments = segment_sources(rows)
    assert [(s.speaker, s.addressee, s.text) for s in segments] == [
        ("王经理", "助手", "周报请用简洁的要点式。"),
        ("王经理", "助手", "先写结论再写细节。"),
        ("助手", "王经理", "好的。"),
        ("助手", "王经理", "状态：工单 PAY-1 已完成。"),
    ]


# -- kinds -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("We decided to use Redis for sessions because it expires keys.", "decision_rationale"),
        ("我们决定用 Redis 存会话，因为它自带过期机制。", "decision_rationale"),
        # a reason for what is no status change marks a decision in Chinese
        ("签名密钥每 30 天轮换一次，原因是安全规范 SEC-7 的硬性要求。", "decision_rationale"),
        ("I prefer short status updates for routine work.", "user_preference"),
        ("周报请用简洁的要点式，先写结论再写细节。", "user_preference"),
        ("The frontend release is delayed until ATL-9 lands.", "status_change"),
        ("支付模块的联调因为认证模块延期而推迟，预计晚两周。", "status_change"),
        ("The 500 error came back, caused by a missing index.", "error_root_cause"),
        ("线上下单接口报 500 错误，原因是连接池耗尽。", "error_root_cause"),
        ("Thanks, that's great!", "chatter"),
        ("收到，谢谢", "chatter"),
        ("好的，没问题。", "chatter"),
        ("How are you doing?", "chatter"),
        ("你们明天几点开会？", "chatter"),
        ("Migrated 115 user rows to the new sessions table without errors.", "outcome"),
        # "no errors" is no error, "the timeout setting" no timeout, "迁移到" no move
        ("把 115 条订单记录迁移到新的 payments 表，没有报错。", "outcome"),
        ("支付网关的超时时间是多少？", "outcome"),
        # an identifier in a clause of pure reaction is none
        ("OK的，没问题", "chatter"),
    ],
)
def test_segment_kinds_in_both_languages(text: str, kind: str) -> None:
    assert classify_segment(text)[0] is SegmentKind(kind)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("决策记录：会话存储用 Redis。", SegmentKind.DECISION_RATIONALE),
        ("状态变更：认证模块进入联调。", SegmentKind.STATUS_CHANGE),
        ("用户偏好：回答先给命令。", SegmentKind.USER_PREFERENCE),
        ("错误：部署脚本 deploy.sh 退出码 137。", SegmentKind.ERROR_ROOT_CAUSE),
    ],
)
def test_a_chinese_label_names_the_kind(text: str, kind: SegmentKind) -> None:
    assert classify_segment(text)[0] is kind


@pytest.mark.parametrize(
    ("text", "rationale"),
    [
        (
            "Going with gRPC for the event bus, because it streams back-pressure.",
            "because it streams back-pressure",
        ),
        ("我们决定用 Redis 存会话，因为它自带过期机制。", "因为它自带过期机制"),
        ("会话改用 Redis，由于它自带过期机制。", "由于它自带过期机制"),
        ("签名密钥每 30 天轮换一次，原因是 SEC-7 的要求。", "原因是 SEC-7 的要求"),
        # after 所以 comes the consequence: the reason is what precedes it
        ("SEC-12 没通过，所以认证模块改为下个版本上线。", "SEC-12 没通过"),
    ],
)
def test_the_rationale_of_a_decision_is_kept_verbatim(text: str, rationale: str) -> None:
    kind, found, _ = classify_segment(text)
    assert kind is SegmentKind.DECISION_RATIONALE
    assert found == rationale


@pytest.mark.parametrize(
    ("text", "cause"),
    [
        ("The 500 error came back, caused by a missing index.", "a missing index"),
        ("线上下单接口报 500 错误，原因是连接池耗尽。", "连接池耗尽"),
        # before 导致 / 引起 comes the cause
        ("上次周五发布导致登录故障。", "上次周五发布"),
    ],
)
def test_the_root_cause_of_an_error(text: str, cause: str) -> None:
    kind, _, root = classify_segment(text)
    assert kind is SegmentKind.ERROR_ROOT_CAUSE
    assert root == cause


def test_reactions_are_whole_clauses() -> None:
    assert strip_reactions("收到，谢谢") == ""
    assert strip_reactions("辛苦了，明天再聊。") == ""
    # a reaction word inside a clause that says something stays ("可以" in 可以用)
    assert strip_reactions("好的，可以用 Redis。") == "可以用 Redis"
    assert strip_reactions("Thanks, that's great!") == "Thanks, that's great!"


# -- stage 2 by rules ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "speaker", "expected"),
    [
        ("Well, I really did not like the new CI runner at all.", "Joe", "not like new CI runner"),
        # function words and particles go, negations and identifiers stay
        (
            "把 115 条订单记录迁移到新的 payments 表，没有报错。",
            None,
            "115 条订单记录迁移到新 payments 表 没有报错",
        ),
        ("在分支 feature/pay-0 上跑了集成测试", "王经理", "分支 feature/pay-0 上跑 集成测试"),
    ],
)
def test_telegraphic_keeps_content_and_negations(
    text: str, speaker: str | None, expected: str
) -> None:
    assert telegraphic(text, speaker) == expected


def test_pronouns_resolve_in_both_languages() -> None:
    english = resolve_references(
        "She said you should rebase.", addressee="Dana", third_person="Priya"
    )
    assert english == "Priya said Dana should rebase."
    chinese = resolve_references(
        "他要求把提交拆小，你看一下其他的。", addressee="王经理", third_person="李工"
    )
    # 其他 ("other") holds 他 and is no pronoun
    assert chinese == "李工要求把提交拆小，王经理看一下其他的。"


def test_a_chinese_third_person_is_the_one_person_named_before() -> None:
    # given a conversation that names 李工, then speaks of him
    rows = [
        source(1, "王经理：李工负责认证模块的重构。"),
        source(2, "助手：好的，他预计什么时候完成？"),
        source(3, "王经理：他说周三之前提交合并请求。"),
    ]
    batch = OFFLINE.annotate_segments(AnnotateRequest(segments=segment_sources(rows)))
    # then the people of a segment are its names, and 他 is 李工 in the next segments
    assert batch.segments[0].entities == ["李工", "王经理"]
    assert batch.segments[1].resolved.startswith("好的，李工预计")
    assert batch.segments[2].resolved.startswith("李工说")


PROJECT_ZH = [
    source(1, "王经理：大家好"),
    source(2, "助手：我们决定用 Redis 存会话，因为它自带过期机制，不用自己写清理任务。"),
    source(3, "王经理：周报请用简洁的要点式，先写结论再写细节。"),
    source(
        4,
        "助手：在分支 feature/pay-2 上跑了集成测试：114 个用例通过，tests/test_gateway.py 里有 2 个"
        "不稳定。",
    ),
    source(5, "王经理：收到，谢谢"),
    source(6, "助手：状态：工单 PAY-2 已完成。"),
    source(7, "助手：错误：部署脚本 deploy.sh 退出码 137，原因是内存不足。"),
]


def test_offline_compression_keeps_what_the_protocol_promises_in_chinese() -> None:
    # given a ratio of 1: nothing dropped for the budget, only by the protocol's rules
    draft = compress_group(PROJECT_ZH, Level.L1, policy=LevelPolicy(ratio_l1=1)).draft
    text = draft.content
    # then decisions with their reason, preferences, status changes and errors are verbatim
    for verbatim in (
        "我们决定用 Redis 存会话，因为它自带过期机制，不用自己写清理任务。",
        "周报请用简洁的要点式，先写结论再写细节。",
        "状态：工单 PAY-2 已完成。",
        "错误：部署脚本 deploy.sh 退出码 137，原因是内存不足。",
    ):
        assert verbatim in text
    # and the chatter is gone, the outcome telegraphic with its identifiers
    assert "大家好" not in text and "收到" not in text
    assert "分支 feature/pay-2 上跑 集成测试，114 个用例通过" in text
    assert "tests/test_gateway.py" in text
    assert draft.kinds["chatter"] == 2 and draft.kinds["outcome"] == 1


def test_a_budget_drops_chinese_outcomes_and_lists_their_identifiers() -> None:
    # given the default 10:1 target and a day of outcomes beside the verbatim segments
    rows = PROJECT_ZH + [
        source(10 + i, f"助手：在 host{i} 上压测了下单接口，每秒处理 {i * 7} 个请求。")
        for i in range(12)
    ]
    draft = compress_group(rows, Level.L1).draft
    # then at most one unit in ten is dropped, never a verbatim segment, and the ids of the
    # dropped outcomes are listed
    assert "我们决定用 Redis 存会话，因为它自带过期机制，不用自己写清理任务。" in draft.content
    assert "集成测试" in draft.content
    # (each outcome is two clauses, 35 units in all: at most 3 go)
    dropped = 12 - draft.content.count("每秒处理")
    assert 0 < dropped <= 3
    assert "\nids: " in draft.content
    for identifier in ("feature/pay-2", "tests/test_gateway.py", "114 个", "host0", "77 个"):
        assert identifier in draft.content


def request_for(rows: list[SourceMemory]) -> CompressRequest:
    segments = segment_sources(rows)
    annotations = [
        SegmentAnnotation(index=s.index, kind=classify_segment(s.text)[0], resolved=s.text)
        for s in segments
    ]
    return CompressRequest(
        level=Level.L1, target_words=10, segments=segments, annotations=tuple(annotations)
    )


def test_a_model_summary_must_keep_chinese_verbatim_segments() -> None:
    from pipelines.errors import MalformedLLMOutput

    request = request_for([source(1, "助手：状态：工单 PAY-2 已完成。")])
    kept = check_summary(SummaryOutput(text="助手: 状态：工单 PAY-2 已完成。"), request)
    assert kept.text == "助手: 状态：工单 PAY-2 已完成。"
    with pytest.raises(MalformedLLMOutput):
        check_summary(SummaryOutput(text="PAY-2 完成了"), request)


def test_chinese_identifiers_are_found_as_text() -> None:
    annotation = SegmentAnnotation(
        index=0,
        kind=SegmentKind.DECISION_RATIONALE,
        resolved="",
        identifiers=["30 天", "SEC-7", "张工"],
    )
    # "30 天" is in "每30天轮换" although 天 is part of the bigram 天轮 there
    assert missing_identifiers("张工：签名密钥每30天轮换一次（SEC-7）", [annotation]) == []
    assert missing_identifiers("签名密钥按 SEC-7 轮换", [annotation]) == ["30 天", "张工"]


def test_a_model_may_name_the_kinds_with_their_chinese_labels() -> None:
    request = AnnotateRequest(
        segments=segment_sources([source(1, "助手：状态：工单 PAY-2 已完成。")])
    )
    raw = (
        '{"segments": [{"index": 0, "kind": "状态变更", "resolved": "状态：工单 PAY-2 已完成。"}]}'
    )
    (annotation,) = parse_annotations(raw, request).segments
    assert annotation.kind is SegmentKind.STATUS_CHANGE


# -- the two-week project ----------------------------------------------------------------------

Histories = Callable[[datetime], list[dict[str, Any]]]


@pytest.mark.parametrize(
    "make_history", [history, history_zh, history_mixed], ids=["en", "zh", "mixed"]
)
def test_the_project_compresses_alike_in_every_language(make_history: Histories) -> None:
    # given the two weeks, one L1 group per session
    rows = [
        source(i, item["content"], at=item["timestamp"] - timedelta(seconds=i)).model_copy(
            update={"session_id": item["session_id"]}
        )
        for i, item in enumerate(make_history(T0), start=1)
    ]
    groups = plan_groups(rows, Level.L1)
    drafts = [compress_group(group, Level.L1).draft for group in groups]

    # then every session kept its decisions and status changes word for word, and dropped
    # its chatter, whatever the language
    assert len(drafts) == 28
    kinds = [d.kinds for d in drafts]
    assert all(k.get("decision_rationale", 0) >= 1 for k in kinds)
    assert sum(k.get("chatter", 0) for k in kinds) >= 14
    assert sum(k.get("status_change", 0) for k in kinds) >= 9
    assert all(d.summary_words < d.source_words for d in drafts)


def test_a_chinese_chat_compresses_to_half_and_keeps_its_facts() -> None:
    # given a chat whose replies only react (哇，恭喜恭喜 / 好可爱 / 那就好)
    lines = [
        "小陈: 早上好！",
        "小刘: 早上好，周末过得怎么样？",
        "小陈: 我上个月搬到杭州了，现在住在西湖区。",
        "小刘: 哇，恭喜恭喜",
        "小陈: 我家猫叫馒头，是一只三岁的英短。",
        "小刘: 好可爱",
        "小陈: 它上周做了绝育手术，恢复得很好。",
        "小刘: 那就好",
        "小陈: 好的，回头聊",
    ]
    rows = [source(i, text) for i, text in enumerate(lines, 1)]
    # when it is compressed to L1
    draft = compress_group(rows, Level.L1).draft
    # then the summary is at most half the chat, the reactions are gone
    assert draft.summary_words * 2 <= draft.source_words
    for reaction in ("恭喜", "可爱", "那就好", "回头聊"):
        assert reaction not in draft.content
    # and every labeled fact is still there, the quality check agreeing
    for fact in ("杭州", "西湖区", "馒头", "三岁", "英短", "绝育手术"):
        assert fact in draft.content
    assert check_compression(rows, draft).verdict is QualityVerdict.KEEP


@pytest.mark.parametrize("text", ["哇，恭喜恭喜", "好可爱", "那就好", "真好，太棒了"])
def test_chinese_reactions_are_chatter(text: str) -> None:
    assert classify_segment(text)[0] is SegmentKind.CHATTER
