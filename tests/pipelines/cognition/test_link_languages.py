"""Links in both languages: the entities of Chinese text (people, modules, ids, noun phrases),
causal proposals from Chinese cues in both directions, and ``affected_by`` reading a Chinese
question; the two-week project's causal chain followed in English, Chinese and mixed text."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pipelines.cognition.causal import propose_causal_offline
from pipelines.cognition.entities import extract_entities
from pipelines.cognition.link import (
    InMemoryLinks,
    LinkKind,
    affected_by,
    link_on_write,
    match_start,
)
from pipelines.records import EpisodicMemory
from tests.support.project_history import history
from tests.support.project_history_zh import history_mixed, history_zh

T0 = datetime(2026, 11, 10, 9, tzinfo=UTC)


def memory(n: int, text: str) -> EpisodicMemory:
    return EpisodicMemory(
        id=uuid.UUID(int=n),
        tenant_id="acme",
        task_id="payment-rewrite",
        session_id="s",
        timestamp=T0 + timedelta(hours=n),
        content=text,
    )


DELAY = memory(1, "助手：状态：认证模块延期到 2027 年 1 月 15 日，因为安全审计 SEC-12 没有通过。")
OWNER = memory(2, "助手：支付模块负责人是张工，因为他之前做过第三方支付网关的对接。")
POSTPONED = memory(3, "助手：支付模块的联调因为认证模块延期而推迟，预计晚两周。")
WAITING = memory(4, "助手：账单迁移依赖支付模块联调完成，目前只能等待。")
REVIEW = memory(5, "王经理：和李工一起评审了合并请求 #404，他要求补充单元测试。")


# -- entities --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "entities"),
    [
        (
            "The frontend release is blocked by the auth module delay.",
            {"frontend releas", "auth modul"},
        ),
        (DELAY.content, {"认证模块", "安全审计", "sec-12"}),
        # a head after a module, with or without 的, is that module's piece of work
        (POSTPONED.content, {"支付模块", "支付模块联调", "认证模块"}),
        (WAITING.content, {"账单迁移", "支付模块", "支付模块联调"}),
        (OWNER.content, {"张工", "支付模块", "第三方支付网关"}),
        (REVIEW.content, {"李工", "#404", "单元测试"}),
        # numbers with their unit and dates are no entities
        ("签名密钥每 30 天轮换一次，到 2027 年 3 月 1 日为止。", set()),
    ],
)
def test_entities_in_both_languages(text: str, entities: set[str]) -> None:
    assert extract_entities(text) == entities


def test_chinese_memories_naming_the_same_module_are_linked_by_entity() -> None:
    links = link_on_write(WAITING, entity_candidates=[OWNER, REVIEW], vector_hits=[])
    assert [(link.dst_id, link.kind) for link in links] == [(OWNER.id, LinkKind.ENTITY)]
    assert "支付模块" in links[0].reason


# -- causal proposals --------------------------------------------------------------------------


def edges(memory_: EpisodicMemory, candidates: list[EpisodicMemory]) -> set[tuple[int, int]]:
    batch = propose_causal_offline(memory_, candidates)
    return {(e.cause_id.int, e.effect_id.int) for e in batch.edges}


def test_the_memory_is_the_effect_of_what_follows_because_depends_and_waits() -> None:
    # 因为 X 而推迟: the memory naming X is the cause
    assert edges(POSTPONED, [DELAY, OWNER, REVIEW]) == {(1, 3)}
    # 依赖 X: of the memories naming 支付模块, the one about its 联调 is the cause
    assert edges(WAITING, [DELAY, OWNER, POSTPONED, REVIEW]) == {(3, 4)}
    waits = memory(6, "上线计划等待认证模块延期的结论。")
    assert edges(waits, [DELAY, REVIEW]) == {(1, 6)}
    # X，所以 Y: the clause before 所以 names the cause
    so = memory(7, "认证模块延期了，所以我们把发布窗口挪到下周。")
    assert edges(so, [DELAY, REVIEW]) == {(1, 7)}


def test_the_memory_is_the_cause_of_what_follows_affects_and_postpones() -> None:
    affects = memory(8, "认证模块延期会影响支付模块联调。")
    assert edges(affects, [POSTPONED, REVIEW]) == {(8, 3)}
    delays = memory(9, "安全审计没通过，推迟了账单迁移。")
    assert edges(delays, [WAITING, REVIEW]) == {(9, 4)}
    # 推迟到 / 延期到 a date is no cause of anything
    assert edges(memory(10, "发布推迟到 2027 年 3 月 1 日。"), [DELAY, OWNER, REVIEW]) == set()


def test_a_restated_reason_is_no_cause_of_its_own_repetition() -> None:
    again = memory(11, OWNER.content)
    assert edges(again, [OWNER]) == set()


def test_english_cues_read_the_direction_as_before() -> None:
    auth = memory(12, "The auth module is delayed by three days: the OAuth provider changed.")
    release = memory(13, "The frontend release is blocked by the auth module delay.")
    assert edges(release, [auth]) == {(12, 13)}


# -- questions and the traversal -----------------------------------------------------------------


def test_a_chinese_question_starts_at_the_memories_of_its_subject() -> None:
    written = [DELAY, OWNER, POSTPONED, WAITING, REVIEW]
    starts = match_start("认证模块延期会影响哪些模块？", written)
    assert {m.id for m in starts} == {DELAY.id, POSTPONED.id}


def test_what_does_the_delay_of_the_auth_module_affect_in_chinese() -> None:
    # given the memories written one by one with their links
    store = InMemoryLinks()
    written: list[EpisodicMemory] = []
    for m in (DELAY, OWNER, POSTPONED, WAITING, REVIEW):
        store.add(link_on_write(m, entity_candidates=written, vector_hits=[]))
        written.append(m)
    # when the question is asked in Chinese
    starts, reached = affected_by("认证模块延期会影响哪些模块？", written, store)
    # then it starts at the delay and reaches the joint debugging, then the billing migration
    assert [m.id for m in starts] == [DELAY.id]
    assert [(r.memory_id, r.hops) for r in reached] == [(POSTPONED.id, 1), (WAITING.id, 2)]
    # and "波及" asks the same
    assert affected_by("认证模块延期波及哪些工作？", written, store)[1] == reached


Histories = Callable[[datetime], list[dict[str, Any]]]


@pytest.mark.parametrize(
    ("make_history", "question", "first", "second"),
    [
        (
            history,
            "What does the delay of the auth module affect?",
            "mobile release is blocked",
            "billing migration is waiting",
        ),
        (history_zh, "认证模块延期会影响哪些模块？", "支付模块的联调", "账单迁移"),
        (
            history_mixed,
            "auth module 延期会影响哪些模块？",
            "Payment module 的联调",
            "Billing migration",
        ),
    ],
    ids=["en", "zh", "mixed"],
)
def test_the_projects_causal_chain_is_followed_in_every_language(
    make_history: Histories, question: str, first: str, second: str
) -> None:
    # given two weeks written one by one, each linked to what came before
    rows = [
        EpisodicMemory(id=uuid.UUID(int=n), **item)
        for n, item in enumerate(make_history(T0), start=1)
    ]
    store = InMemoryLinks()
    for i, row in enumerate(rows):
        store.add(link_on_write(row, entity_candidates=rows[:i], vector_hits=[]))
    # when the question is asked
    _, reached = affected_by(question, rows, store)
    by_id = {r.id: r.content for r in rows}
    hops = [(r.hops, by_id[r.memory_id]) for r in reached]
    # then the delay leads to the postponed work, then to what waits on it
    assert [h for h, _ in hops[:2]] == [1, 2]
    assert first in hops[0][1] and second in hops[1][1]


def test_chinese_chains_link_whichever_end_was_said_first() -> None:
    # 消息队列的扩容会影响订单模块的压测, said before anything about that load test
    scale = memory(60, "孙工：消息队列的扩容会影响订单模块的压测。")
    test = memory(61, "周工：订单模块的压测延期会影响双十一的上线。")
    assert edges(test, [scale, REVIEW]) == {(60, 61)}
    # 欧洲区上线依赖…, then 欧洲区上线推迟会影响…: the second follows from the first
    depends = memory(62, "许工：欧洲区上线依赖隐私政策的法务审核。")
    later = memory(63, "尤工：欧洲区上线推迟会影响德语本地化。")
    assert (62, 63) in edges(later, [depends, REVIEW])
    # a reason restated in a later decision is not its cause (因为 P said earlier)
    first = memory(64, "王经理：认证模块以后由张工牵头，因为张工之前做过第三方支付网关的对接。")
    again = memory(65, "王经理：通知服务交给张工负责，张工之前做过第三方支付网关的对接。")
    assert edges(again, [first]) == set()
    # and a question about the chain states none
    assert edges(memory(66, "褚工：单点登录对接会不会影响别的模块？"), [depends]) == set()
