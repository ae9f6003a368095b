"""Cue words of the memory types, in English and in Chinese side by side."""

from __future__ import annotations

import pytest

from pipelines.records import MemoryType
from pipelines.text.cues import guess_type, names_commitment

D, P, S, F, A = (
    MemoryType.DECISION,
    MemoryType.PREFERENCE,
    MemoryType.STATUS_CHANGE,
    MemoryType.FEEDBACK,
    MemoryType.ACTION,
)


@pytest.mark.parametrize(
    ("memory_type", "english", "chinese"),
    [
        # decisions, and the owners, milestones, deadlines and constraints they set
        (D, "We decided to use Redis", "我们决定用 Redis"),
        (D, "We settled on Postgres", "最后确定用 Postgres"),
        (D, "We chose pnpm", "选定 pnpm"),
        (D, "We opted for Kafka", "消息队列选用 Kafka"),
        (D, "We are going with gRPC", "接口协议采用 gRPC"),
        (D, "We switched to MySQL", "改用 MySQL"),
        (D, "Priya owns the billing module", "支付模块负责人是张工"),
        (D, "Priya is responsible for billing", "账单由李工负责"),
        (D, "Milestone 1 is the login flow", "第一个里程碑是登录流程"),
        (D, "The deadline is Friday", "截止时间是周五"),
        (D, "It is due by Friday", "第二周周三前完成联调"),
        (D, "That is a hard constraint", "这是一个硬约束"),
        (D, "We must not store card numbers", "必须加密存储"),
        # a stated reason makes a decision in both languages
        (D, "because it is fast", "因为它快"),
        (D, "the rationale is cost", "原因是成本"),
        (D, "because of the audit", "由于审计没通过"),
        (D, "because the audit failed", "所以推迟"),
        (D, "because of the audit", "鉴于审计结果"),
        (D, "because of the audit", "考虑到审计"),
        (D, "because of the audit", "为了通过审计"),
        # preferences
        (P, "I prefer short answers", "我偏好简短的回答"),
        (P, "please always answer in bullets", "周报请用要点式"),
        (P, "I like tabs", "我喜欢用 tab"),
        (P, "I want a summary first", "希望先写结论"),
        (P, "never deploy on Friday", "以后都不要周五上线"),
        (P, "we always use snake_case", "列名一律用 snake_case"),
        (P, "we always use snake_case", "统一使用 snake_case"),
        (P, "I'd rather not", "我习惯先看日志"),
        (P, "always run the linter", "总是先跑 linter"),
        # status changes
        (S, "Status: in review", "状态：评审中"),
        (S, "ATL-12 is completed", "ATL-12 已完成"),
        (S, "ATL-12 is in progress", "ATL-12 进行中"),
        (S, "ATL-12 is blocked", "ATL-12 阻塞了"),
        (S, "the release slipped", "发布延期了"),
        (S, "the release was delayed", "上线推迟了"),
        (S, "the fix shipped", "修复已上线"),
        (S, "the PR was merged", "代码已合并"),
        (S, "the ticket was closed", "工单已关闭"),
        # feedback
        (F, "that's wrong", "这个错了"),
        (F, "that is incorrect", "不对"),
        (F, "too verbose", "太啰嗦"),
        (F, "good job", "干得好"),
        (F, "you should have asked first", "应该先问一下"),
        (F, "that was a mistake", "这是个失误"),
        # actions
        (A, "ran the suite", "运行了测试"),
        (A, "executed the script", "执行了脚本"),
        (A, "pushed to prod", "部署到生产环境"),
        (A, "committed the patch", "提交了补丁"),
        (A, "refactored auth", "重构了认证模块"),
        (A, "created the table", "创建了新表"),
        (A, "deleted the branch", "删除了旧分支"),
        (A, "updated the rows", "迁移了订单数据"),
        (A, "implemented the fix", "修复了登录问题"),
    ],
)
def test_each_type_has_cues_in_both_languages(
    memory_type: MemoryType, english: str, chinese: str
) -> None:
    assert guess_type(english)[0] is memory_type, english
    assert guess_type(chinese)[0] is memory_type, chinese


@pytest.mark.parametrize(
    ("english", "chinese"),
    [
        ("The sky looks grey", "天空是灰色的"),
        # 请问 is "may I ask", not "please"
        ("please, where is the endpoint?", "请问接口在哪？"),
        # 不确定 is "not sure", not "settled"
        ("I'm not sure", "我不确定"),
    ],
)
def test_text_without_cues_is_an_observation(english: str, chinese: str) -> None:
    assert guess_type(english) == (MemoryType.OBSERVATION, 0)
    assert guess_type(chinese) == (MemoryType.OBSERVATION, 0)


def test_a_merge_request_is_a_thing_not_a_merge() -> None:
    # 合并请求 ("merge request") names a pull request; 合并 alone is a status change
    assert guess_type("a pull request was opened") == (A, 1)
    assert guess_type("合并请求已创建") == (A, 1)
    assert guess_type("已合并") == (S, 1)


def test_cue_hits_are_counted_alike() -> None:
    assert guess_type("We decided to use Redis because it is fast") == (D, 2)
    assert guess_type("我们决定用 Redis，因为它快") == (D, 2)


@pytest.mark.parametrize(
    ("english", "chinese"),
    [
        ("Priya owns the billing module", "张工负责支付模块"),
        ("Milestone 2 is the beta", "第二个里程碑是公测"),
        ("the deadline is Friday", "截止日期是周五"),
        ("it is due by Friday", "周三前完成"),
        ("a hard constraint", "约束条件"),
        ("we must sign every release", "必须签名"),
    ],
)
def test_commitments_are_named_in_both_languages(english: str, chinese: str) -> None:
    assert names_commitment(english)
    assert names_commitment(chinese)


def test_a_plain_decision_names_no_commitment() -> None:
    assert not names_commitment("We chose Redis for sessions")
    assert not names_commitment("我们选了 Redis 存会话")
