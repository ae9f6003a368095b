"""Chinese dependency chains through real workers: the same answer from affected_by() however
the writes arrive.

The two weeks of the Chinese project history, with three more chains of the labeled set
(tests/data/cognition/causal.jsonl) woven into its days, then ten weeks of a generated
project (``memharness.bench.zh_project``, 400-odd turns, more than the link window of 300)
are recorded three times, each as its own tenant: in one batch, one memory at a time, and in
one batch sent newest first. The link worker links each memory to the window that precedes
it by (timestamp, id), so every run must reach the same memories for every question, and
every dependent the chain names. (Linked to the tenant's most recent rows at the time of
the link pass, as before, a memory written early in a batch lost its older partners.)
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from memharness.bench.zh_project import generate
from tests.integration.test_cognition import START, one, wait_for
from tests.support.project_history_zh import history_zh

pytestmark = pytest.mark.integration

CHAINS = [
    # (day, speaker, text) of three chains; each a memory of its own day
    (1, "孙工", "消息队列的扩容还没有完成。"),
    (2, "孙工", "消息队列的扩容会影响订单模块的压测。"),
    (4, "周工", "订单模块的压测延期会影响双十一的上线。"),
    (3, "蒋工", "数据仓库的表结构变更推迟到三月。"),
    (5, "沈工", "流失模型的重新训练依赖数据仓库的表结构变更。"),
    (6, "蒋工", "流失模型的重新训练延期导致营销活动推迟。"),
    (7, "施工", "网关限流改造比预期晚了一周。"),
    (8, "张工", "开放平台的接入测试要等网关限流改造完成。"),
    (9, "施工", "开放平台的接入测试延期会影响合作方的签约。"),
]
QUESTIONS = {
    "认证模块延期会影响哪些模块？": ["支付模块的联调", "账单迁移"],
    "消息队列扩容会影响哪些工作？": ["订单模块的压测", "双十一的上线"],
    "数据仓库表结构变更会影响什么？": ["流失模型的重新训练依赖", "营销活动推迟"],
    "网关限流改造延期会影响哪些工作？": ["开放平台的接入测试要等", "合作方的签约"],
}


def items_for(tenant: str) -> list[dict[str, Any]]:
    items = [{**item, "tenant_id": tenant} for item in history_zh(START)]
    for n, (day, speaker, text) in enumerate(CHAINS):
        items.append(
            {
                "content": f"{speaker}：{text}",
                "tenant_id": tenant,
                "task_id": "platform",
                "session_id": f"chains-day{day:02d}",
                "timestamp": START + timedelta(days=day, hours=16, minutes=n),
            }
        )
    conversation = generate(projects=1)[0]["conversation"]
    later = START + timedelta(days=15)
    n = 0
    for key in sorted(k for k in conversation if k.startswith("session_") and "date" not in k):
        for turn in conversation[key]:
            items.append(
                {
                    "content": f"{turn['speaker']}: {turn['text']}",
                    "tenant_id": tenant,
                    "task_id": "later-project",
                    "session_id": key,
                    "timestamp": later + timedelta(minutes=n),
                }
            )
            n += 1
    return sorted(items, key=lambda item: item["timestamp"])


def unlinked(db: Any, tenant: str) -> int:
    return int(
        one(
            db,
            "SELECT count(*) FROM memories WHERE tenant_id = %s AND status = 'stored' "
            "AND level = 0 AND linked_at IS NULL",
            tenant,
        )
    )


def test_the_same_chains_are_reached_however_the_writes_arrive(client, workers, db) -> None:  # type: ignore[no-untyped-def]
    workers("write")
    answers: dict[str, dict[str, list[str]]] = {}
    for run in ("one-batch", "one-by-one", "newest-first"):
        tenant = f"chains-{run}"
        items = items_for(tenant)
        # when the history is recorded in this run's way
        if run == "one-batch":
            receipts = client.record_many(items)
        elif run == "one-by-one":
            receipts = [client.record(**item) for item in items]
        else:
            receipts = list(reversed(client.record_many(list(reversed(items)))))
        client.wait_until_settled(
            [r.memory_id for r in receipts if r.status == "accepted"], timeout_s=90
        )
        wait_for(lambda tenant=tenant: unlinked(db, tenant) == 0, f"the links of {tenant}", 120)
        # then each question reaches every dependent its chain names
        answers[run] = {}
        for question, dependents in QUESTIONS.items():
            traversal = client.affected_by(question, tenant_id=tenant)
            reached = sorted(a.content for a in traversal.affected)
            for dependent in dependents:
                assert any(dependent in text for text in reached), (run, question, reached)
            answers[run][question] = reached

    # and the three runs gave the same answers
    assert answers["one-by-one"] == answers["one-batch"]
    assert answers["newest-first"] == answers["one-batch"]
