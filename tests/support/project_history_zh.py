"""The two-week project of ``project_history``, recorded in Chinese and in mixed Chinese and
English, as the agents of this system's first users write it.

Written for this project, not translated line by line: a payment and authentication rewrite
tracked by a small team (张工 owns payments, 李工 authentication, 王经理 manages), with what
such a history holds — module owners and milestones decided with their reasons, status
changes with ticket ids, outcomes with numbers and paths, a preference stated in three
sessions on different days ("周报请用简洁的要点式"), the stack restated as a convention, a
lesson, chatter and bare acknowledgements (dropped at tier 1), and a causal chain across modules
(the auth module's delay postpones the payment module's joint debugging, which holds up the
billing migration) for the link traversal. Deterministic: the same ``start`` gives the same
turns, in the same order and at the same times, as ``project_history.history``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

TENANT = "acme-cn"
TASK = "payment-rewrite"
USER = "wang"

_OUTCOMES_ZH = [
    "在分支 feature/pay-{d} 上跑了集成测试：{n} 个用例通过，"
    "tests/test_gateway.py 里有 2 个不稳定。",
    "压测了下单接口：缓存 JWKS 之后 p95 延迟从 {m} 毫秒降到 {k} 毫秒。",
    "和李工一起评审了合并请求 #{p}，他要求把提交拆小、补充单元测试。",
    "把 {n} 条订单记录迁移到新的 payments 表，没有报错。",
]
_DECISIONS_ZH = [
    "支付模块负责人是张工，因为他之前做过第三方支付网关的对接，经验最丰富。",
    "我们决定用 Redis 存会话，因为它自带过期机制，不用自己写清理任务。",
    "签名密钥每 30 天轮换一次，原因是安全规范 SEC-7 的硬性要求。",
    "旧的 /v1/pay 接口保留到 2027 年 3 月 1 日，因为还有合作方在调用。",
]
_STATUS_ZH = "状态：工单 PAY-{d} 已完成。"
_CHATTER_ZH = ["收到，谢谢", "好的，没问题。", "辛苦了，明天再聊。"]
_PREFERENCE_ZH = "王经理：周报请用简洁的要点式，先写结论再写细节。"
_LESSON_ZH = "教训：周五不要上线，上次周五发布导致登录故障。"
_CONVENTION_ZH = "本项目统一使用 TypeScript + Node.js + PostgreSQL，数据库列名一律用 snake_case。"
_CHAIN_ZH = (
    "状态：认证模块延期到 2027 年 1 月 15 日，因为安全审计 SEC-12 没有通过。",
    "支付模块的联调因为认证模块延期而推迟，预计晚两周。",
    "账单迁移依赖支付模块联调完成，目前只能等待。",
)

_OUTCOMES_MIXED = [
    "CI 在 feature/pay-{d} 分支上跑完了：{n} tests passed，tests/test_gateway.py 有 2 个 flaky。",
    "Profiled checkout 接口：加了 JWKS cache 之后 p95 从 {m} ms 降到 {k} ms。",
    "Review 了 PR #{p}，李工 asked for smaller commits 和更多 unit tests。",
    "Migrated {n} 条 order rows 到新的 payments table，没有 errors。",
]
_DECISIONS_MIXED = [
    "Payment module 的 owner 定为张工，因为他做过第三方 payment gateway 的对接。",
    "Session 存储决定用 Redis，because it gives us TTL for free，不用写 cleanup job。",
    "Signing keys 每 30 天 rotate 一次，原因是 SEC-7 compliance 要求。",
    "Legacy /v1/pay endpoint 保留到 2027-03-01，因为还有 partners 在调用。",
]
_STATUS_MIXED = "Status：ticket PAY-{d} moved to done，已完成。"
_CHATTER_MIXED = ["收到，thanks", "OK的，没问题", "辛苦了，talk tomorrow。"]
_PREFERENCE_MIXED = "王经理：weekly report 请用简洁的要点式 bullet points，结论写在最前面。"
_LESSON_MIXED = "Lesson learned：周五不要 deploy，上次 Friday release 导致 login 故障。"
_CONVENTION_MIXED = "Stack 统一用 TypeScript + Node.js + PostgreSQL，column names 一律 snake_case。"
_CHAIN_MIXED = (
    "Status：auth module 延期到 2027-01-15，因为 security audit SEC-12 没通过。",
    "Payment module 的联调因为 auth module 延期而推迟，预计晚两周。",
    "Billing migration 依赖 payment module 联调完成，目前 blocked。",
)


def _history(
    start: datetime,
    days: int,
    *,
    outcomes: list[str],
    decisions: list[str],
    status: str,
    chatter: list[str],
    preference: str,
    lesson: str,
    convention: str,
    chain: tuple[str, str, str],
    speaker: str,
    agent: str,
) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for d in range(days):
        for s in range(2):
            ts = start + timedelta(days=d, hours=9 + 5 * s)
            session = f"day{d:02d}-s{s}"
            decision = decisions[(d * 2 + s) % 4]
            if s == 1 and d % 2 == 1:
                turns = [
                    f"{agent}：{decision}",
                    f"{agent}：{status.format(d=d)}",
                    f"{speaker}：{chatter[(d + s) % 3]}",
                ]
            else:
                outcome = outcomes[(d + s) % 4].format(
                    d=d, n=100 + d * 7 + s, m=300 + d, k=120 + d, p=400 + d * 2 + s
                )
                turns = [
                    f"{speaker}：{outcome}",
                    f"{agent}：{decision}",
                    f"{speaker}：{chatter[(d + s) % 3]}",
                ]
            if s == 0 and d % 3 == 0:
                turns.append(preference)
            if s == 1 and d == 4:
                turns.append(f"{agent}：{lesson}")
            if s == 1 and d == 6:
                turns.append(f"{agent}：{convention}")
            if s == 0 and d == 9:
                turns.append(f"{agent}：{chain[0]}")
            if s == 1 and d == 9:
                turns.append(f"{agent}：{chain[1]}")
            if s == 0 and d == 10:
                turns.append(f"{agent}：{chain[2]}")
            for i, content in enumerate(turns):
                items.append(
                    {
                        "content": content,
                        "tenant_id": TENANT,
                        "task_id": TASK,
                        "session_id": session,
                        "user_id": USER,
                        "timestamp": ts + timedelta(minutes=2 * i),
                    }
                )
    return items


def history_zh(start: datetime, days: int = 14) -> list[dict[str, Any]]:
    """``record`` keyword arguments in time order, in Chinese, starting at ``start`` (aware)."""
    return _history(
        start,
        days,
        outcomes=_OUTCOMES_ZH,
        decisions=_DECISIONS_ZH,
        status=_STATUS_ZH,
        chatter=_CHATTER_ZH,
        preference=_PREFERENCE_ZH,
        lesson=_LESSON_ZH,
        convention=_CONVENTION_ZH,
        chain=_CHAIN_ZH,
        speaker="王经理",
        agent="助手",
    )


def history_mixed(start: datetime, days: int = 14) -> list[dict[str, Any]]:
    """The same two weeks in mixed Chinese and English, as bilingual teams write."""
    return _history(
        start,
        days,
        outcomes=_OUTCOMES_MIXED,
        decisions=_DECISIONS_MIXED,
        status=_STATUS_MIXED,
        chatter=_CHATTER_MIXED,
        preference=_PREFERENCE_MIXED,
        lesson=_LESSON_MIXED,
        convention=_CONVENTION_MIXED,
        chain=_CHAIN_MIXED,
        speaker="王经理",
        agent="助手",
    )


# Turns that must survive the write path: everything but the chatter (tier 1 drops the bare
# acknowledgements; tiers 2/3 may drop the rest of the chatter).
def meaningful(items: list[dict[str, Any]], chatter: list[str]) -> list[dict[str, Any]]:
    return [item for item in items if not any(item["content"].endswith(c) for c in chatter)]


CHATTER = {"zh": _CHATTER_ZH, "mixed": _CHATTER_MIXED}
