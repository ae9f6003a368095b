"""A Chinese evaluation set in LoCoMo's format: generated project-tracking conversations.

No public Chinese set holds what this system is for (long project histories with decisions,
owners, status changes and preferences, and questions whose evidence turns are known), so one
is generated, honestly and reproducibly:

* **What**: ``PROJECTS`` software projects, each a conversation of ``SESSIONS`` sessions two
  or three days apart, between a manager, two engineers and the agent (助手). A session holds
  8–13 turns: decisions with their reasons, module owners and why, status changes with ticket
  ids, measured outcomes with numbers and paths, a manager's reporting preference restated on
  different days, a delay and the module it postpones, and chatter (好的, 收到, 辛苦了 ...).
* **How**: sentence templates written for this project in natural Chinese (not translated from
  the English sets), slots filled from fixed lists (modules, technologies, reasons, people,
  endpoints) with ``random.Random(seed)``; the same seed gives the same file byte for byte.
* **Questions**: every question is generated with the turn(s) that answer it, so its
  ``evidence`` dia_ids are exact, and its ``answer`` is a slot value that occurs verbatim in an
  evidence turn (or, for temporal questions, the session's date). Categories follow LoCoMo:
  1 multi-hop (a delay and the module it postpones: two evidence turns), 2 temporal (when a
  status change happened: the session's date), 3 open-domain (a preference stated in several
  sessions: every one of them is evidence), 4 single-hop (an owner, a technology, a number).
* **Limits**: templates repeat, so the set measures whether Chinese facts survive compression
  and can be found again, not fluency; it holds no adversarial (category 5) questions.

``memharness bench dataset zh-project --out PATH`` writes it; ``bench compression --data
PATH`` and ``bench retrieval-quality --data PATH`` read it like any LoCoMo file.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

PROJECTS = 4
SESSIONS = 12
SEED = 20261203

_MODULES = [
    "支付模块",
    "认证模块",
    "订单服务",
    "账单系统",
    "通知服务",
    "搜索服务",
    "报表模块",
    "网关",
]
_TECH = [
    ("PostgreSQL", "MySQL"),
    ("Redis", "Memcached"),
    ("Kafka", "RabbitMQ"),
    ("gRPC", "REST"),
    ("TypeScript", "JavaScript"),
    ("Terraform", "Ansible"),
    ("pnpm", "npm"),
    ("Qdrant", "pgvector"),
]
_ASPECTS = ["消息队列", "缓存", "数据库", "接口协议", "部署脚本", "向量索引", "包管理", "开发语言"]
_REASONS = [
    "能在同一个事务里写入和入队",
    "结账流程的 p99 延迟必须低于 {n} 毫秒",
    "运维团队已经在生产环境用了两年，熟悉它的故障模式",
    "压测显示同样吞吐下内存少用 {n}%",
    "旧客户端在工单 OPS-{n} 里出现过连接泄漏",
    "供应商 {n} 周后停止支持旧版本",
]
_OWNER_REASONS = [
    "他之前做过第三方支付网关的对接，经验最丰富",
    "她写过现在的权限模型，最了解历史包袱",
    "他上个季度刚把这个模块的测试覆盖率提到 80%",
    "她负责过双十一的扩容，熟悉高峰期的流量",
]
_PEOPLE = [
    ("王经理", "张工", "李工"),
    ("刘总", "陈工", "赵工"),
    ("周经理", "孙工", "吴工"),
    ("郑总", "钱工", "冯工"),
]
_TASKS = ["联调", "灰度发布", "数据迁移", "压测", "代码评审", "安全审计"]
_ENDPOINTS = ["/api/pay", "/api/login", "/api/orders", "/api/invoices", "/api/search"]
_PREFERENCES = [
    ("周报请用简洁的要点式，先写结论再写细节。", "要点式"),
    ("站会纪要只列阻塞项和负责人，其他不用写。", "阻塞项"),
    ("代码评审意见请直接写在合并请求里，不要发私聊。", "合并请求"),
    ("发版通知请提前一天发到项目群。", "提前一天"),
]
_CHATTER = ["好的", "收到，谢谢", "辛苦了", "明白了，我跟进一下", "好的，明天再聊", "没问题"]

_MONTHS = [
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
]  # fmt: skip


def _locomo_time(when: datetime) -> str:
    """LoCoMo's session time format ("9:00 am on 8 May, 2026")."""
    hour = when.hour % 12 or 12
    half = "am" if when.hour < 12 else "pm"
    return f"{hour}:{when.minute:02d} {half} on {when.day} {_MONTHS[when.month - 1]}, {when.year}"


