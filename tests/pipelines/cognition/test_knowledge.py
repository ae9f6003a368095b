"""The offline knowledge rules: which sentences are candidates, of which kind, and what is
never knowledge (reports, chatter, questions, hypotheticals, summaries)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from pipelines.cognition.knowledge import (
    KnowledgeKind,
    asks,
    extract_offline,
    is_hypothetical,
    is_report,
)
from pipelines.records import EpisodicMemory, Level

T0 = datetime(2024, 3, 1, 9, tzinfo=UTC)


def memory(text: str, *, level: Level = Level.L0, n: int = 1) -> EpisodicMemory:
    return EpisodicMemory(
        id=uuid.UUID(int=n),
        tenant_id="acme",
        user_id="u1",
        task_id="t",
        session_id="s",
        timestamp=T0,
        content=text,
        level=level,
    )


def kinds(text: str) -> list[KnowledgeKind]:
    return [item.kind for item in extract_offline([memory(text)]).items]


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("Priya owns the payments module.", KnowledgeKind.OWNER),
        ("Tom is responsible for the search service.", KnowledgeKind.OWNER),
        ("The infra team is in charge of the Kubernetes clusters.", KnowledgeKind.OWNER),
        ("The billing service is now owned by Omar.", KnowledgeKind.OWNER),
        ("Questions about the release calendar go to Mike.", KnowledgeKind.OWNER),
        ("支付模块的负责人是张工。", KnowledgeKind.OWNER),
        ("搜索服务由小王负责。", KnowledgeKind.OWNER),
        ("订单系统归老李管。", KnowledgeKind.OWNER),
        ("数据导出功能分配给了贾明。", KnowledgeKind.OWNER),
        ("The backend is written in Go.", KnowledgeKind.STACK),
        ("We use PostgreSQL for storage.", KnowledgeKind.STACK),
        ("Our CI runs on GitHub Actions.", KnowledgeKind.STACK),
        ("The frontend is a React app.", KnowledgeKind.STACK),
        ("后端用Go写的。", KnowledgeKind.STACK),
        ("我们的技术栈是Python加PostgreSQL。", KnowledgeKind.STACK),
        ("消息队列用的是RabbitMQ。", KnowledgeKind.STACK),
        # a rule about lower-case names is a convention, not a technology
        ("We always use snake_case for column names.", KnowledgeKind.CONVENTION),
        ("数据库字段统一用蛇形命名。", KnowledgeKind.CONVENTION),
        ("Our naming convention is kebab-case for file names.", KnowledgeKind.CONVENTION),
        ("By convention, handlers live in the api folder.", KnowledgeKind.CONVENTION),
        # a lesson still comes before the technology it names
        ("We should not have used MongoDB for the ledger.", KnowledgeKind.MISTAKE),
        ("That migration broke the build twice.", KnowledgeKind.MISTAKE),
        ("One gotcha: the cache keeps stale tokens for an hour.", KnowledgeKind.MISTAKE),
        ("Keep the code comments in English.", KnowledgeKind.PREFERENCE),
        ("回答请简洁一些，用要点列出来。", KnowledgeKind.PREFERENCE),
        ("别写长篇大论，要点式的就好。", KnowledgeKind.PREFERENCE),
    ],
)
def test_cues_name_the_kind(text: str, kind: KnowledgeKind) -> None:
    assert kinds(text) == [kind]


@pytest.mark.parametrize(
    "text",
    [
        "Leo: Gotcha, Maya!",
        "Gina: Gotcha, Jon! That sounds amazing.",
        "好的收到",
        "明白，谢谢张工！",
        "My car broke down on the way to the gym.",
        # encouragement is no wish, and a convention one goes to is no rule
        "Keep going and never give up!",
        "Keep up the great work!",
        "I went to a game convention and met new people.",
        "The experience at this convention is unforgettable.",
        "Who owns the search service",
        "谁负责支付模块",
        "数据分析用的是哪个数据库",
        "If we ever moved to MongoDB, we would have to rewrite the reports.",
        "Maybe we should try Rust for the parser someday.",
        "如果以后换成MongoDB，报表都得重写。",
        "要是让小张负责计费模块会怎样",
        "Weekly report: we use feature flags for the new UI, Priya owns checkout.",
        "Status: the naming change is in review. We use the new retry helper.",
        "周报：统一使用新的日志库，小郑负责接口联调。",
        "进度汇报：剩下的接口由小王负责。统一用新的重试工具。",
    ],
)
def test_chatter_questions_hypotheticals_and_reports_are_never_knowledge(text: str) -> None:
    assert kinds(text) == []


def test_summaries_are_not_read_for_knowledge() -> None:
    # given a level-1 summary stating a convention
    summary = memory("In this project, branch names start with the ticket number.", level=Level.L1)
    # then only the raw episode's statement is a candidate
    assert extract_offline([summary]).items == []
    assert kinds("In this project, branch names start with the ticket number.") == [
        KnowledgeKind.CONVENTION
    ]


@pytest.mark.parametrize(
    ("text", "report"),
    [
        ("Weekly report: finished the login page, fixed three bugs.", True),
        ("Ana: Status: deploy pipeline is green.", True),
        ("Summary - we discussed caching and naming.", True),
        ("Daily update: merged two PRs.", True),
        ("周报：本周完成了登录页面。", True),
        ("本周总结：讨论了缓存和迁移计划。", True),
        ("【日报】今天合并了两个PR。", True),
        ("今日进展：修了一个不稳定的测试。", True),
        # a wish about reports is no report
        ("周报请用简洁的要点式。", False),
        ("Please keep weekly reports short.", False),
        ("Status codes above 499 are retried.", False),
        # four sentences on four subjects, long enough to be a day's note
        (
            "Merged the pagination fix for the admin dashboard after review. Spent the "
            "afternoon on the flaky checkout integration test in CI. Talked to design about "
            "the onboarding copy for the trial. Booked the quarterly offsite venue in Lisbon.",
            True,
        ),
        # four sentences that restate one rule are not a report
        (
            "Column names are snake_case. Every column name is snake_case. Use snake_case "
            "column names. No camelCase column names ever again in any table we create.",
            False,
        ),
    ],
)
def test_is_report(text: str, report: bool) -> None:
    assert is_report(text) is report


def test_questions_without_a_question_mark() -> None:
    assert asks("谁负责支付模块") and asks("支付模块是谁负责的")
    assert asks("Who owns the search service") and asks("Is the API written in Go")
    # "whatever" is no question, nor is a condition that opens with when
    assert not asks("不管什么情况都要先写测试。")
    assert not asks("这样改没什么问题，统一用新的重试工具。")
    assert not asks("When reviewing PRs, be detailed.")
    assert not asks("Do not deploy on Fridays.")


def test_hypotheticals_but_not_conditions() -> None:
    assert is_hypothetical("What if Sam owned the billing module instead")
    assert is_hypothetical("假如我们用Kafka做消息队列，会不会好一些")
    # a condition scoping a wish is knowledge (conditional), not a hypothetical
    assert not is_hypothetical("如果是事故复盘，请写详细一些。")
    assert not is_hypothetical("When reviewing PRs, be detailed.")
    assert not is_hypothetical("I would like brief answers if possible.")
