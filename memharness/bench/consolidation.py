"""``memharness bench consolidation``: memories per second through consolidation, offline.

Input: a generated tenant history (:func:`generate_memories`, fixed seed): software-project
memories over 30 days, 20 tasks and 5 users, of which about a quarter carry reusable
knowledge (preferences that recur across tasks, some with conditions that contradict others,
conventions, effective patterns, mistakes to avoid) and the rest are status changes, test
outcomes, decisions and chatter. With ``--data PATH`` (LoCoMo format) every turn of every
conversation is a memory instead, one tenant per conversation.

The run consolidates the memories in batches of ``--batch`` per tenant, in time order, the
way the nightly job walks a tenant's new episodes, with the semantic store growing between
batches (an in-memory list standing in for the table), the offline extractor and the
deterministic hashing embedder (384-d). ``memories_per_s`` is memories over the wall time
of all ``consolidate`` calls (extraction, embedding, clustering, dedupe and contradiction
checks); the machine is shared, so expect noise.

The last line of stdout is one JSON object.
"""

from __future__ import annotations

import json
import random
import sys
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memharness.bench.compression import conversation_sources
from memharness.progress import progress
from pipelines.cognition.consolidate import ChangeAction, consolidate
from pipelines.records import ID_NAMESPACE, EpisodicMemory, MemoryType, SemanticMemory
from workers.adapters.embed_hashing import HashingEmbedder

TARGET_PER_S = 500

_STYLES = [("brief", "detailed"), ("short", "long"), ("formal", "casual"), ("concise", "verbose")]
_THINGS = [
    "status updates",
    "answers",
    "commit messages",
    "code review comments",
    "release notes",
    "error reports",
]
_CONDITIONS = ["architecture questions", "incident reviews", "onboarding docs", "design docs"]
_CONVENTIONS = [
    "snake_case for module names",
    "type hints on every public function",
    "UTC timestamps in every log line",
    "one migration per pull request",
    "feature flags for risky changes",
]
_COMPONENTS = ["auth module", "billing service", "search index", "job queue", "web frontend"]
_PLAIN = [
    "Status: ATL-{n} is now in review, waiting on Priya.",
    "Ran the integration suite: {n} passed, 2 failed in 41 s.",
    "We decided to keep money as integer cents in amount_cents because floats lost a cent.",
    "The staging deploy of build {n} finished and the smoke tests are green.",
    "Opened ticket OPS-{n} for the flaky login test.",
    "ok thanks",
    "Moved the cron job to 02:00 UTC to stay out of the backup window.",
    "The p99 latency of /api/orders is {n} ms after the index change.",
]


# The generated history in Chinese: the same kinds of knowledge and plain memories, written
# for it (not translated), so recurrence, merging and conditions are measured in Chinese.
_STYLES_ZH = [("简短", "详细"), ("简洁", "完整"), ("正式", "随意"), ("要点式", "叙述式")]
_THINGS_ZH = ["进度汇报", "回答", "提交说明", "代码评审意见", "发版说明", "故障报告"]
_CONDITIONS_ZH = ["架构问题", "事故复盘", "新人文档", "设计文档"]
_CONVENTIONS_ZH = [
    "模块名统一用 snake_case",
    "每个公开函数都写类型注解",
    "每行日志都用 UTC 时间戳",
    "每个合并请求只带一个迁移",
    "高风险改动一律加特性开关",
]
_COMPONENTS_ZH = ["认证模块", "账单服务", "搜索索引", "任务队列", "前端页面"]
_PLAIN_ZH = [
    "状态：ATL-{n} 已进入评审，等李工确认。",
    "跑了集成测试：{n} 个通过，2 个失败，耗时 41 秒。",
    "我们决定金额用整数分存在 amount_cents 里，因为浮点数会丢一分钱。",
    "构建 {n} 已部署到预发环境，冒烟测试通过。",
    "为不稳定的登录测试开了工单 OPS-{n}。",
    "收到，谢谢",
    "定时任务挪到 UTC 02:00，避开备份窗口。",
    "加索引之后 /api/orders 的 p99 延迟是 {n} 毫秒。",
]


def _knowledge_text_zh(rng: random.Random) -> tuple[str, MemoryType | None]:
    roll = rng.random()
    if roll < 0.4:
        low, high = rng.choice(_STYLES_ZH)
        thing = rng.choice(_THINGS_ZH)
        if rng.random() < 0.15:
            condition = rng.choice(_CONDITIONS_ZH)
            return f"遇到{condition}时，我希望{thing}写得{high}一些。", MemoryType.PREFERENCE
        return f"我希望{thing}写得{low}一些。", MemoryType.PREFERENCE
    if roll < 0.6:
        return f"本项目一律{rng.choice(_CONVENTIONS_ZH)}。", None
    if roll < 0.8:
        component = rng.choice(_COMPONENTS_ZH)
        return f"{component}超时的时候，带抖动的重试效果很好。", None
    component = rng.choice(_COMPONENTS_ZH)
    return f"教训：以后周五不要再发布{component}。", None


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _knowledge_text(rng: random.Random) -> tuple[str, MemoryType | None]:
    roll = rng.random()
    if roll < 0.4:
        low, high = rng.choice(_STYLES)
        thing = rng.choice(_THINGS)
        if rng.random() < 0.15:
            return f"For {rng.choice(_CONDITIONS)} I prefer {high} {thing}.", MemoryType.PREFERENCE
        return f"I prefer {low} {thing}.", MemoryType.PREFERENCE
    if roll < 0.6:
        return f"We always use {rng.choice(_CONVENTIONS)} in this project.", None
    if roll < 0.8:
        component = rng.choice(_COMPONENTS)
        return f"Retrying with jitter worked well for the {component} timeouts.", None
    component = rng.choice(_COMPONENTS)
    return f"Lesson learned: never deploy the {component} on a Friday again.", None