class _Conversation:
    def __init__(self, index: int, rng: random.Random) -> None:
        self.rng = rng
        self.index = index
        self.manager, self.engineer_a, self.engineer_b = _PEOPLE[index % len(_PEOPLE)]
        self.conversation: dict[str, Any] = {
            "speaker_a": self.manager,
            "speaker_b": "助手",
        }
        self.qa: list[dict[str, Any]] = []
        self.turns: list[dict[str, str]] = []
        self.session = 0
        self.preference, self.preference_answer = _PREFERENCES[index % len(_PREFERENCES)]
        self.preference_ids: list[str] = []
        # Each fact is stated once per conversation, so every question has one answer.
        self.used: set[tuple[str, ...]] = set()

    def fresh(self, *choices: list[Any]) -> tuple[Any, ...] | None:
        """A combination of ``choices`` not stated yet in this conversation, or None."""
        for _ in range(50):
            picked = tuple(self.rng.choice(options) for options in choices)
            key = tuple(map(str, picked))
            if key not in self.used:
                self.used.add(key)
                return picked
        return None

    def say(self, speaker: str, text: str) -> str:
        dia_id = f"D{self.session}:{len(self.turns) + 1}"
        self.turns.append({"speaker": speaker, "dia_id": dia_id, "text": text})
        return dia_id

    def ask(self, question: str, answer: str, evidence: list[str], category: int) -> None:
        self.qa.append(
            {"question": question, "answer": answer, "evidence": evidence, "category": category}
        )

    def n(self) -> int:
        return self.rng.randint(3, 900)

    def decision(self) -> None:
        picked = self.fresh(_MODULES, list(range(len(_ASPECTS))))
        if picked is None:
            return
        module, aspect_index = picked
        tech, old = _TECH[aspect_index]
        reason = self.rng.choice(_REASONS).format(n=self.n())
        template = self.rng.choice(
            [
                "{module}的{aspect}决定用 {tech}，不用 {old}，因为{reason}。",
                "评审后确定：{module}的{aspect}改用 {tech}，原因是{reason}。",
                "我们选定 {tech} 作为{module}的{aspect}，因为{reason}。",
            ]
        )
        text = template.format(
            module=module, aspect=_ASPECTS[aspect_index], tech=tech, old=old, reason=reason
        )
        dia = self.say(self.rng.choice([self.engineer_a, "助手"]), text)
        self.ask(f"{module}的{_ASPECTS[aspect_index]}最后用的是什么？", tech, [dia], 4)

    def owner(self) -> None:
        picked = self.fresh(["owner"], _MODULES)
        if picked is None:
            self.decision()
            return
        module = picked[1]
        person = self.rng.choice([self.engineer_a, self.engineer_b])
        why = self.rng.choice(_OWNER_REASONS)
        dia = self.say(self.manager, f"{module}的负责人定为{person}，因为{why}。")
        self.ask(f"谁负责{module}？", person, [dia], 4)

    def status(self, when: datetime) -> None:
        picked = self.fresh(_MODULES, _TASKS)
        if picked is None:
            return
        module, task = picked
        ticket = f"PAY-{self.rng.randint(10, 999)}"
        dia = self.say("助手", f"状态：{module}的{task}（工单 {ticket}）已完成。")
        self.ask(f"{module}的{task}是哪天完成的？", when.date().isoformat(), [dia], 2)

    def outcome(self) -> None:
        picked = self.fresh(_ENDPOINTS, [50, 100, 200, 400, 800])
        if picked is None:
            return
        endpoint, users = picked
        p95 = self.rng.randint(40, 900)
        dia = self.say(
            self.engineer_b,
            f"压测了 {endpoint}：并发 {users} 时 p95 延迟是 {p95} 毫秒，"
            f"日志在 logs/bench-{self.n()}.txt。",
        )
        self.ask(f"并发 {users} 时 {endpoint} 的 p95 延迟是多少毫秒？", str(p95), [dia], 4)

    def delay_chain(self) -> None:
        picked = self.fresh(["delay"], _MODULES)
        if picked is None:
            return
        first = picked[1]
        second = self.rng.choice([m for m in _MODULES if m != first])
        days = self.rng.randint(3, 20)
        cause = self.rng.choice(["安全审计没有通过", "第三方接口文档还没给", "核心开发请了病假"])
        a = self.say("助手", f"状态：{first}延期 {days} 天，因为{cause}。")
        b = self.say(self.engineer_a, f"{second}的联调依赖{first}，所以也要往后推。")
        self.ask(f"{first}延期会影响哪个模块的联调？", second, [a, b], 1)

    def preference_turn(self) -> None:
        self.preference_ids.append(self.say(self.manager, self.preference))

    def chatter(self) -> None:
        self.say(self.rng.choice([self.manager, self.engineer_a]), self.rng.choice(_CHATTER))

    def run_session(self, number: int, when: datetime) -> None:
        self.session = number
        self.turns = []
        steps = [self.decision, self.owner, self.outcome, self.chatter, self.chatter]
        steps += self.rng.sample([self.decision, self.outcome, self.owner], 2)
        self.rng.shuffle(steps)
        for step in steps:
            step()
        self.status(when)
        if number % 4 == 1:
            self.preference_turn()
        if number % 3 == 2:
            self.delay_chain()
        self.chatter()
        self.conversation[f"session_{number}"] = self.turns
        self.conversation[f"session_{number}_date_time"] = _locomo_time(when)

    def sample(self) -> dict[str, Any]:
        self.ask(
            f"{self.manager}对周报或沟通方式有什么要求？",
            self.preference_answer,
            list(self.preference_ids),
            3,
        )
        return {
            "sample_id": f"zh-{self.index + 1}",
            "conversation": self.conversation,
            "qa": self.qa,
        }


def generate(seed: int = SEED, projects: int = PROJECTS, sessions: int = SESSIONS) -> list[Any]:
    """The data set, as LoCoMo's JSON (a list of samples)."""
    rng = random.Random(seed)
    samples = []
    for index in range(projects):
        conversation = _Conversation(index, rng)
        when = datetime(2026, 3, 2, 9, 30, tzinfo=UTC) + timedelta(days=7 * index)
        for number in range(1, sessions + 1):
            conversation.run_session(number, when)
            when += timedelta(days=rng.choice([2, 3]), hours=rng.choice([0, 5]))
        samples.append(conversation.sample())
    return samples


def write(path: Path, seed: int = SEED) -> int:
    """Write the set to ``path``; returns the number of questions."""
    samples = generate(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(samples, ensure_ascii=False, indent=1), encoding="utf-8")
    return sum(len(sample["qa"]) for sample in samples)
