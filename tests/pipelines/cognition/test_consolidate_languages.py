"""Consolidation in both languages: cue words of each kind, recurrence of a preference across
sessions and days, similarity and merging, stance, conditions and contradictions, in Chinese
beside the English rule each mirrors; and the two-week project's preference and stack
becoming knowledge in English, Chinese and mixed text."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from pipelines.cognition.consolidate import ChangeAction, consolidate
from pipelines.cognition.knowledge import KnowledgeKind, extract_offline
from pipelines.cognition.stance import conditions_of, opposed, stance_of, topic_of
from pipelines.records import EpisodicMemory, SemanticMemory
from pipelines.text.words import raw_tokens
from tests.support.project_history import history
from tests.support.project_history_zh import history_mixed, history_zh

T0 = datetime(2026, 11, 2, 9, tzinfo=UTC)


class TokenEmbedder:
    """A fake embedder: a normalised bag of the text's tokens (words, Han bigrams), so equal
    wording means similarity 1 in both languages."""

    @property
    def version(self) -> str:
        return "tokens/128"

    @property
    def dim(self) -> int:
        return 128

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out = []
        for text in texts:
            vector = np.zeros(128)
            for token in raw_tokens(text):
                vector[hashlib.blake2b(token.encode(), digest_size=2).digest()[0] % 128] += 1
            norm = np.linalg.norm(vector)
            out.append((vector / norm if norm else vector).tolist())
        return out


EMBED = TokenEmbedder()
_counter = iter(range(1, 10_000))


def memory(
    text: str, *, task: str = "task-a", days: float = 0, user: str | None = "u1"
) -> EpisodicMemory:
    return EpisodicMemory(
        id=uuid.UUID(int=next(_counter)),
        tenant_id="acme",
        user_id=user,
        task_id=task,
        session_id="s",
        timestamp=T0 + timedelta(days=days),
        content=text,
    )


# -- kinds -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("I prefer brief status updates.", KnowledgeKind.PREFERENCE),
        ("周报请用简洁的要点式，先写结论再写细节。", KnowledgeKind.PREFERENCE),
        ("我希望进度汇报写得简短一些。", KnowledgeKind.PREFERENCE),
        ("我习惯先看结论，再看细节。", KnowledgeKind.PREFERENCE),
        ("代码评审意见总是先写结论。", KnowledgeKind.PREFERENCE),
        ("不要在周报里贴大段日志。", KnowledgeKind.PREFERENCE),
        ("We always use snake_case for module names in this project.", KnowledgeKind.CONVENTION),
        ("本项目统一使用 TypeScript + Node.js + PostgreSQL。", KnowledgeKind.STACK),
        ("数据库列名一律用 snake_case。", KnowledgeKind.CONVENTION),
        ("Retrying with jitter worked well for the billing timeouts.", KnowledgeKind.PATTERN),
        ("账单服务超时的时候，带抖动的重试效果很好。", KnowledgeKind.PATTERN),
        ("Lesson learned: never deploy the search index on a Friday again.", KnowledgeKind.MISTAKE),
        ("教训：周五不要上线，上次周五发布导致登录故障。", KnowledgeKind.MISTAKE),
        ("以后不要在高峰期跑数据迁移。", KnowledgeKind.MISTAKE),
    ],
)
def test_knowledge_cues_in_both_languages(text: str, kind: KnowledgeKind) -> None:
    (item,) = extract_offline([memory(text)]).items
    assert item.kind is kind


@pytest.mark.parametrize(
    "text",
    [
        "Do you prefer tea?",
        "I love it.",
        "你喜欢喝茶吗？",
        "我喜欢。",
        # a standard named (安全规范 SEC-7) is no convention of the project
        "签名密钥每 30 天轮换一次，原因是安全规范 SEC-7 的硬性要求。",
        "构建 412 已部署到预发环境，冒烟测试通过。",
    ],
)
def test_questions_empty_cues_and_plain_facts_are_no_knowledge(text: str) -> None:
    assert extract_offline([memory(text)]).items == []


# -- recurrence and merging ------------------------------------------------------------------

PREFERENCE_ZH = "王经理：周报请用简洁的要点式，先写结论再写细节。"


def test_one_chinese_mention_of_a_preference_stays_episodic() -> None:
    plan = consolidate([memory(PREFERENCE_ZH)], [], EMBED, T0)
    assert plan.changes == ()
    assert [w.statement for w in plan.episodic_only] == ["周报请用简洁的要点式，先写结论再写细节。"]


def test_a_chinese_preference_stated_in_three_sessions_on_different_days_becomes_semantic() -> None:
    # given the same preference on three days of one task
    rows = [memory(PREFERENCE_ZH, days=d) for d in (0, 3, 6)]
    # when consolidated
    (change,) = consolidate(rows, [], EMBED, T0 + timedelta(days=7)).changes
    # then it is one piece of knowledge of its user, from the three mentions
    assert change.action is ChangeAction.CREATE
    assert change.kind is KnowledgeKind.PREFERENCE
    assert change.semantic.content == "周报请用简洁的要点式，先写结论再写细节。"
    assert change.semantic.scope == "user:u1"
    assert change.semantic.source_memory_ids == tuple(r.id for r in rows)


def test_a_chinese_preference_recurring_across_tasks_counts_the_same_day() -> None:
    rows = [memory(PREFERENCE_ZH, task=t) for t in ("task-a", "task-b")]
    assert len(consolidate(rows, [], EMBED, T0).changes) == 1
    same_task = [memory(PREFERENCE_ZH, days=d) for d in (0, 0.1)]
    assert consolidate(same_task, [], EMBED, T0).changes == ()


def test_a_restated_chinese_stack_merges_and_a_replay_changes_nothing() -> None:
    # given the stack already known
    first = memory("本项目统一使用 TypeScript + Node.js + PostgreSQL。", user=None)
    stored = consolidate([first], [], EMBED, T0).changes[0].semantic
    # when it is stated again in another task
    again = memory("本项目统一使用 TypeScript + Node.js + PostgreSQL！", task="t2", user=None)
    (change,) = consolidate([again], [stored], EMBED, T0 + timedelta(days=1)).changes
    # then it merges into the stored row
    assert change.action is ChangeAction.MERGE
    assert change.semantic.id == stored.id
    assert change.added_source_ids == (again.id,)
    assert change.semantic.confidence > stored.confidence
    assert consolidate([again], [change.semantic], EMBED, T0 + timedelta(days=1)).changes == ()


# -- stance, conditions, contradictions --------------------------------------------------------


def test_stance_in_both_languages() -> None:
    brief = stance_of("I prefer brief answers")
    assert stance_of("周报请用简洁的要点式") == brief
    assert stance_of("我希望回答写得简短一些") == brief
    # a negation or a verb of disliking turns the side round
    assert stance_of("回答不要写太长")[1] == brief[1]
    assert stance_of("讨厌写得太长")[1] == brief[1]
    assert opposed(brief, stance_of("遇到架构问题时，我希望回答写得详细一些"))
    assert opposed(stance_of("用 Redis 做缓存"), stance_of("不要用 Redis 做缓存"))
    # 非正式 is not 正式
    assert opposed(stance_of("提交说明写得正式一些"), stance_of("提交说明写得非正式一些"))
    assert not opposed(brief, stance_of("周报请发到群里"))


@pytest.mark.parametrize(
    ("text", "condition"),
    [
        ("For architecture questions I prefer detailed answers.", "architecture questions"),
        ("遇到架构问题时，我希望回答写得详细一些。", "架构问题"),
        ("如果是事故复盘，回答要详细。", "事故复盘"),
        ("对于新人文档，请写得完整一些。", "新人文档"),
        ("只有架构问题才需要写细节。", "架构问题"),
        ("I prefer brief answers in general.", None),
        ("周报请用简洁的要点式。", None),
    ],
)
def test_conditions_in_both_languages(text: str, condition: str | None) -> None:
    assert conditions_of(text) == condition


def test_a_chinese_topic_is_what_remains_without_cues_stance_and_condition() -> None:
    plain = "我希望进度汇报写得简短一些。"
    conditional = "遇到架构问题时，我希望进度汇报写得详细一些。"
    assert topic_of(plain, None) == topic_of(conditional, conditions_of(conditional))
    assert topic_of(plain, None) == frozenset({"进度", "度汇", "汇报"})


def stored_brief() -> SemanticMemory:
    return SemanticMemory(
        id=uuid.UUID(int=9777),
        tenant_id="acme",
        user_id="u1",
        content="我希望进度汇报写得简短一些。",
        confidence=0.8,
        source_memory_ids=(uuid.UUID(int=9776),),
        scope="user:u1",
    )


def test_a_single_contrary_chinese_statement_in_one_context_becomes_a_condition() -> None:
    # given "brief progress reports" known
    stored = stored_brief()
    # when one statement asks for detailed ones for architecture questions
    new = memory("遇到架构问题时，我希望进度汇报写得详细一些。")
    (change,) = consolidate([new], [stored], EMBED, T0).changes
    # then it is conditional knowledge beside the old, which is untouched
    assert change.action is ChangeAction.CONDITIONAL
    assert change.conflicts_with == stored.id and change.semantic.id != stored.id
    assert change.semantic.conditions == "架构问题"
    assert change.status == "active"


def test_a_bare_chinese_contradiction_is_flagged_for_confirmation() -> None:
    new = memory("我希望进度汇报写得详细一些。")
    (change,) = consolidate([new], [stored_brief()], EMBED, T0).changes
    assert change.action is ChangeAction.FLAG
    assert change.status == "needs_confirmation"


# -- the two-week project ----------------------------------------------------------------------

Histories = Callable[[datetime], list[dict[str, Any]]]


@pytest.mark.parametrize(
    ("make_history", "preference", "stack"),
    [
        (history, "I prefer brief answers", None),
        (history_zh, "周报请用简洁的要点式", "TypeScript + Node.js + PostgreSQL"),
        (history_mixed, "请用简洁的要点式", "TypeScript + Node.js + PostgreSQL"),
    ],
    ids=["en", "zh", "mixed"],
)
def test_the_projects_preference_and_conventions_become_knowledge(
    make_history: Histories, preference: str, stack: str | None
) -> None:
    # given the two weeks as episodes
    rows = [
        EpisodicMemory(id=uuid.UUID(int=n), **item)
        for n, item in enumerate(make_history(T0), start=1)
    ]
    # when the tenant is consolidated at the end
    plan = consolidate(rows, [], EMBED, T0 + timedelta(days=15))
    by_kind = {c.kind: c for c in plan.changes}
    # then the preference stated in several sessions is the user's knowledge, and the
    # convention and the lesson are the tenant's
    assert preference in by_kind[KnowledgeKind.PREFERENCE].semantic.content
    assert len(by_kind[KnowledgeKind.PREFERENCE].semantic.source_memory_ids) == 5
    assert by_kind[KnowledgeKind.PREFERENCE].semantic.scope.startswith("user:")
    if stack:
        # one sentence names the stack and the column rule: a technology choice first
        assert stack in by_kind[KnowledgeKind.STACK].semantic.content
        assert "snake_case" in by_kind[KnowledgeKind.STACK].semantic.content
    else:
        assert "snake_case" in by_kind[KnowledgeKind.CONVENTION].semantic.content
    assert KnowledgeKind.MISTAKE in by_kind
    assert {c.action for c in plan.changes} == {ChangeAction.CREATE}