def generate_memories(
    count: int, *, tenants: int = 2, seed: int = 7, lang: str = "en"
) -> dict[str, list[EpisodicMemory]]:
    knowledge, plain = (
        (_knowledge_text_zh, _PLAIN_ZH) if lang == "zh" else (_knowledge_text, _PLAIN)
    )
    rng = random.Random(seed)
    start = datetime(2024, 5, 1, tzinfo=UTC)
    out: dict[str, list[EpisodicMemory]] = {f"tenant-{t}": [] for t in range(tenants)}
    for i in range(count):
        tenant = f"tenant-{i % tenants}"
        memory_type: MemoryType | None
        if rng.random() < 0.25:
            text, memory_type = knowledge(rng)
        else:
            text, memory_type = rng.choice(plain).format(n=rng.randint(10, 999)), None
        out[tenant].append(
            EpisodicMemory(
                id=uuid.uuid5(ID_NAMESPACE, f"bench-consolidation\x1f{seed}\x1f{i}"),
                tenant_id=tenant,
                user_id=f"user-{rng.randint(1, 5)}",
                task_id=f"task-{rng.randint(1, 20)}",
                session_id=f"s-{i // 50}",
                timestamp=start + timedelta(seconds=i * 30 * 86400 // max(1, count)),
                type=memory_type,
                content=text,
            )
        )
    return out


def locomo_memories(path: Path) -> dict[str, list[EpisodicMemory]]:
    samples: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
    out: dict[str, list[EpisodicMemory]] = {}
    for sample in samples:
        tenant = f"locomo-{sample['sample_id']}"
        rows = out.setdefault(tenant, [])
        for session, turns in conversation_sources(sample).items():
            for _, source in turns:
                speaker = source.content.split(":", 1)[0]
                rows.append(
                    EpisodicMemory(
                        id=source.id,
                        tenant_id=tenant,
                        user_id=speaker,
                        task_id=str(sample["sample_id"]),
                        session_id=session,
                        timestamp=source.timestamp,
                        content=source.content,
                    )
                )
    return out


def run(
    data_path: str | None,
    *,
    memories: int = 20000,
    batch: int = 1000,
    dim: int = 384,
    lang: str = "en",
) -> int:
    if data_path:
        path = Path(data_path)
        if not path.is_file():
            _log(f"error: no such file {path}")
            return 2
        by_tenant = locomo_memories(path)
        source = f"locomo:{path.name}"
    else:
        by_tenant = generate_memories(memories, lang=lang)
        source = "generated" if lang == "en" else f"generated-{lang}"
    embedder = HashingEmbedder(dim)
    total = sum(len(rows) for rows in by_tenant.values())
    label = f"consolidating {total} memories of {len(by_tenant)} tenant(s) in batches of {batch}"
    actions: Counter[str] = Counter()
    episodic_only = candidates = 0
    store_sizes: dict[str, int] = {}
    seconds = 0.0
    with progress(label, total=total) as bar:
        bar.note(label)
        for tenant, rows in by_tenant.items():
            rows = sorted(rows, key=lambda m: m.timestamp)
            store: dict[uuid.UUID, SemanticMemory] = {}
            for offset in range(0, len(rows), batch):
                chunk = rows[offset : offset + batch]
                now = chunk[-1].timestamp
                began = time.perf_counter()
                plan = consolidate(chunk, list(store.values()), embedder, now)
                seconds += time.perf_counter() - began
                bar.advance(len(chunk))
                for change in plan.changes:
                    store[change.semantic.id] = change.semantic
                    actions[change.action.value] += 1
                episodic_only += len(plan.episodic_only)
                candidates += plan.candidates
            store_sizes[tenant] = len(store)
            bar.note(f"{tenant}: {len(rows)} memories -> {len(store)} semantic items")
    rate = total / seconds if seconds else None
    result = {
        "memories_per_s": round(rate, 1) if rate else None,
        "target_per_s": TARGET_PER_S,
        "memories": total,
        "tenants": len(by_tenant),
        "batch": batch,
        "source": source,
        "embedder": embedder.version,
        "seconds": round(seconds, 3),
        "candidates": candidates,
        "created": actions[ChangeAction.CREATE.value],
        "merged": actions[ChangeAction.MERGE.value],
        "conditional": actions[ChangeAction.CONDITIONAL.value],
        "flagged": actions[ChangeAction.FLAG.value],
        "kept_episodic": episodic_only,
        "semantic_items": sum(store_sizes.values()),
    }
    print(json.dumps(result, sort_keys=True))
    return 0
