"""A Chinese evaluation set in LoCoMo's format: generated project-tracking histories.

No public Chinese set holds what this system is for (long project histories with decisions,
owners, constraints, status changes and preferences, and questions whose evidence turns are
known), so one is generated, honestly and reproducibly:

* **What**: ``PROJECTS`` software projects, each one conversation of ``SESSIONS`` meetings
  two to four days apart (ten to eleven weeks), among a manager, three engineers, a tester,
  an operations engineer and the agent (助手), over eight modules. A meeting holds about
  eighteen turns, more than half of them chatter (好的, 收到, lunch, the weather, the room):
  decisions with their reasons (the right kind of technology for the aspect decided), some
  reversed weeks later with a new reason; module owners and why; constraints with numbers
  and their cause; tickets that start, get blocked and finish on different days; load-test
  results; delays and the later meeting where another module turns out to depend on the
  delayed one; and each person's working preference, restated in other words on other days.
* **How**: sentence templates written for this project in natural Chinese (not translated from
  the English sets), slots filled from fixed lists with ``random.Random(seed)``; the same seed
  gives the same file byte for byte. Questions are worded differently from the turns that
  answer them (归谁管 for 负责人, 上限 for 不能超过, a scenario for a preference), so neither
  the keyword nor the dense side finds them by copying.
* **Questions**: every question is generated with the turn(s) that answer it, so its
  ``evidence`` dia_ids are exact, and its ``answer`` occurs verbatim in an evidence turn (or,
  for temporal questions asking when, is the meeting's date). Categories follow LoCoMo:
  1 multi-hop (a delay and the module that depends on it, stated in different meetings; a
  reversed decision and the original; a ticket's module and that module's owner: two evidence
  turns each), 2 temporal (when a ticket finished or got blocked: the meeting's date; which
  ticket got blocked on a named day), 3 open-domain (a scenario the person's preference or a
  team rule answers without naming it: every restatement is evidence), 4 single-hop (an
  owner, a technology, a limit, a measured number).
* **Size** (default seed): 3 conversations, 1,301 turns (776 chatter), 482 questions: 95
  multi-hop, 118 temporal, 21 open-domain, 248 single-hop.
* **Limits**: templates repeat, so the set measures retrieval of Chinese project facts among
  look-alike facts about other modules, not fluency; it holds no adversarial (category 5)
  questions; the people and numbers are invented.

``memharness bench dataset zh-project --out PATH`` writes it; ``bench compression --data
PATH`` and ``bench retrieval-quality --data PATH`` read it like any LoCoMo file.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

PROJECTS = 3
SESSIONS = 24
SEED = 20261204

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
# What is decided, with the technologies that fit it (the first two are the usual pair).
_ASPECTS: dict[str, list[str]] = {
    "数据库": ["PostgreSQL", "MySQL", "TiDB"],
    "缓存": ["Redis", "Memcached", "本地 LRU 缓存"],
    "消息队列": ["Kafka", "RabbitMQ", "RocketMQ"],
    "接口协议": ["gRPC", "REST", "GraphQL"],
    "部署方式": ["Kubernetes", "虚拟机", "Serverless"],
    "日志方案": ["ELK", "Loki", "ClickHouse"],
}
_ASPECT_ASKS = [
    "{module}最后选了哪种{aspect}？",
    "{module}的{aspect}定的是哪个方案？",
    "{module}那边{aspect}用的什么？",
]
_REASONS = [
    "能和现有的事务一起提交，不用再做补偿",
    "结账链路的 p99 要压在 {n} 毫秒以内",
    "运维组已经在生产上跑了两年，出了问题知道怎么处理",
    "压测里同样吞吐内存少用了 {n}%",
    "旧的客户端库在工单 OPS-{n} 里出过连接泄漏",
    "供应商明年起不再给旧版本打补丁",
    "团队里三个人都用过，上手快",
]
_REVERSAL_REASONS = [
    "上线后发现高峰期延迟抖动太大",
    "许可证条款变了，法务不同意继续用",
    "云厂商的托管版本比自己维护便宜一半",
    "和新的监控体系对接不上",
]
_OWNER_WHY = [
    "之前做过第三方支付网关的对接，经验最多",
    "写过现在的权限模型，最清楚历史包袱",
    "上个季度刚把这块的测试覆盖率提到 80%",
    "负责过双十一的扩容，熟悉高峰期的流量",
    "对这部分代码最熟，改起来最快",
]
_OWNER_SAYS = [
    "{module}交给{person}负责，{person}{why}。",
    "{module}这块以后由{person}牵头，因为{person}{why}。",
]
_OWNER_ASKS = ["{module}归谁管？", "{module}现在找谁对接？", "谁在牵头{module}？"]
# (what is limited, unit, allowed values, causes)
_LIMITS = [
    (
        "单次请求的超时时间",
        "秒",
        [3, 5, 8, 10],
        ["上游网关会在这之后直接断开", "超过了用户就会重复点击"],
    ),
    ("令牌有效期", "分钟", [15, 30, 60], ["等保合规有要求", "安全审计提出的整改项"]),
    ("单表行数", "万行", [500, 1000, 2000], ["再大备份窗口就不够了", "DBA 给的容量规划"]),
    ("批量接口每次的条数", "条", [100, 200, 500], ["下游按这个做的内存预算", "再多会触发限流"]),
    ("重试次数", "次", [2, 3, 5], ["重试太多会放大故障", "第三方按调用次数收费"]),
]
_LIMIT_SAYS = [
    "约束：{module}的{what}不能超过{value}{unit}，因为{why}。",
    "提醒一下，{module}的{what}最多{value}{unit}，{why}。",
]
_LIMIT_ASKS = ["{module}的{what}上限是多少{unit}？", "{module}的{what}最多允许多少{unit}？"]
_TASKS = ["联调", "灰度发布", "数据迁移", "压测", "代码评审", "安全审计", "回归测试"]
_BLOCKERS = ["等第三方给测试账号", "测试环境数据库挂了", "依赖的接口还没发版", "等安全组开端口"]
_ENDPOINTS = [
    "/api/pay",
    "/api/login",
    "/api/orders",
    "/api/invoices",
    "/api/search",
    "/api/notify",
]
_DELAY_CAUSES = ["安全审计没有通过", "第三方接口文档一直没给", "核心开发请了病假", "需求又改了一轮"]
_CHATTER = [
    "好的",
    "收到，谢谢",
    "辛苦了",
    "明白，我跟进一下",
    "好的，明天再聊",
    "没问题",
    "今天中午吃什么？楼下新开了一家面馆",
    "外面下大雨了，大家回去注意安全",
    "下午的会议室换到三楼了",
    "我先去接个电话，马上回来",
    "周末大家好好休息",
    "咖啡机又坏了，谁去报修一下",
    "我这边网络有点卡，听不太清",
    "刚才那个链接我再发一遍",
    "哈哈，这个bug藏得真深",
    "今天先到这里吧",
    "稍等，我共享一下屏幕",
    "大家早上好",
]
_MONTHS = [
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
]  # fmt: skip


class _Cast:
    def __init__(self, index: int) -> None:
        surnames = ["王", "刘", "周", "郑", "何", "罗"]
        engineers = ["张", "李", "赵", "陈", "孙", "吴", "钱", "冯", "许"]
        self.manager = f"{surnames[index % len(surnames)]}经理"
        self.engineers = [f"{engineers[(3 * index + i) % len(engineers)]}工" for i in range(3)]
        self.tester = f"测试{['小林', '小何', '小唐'][index % 3]}"
        self.ops = f"运维{['老黄', '老高', '老马'][index % 3]}"

    def everyone(self) -> list[str]:
        return [self.manager, *self.engineers, self.tester, self.ops]


# Each person's working preference: how it is said on different days (each wording holds the
# answer), and a scenario question that it answers without naming it.
def _preferences(cast: _Cast) -> list[tuple[str, list[str], str, str]]:
    a, b, _ = cast.engineers
    return [
        (
            cast.manager,
            [
                "周报请用要点，先写结论再写细节。",
                "我再说一次，周报写成要点就行，结论放最前面。",
                "上周的周报太长了，以后都按要点写，别写大段文字。",
            ],
            "要点",
            f"给{cast.manager}写周报时应该注意什么格式？",
        ),
        (
            a,
            [
                "评审意见请直接写在合并请求里，别私聊我。",
                "代码的问题都留在合并请求里评论吧，私聊我容易漏。",
            ],
            "合并请求",
            f"发现{a}提交的代码有问题，该在哪里告诉他？",
        ),
        (
            cast.ops,
            [
                "发版通知至少提前一天发到项目群。",
                "再提醒一下，要上线的话提前一天在项目群里说，我好排人值守。",
                "昨天又是临时通知上线，下次务必提前一天。",
            ],
            "提前一天",
            f"打算后天上线，什么时候要通知{cast.ops}？",
        ),
        (
            cast.tester,
            [
                "提缺陷的时候请附上复现步骤和截图。",
                "缺陷单没有复现步骤我这边没法验证，大家记得写。",
            ],
            "复现步骤",
            f"给{cast.tester}提一个新缺陷，需要带上哪些信息？",
        ),
        (
            b,
            [
                "我上午要专心写代码，会议尽量安排在下午。",
                "能不能把评审会挪到下午？上午我一般在写代码。",
            ],
            "下午",
            f"想约{b}开个短会，安排在什么时段比较好？",
        ),
    ]


# Team rules: (rule as said on different days, the answer inside it, the scenario question).
_RULES = [
    (
        ["周五不发版，出了问题周末没人处理。", "再强调一遍规矩：周五不发版。"],
        "周五不发版",
        "这周五下午想把新版本推上线，按团队的规矩行不行？",
    ),
    (
        [
            "上线前必须准备好回滚方案，没有回滚方案不许上。",
            "每次上线都要先写回滚方案，这条不能省。",
        ],
        "回滚方案",
        "上线检查单里最不能漏的是哪一项？",
    ),
]


_HAN_SPACE_RE = re.compile(r"(?<=[\u4e00-\u9fff]) (?=[\u4e00-\u9fff])")


def _locomo_time(when: datetime) -> str:
    """LoCoMo's session time format ("9:00 am on 8 May, 2026")."""
    hour = when.hour % 12 or 12
    half = "am" if when.hour < 12 else "pm"
    return f"{hour}:{when.minute:02d} {half} on {when.day} {_MONTHS[when.month - 1]}, {when.year}"


def _zh_day(when: datetime) -> str:
    return f"{when.month}月{when.day}日"


class _Conversation:
    def __init__(self, index: int, rng: random.Random) -> None:
        self.rng = rng
        self.index = index
        self.cast = _Cast(index)
        self.conversation: dict[str, Any] = {"speaker_a": self.cast.manager, "speaker_b": "助手"}
        self.qa: list[dict[str, Any]] = []
        self.asked: set[str] = set()
        self.turns: list[dict[str, str]] = []
        self.session = 0
        self.when = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)
        # Each fact is stated once per conversation, so every question has one answer.
        self.used: set[tuple[str, ...]] = set()
        self.decisions: dict[
            tuple[str, str], tuple[str, str]
        ] = {}  # (module, aspect) -> (tech, id)
        self.owners: dict[str, tuple[str, str]] = {}  # module -> (person, id)
        self.tickets: list[dict[str, Any]] = []
        self.delays: list[tuple[str, str]] = []  # (module delayed, dia_id)
        # (person, wordings not said yet, answer, question, ids of the turns that said it)
        self.preferences: list[tuple[str, list[str], str, str, list[str]]] = [
            (p, list(says), answer, q, []) for p, says, answer, q in _preferences(self.cast)
        ]
        self.rules: list[tuple[list[str], str, str, list[str]]] = [
            (list(says), answer, q, []) for says, answer, q in _RULES
        ]
        self.ticket_number = 100 + 37 * index

    # -- primitives --------------------------------------------------------------------

    def fresh(self, *choices: list[Any]) -> tuple[Any, ...] | None:
        """A combination of ``choices`` not stated yet in this conversation, or None."""
        for _ in range(60):
            picked = tuple(self.rng.choice(options) for options in choices)
            key = tuple(map(str, picked))
            if key not in self.used:
                self.used.add(key)
                return picked
        return None

    def say(self, speaker: str, text: str) -> str:
        # Latin words are spaced from Han text; a Han slot value is not (不用 虚拟机 → 不用虚拟机).
        text = _HAN_SPACE_RE.sub("", text)
        dia_id = f"D{self.session}:{len(self.turns) + 1}"
        self.turns.append({"speaker": speaker, "dia_id": dia_id, "text": text})
        return dia_id

    def ask(self, question: str, answer: str, evidence: list[str], category: int) -> None:
        if question in self.asked:
            return
        self.asked.add(question)
        self.qa.append(
            {"question": question, "answer": answer, "evidence": evidence, "category": category}
        )

    def n(self) -> int:
        return self.rng.randint(3, 900)

    def engineer(self) -> str:
        return self.rng.choice(self.cast.engineers)

    # -- facts -------------------------------------------------------------------------

    def decision(self) -> None:
        picked = self.fresh(["decision"], _MODULES, list(_ASPECTS))
        if picked is None:
            return
        _, module, aspect = picked
        tech, old = self.rng.sample(_ASPECTS[aspect], 2)
        reason = self.rng.choice(_REASONS).format(n=self.n())
        template = self.rng.choice(
            [
                "{module}的{aspect}决定用 {tech}，不用 {old}，因为{reason}。",
                "评审后确定：{module}的{aspect}采用 {tech}，原因是{reason}。",
                "我们选定 {tech} 作为{module}的{aspect}，{old} 先不考虑了，因为{reason}。",
            ]
        )
        text = template.format(module=module, aspect=aspect, tech=tech, old=old, reason=reason)
        dia = self.say(self.rng.choice([self.engineer(), self.cast.manager, "助手"]), text)
        self.decisions[(module, aspect)] = (tech, dia)
        ask = self.rng.choice(_ASPECT_ASKS).format(module=module, aspect=aspect)
        self.ask(ask, tech, [dia], 4)

    def reversal(self) -> None:
        """A decision taken weeks ago is changed: the later question needs both turns."""
        open_ = [k for k in self.decisions if ("reversed", *k) not in self.used]
        if not open_:
            self.decision()
            return
        module, aspect = self.rng.choice(sorted(open_))
        self.used.add(("reversed", module, aspect))
        first, first_id = self.decisions[(module, aspect)]
        new = self.rng.choice([t for t in _ASPECTS[aspect] if t != first])
        why = self.rng.choice(_REVERSAL_REASONS)
        dia = self.say(
            self.cast.manager,
            f"变更：{module}的{aspect}不再用原来的方案，改成 {new}，{why}。",
        )
        # The single-hop question about this aspect now has two answers over time: it is
        # replaced by the two-turn question.
        self.qa = [q for q in self.qa if q["evidence"] != [first_id] or q["answer"] != first]
        self.ask(f"{module}的{aspect}换掉的是哪个方案？", first, [first_id, dia], 1)
        self.ask(f"{module}的{aspect}为什么后来又改了？", why, [dia], 4)

    def owner(self) -> None:
        picked = self.fresh(["owner"], _MODULES)
        if picked is None:
            self.decision()
            return
        module = picked[1]
        person = self.engineer()
        why = self.rng.choice(_OWNER_WHY)
        text = self.rng.choice(_OWNER_SAYS).format(module=module, person=person, why=why)
        dia = self.say(self.cast.manager, text)
        self.owners[module] = (person, dia)
        self.ask(self.rng.choice(_OWNER_ASKS).format(module=module), person, [dia], 4)

    def limit(self) -> None:
        picked = self.fresh(["limit"], _MODULES, list(range(len(_LIMITS))))
        if picked is None:
            return
        _, module, which = picked
        what, unit, values, causes = _LIMITS[which]
        value = str(self.rng.choice(values))
        text = self.rng.choice(_LIMIT_SAYS).format(
            module=module, what=what, value=value, unit=unit, why=self.rng.choice(causes)
        )
        dia = self.say(self.rng.choice([self.cast.manager, self.cast.ops, self.engineer()]), text)
        ask = self.rng.choice(_LIMIT_ASKS).format(module=module, what=what, unit=unit)
        self.ask(ask, value, [dia], 4)

    def ticket_start(self) -> None:
        picked = self.fresh(["ticket"], _MODULES, _TASKS)
        if picked is None:
            return
        _, module, task = picked
        self.ticket_number += self.rng.randint(1, 9)
        ticket = f"PRJ-{self.ticket_number}"
        person = self.engineer()
        dia = self.say(person, f"我开始做{module}的{task}了，工单是 {ticket}。")
        self.tickets.append(
            {"id": ticket, "module": module, "task": task, "start": dia, "state": "open"}
        )

    def ticket_move(self) -> None:
        """A ticket opened before gets blocked or finishes, on this meeting's date."""
        live = [
            t
            for t in self.tickets
            if t["state"] in ("open", "blocked") and t["start"].split(":")[0] != f"D{self.session}"
        ]
        if not live:
            self.ticket_start()
            return
        ticket = self.rng.choice(live)
        module, task, number = ticket["module"], ticket["task"], ticket["id"]
        # One ticket blocked a meeting at most: "which ticket got blocked that day" has one answer.
        blocked_today = any("被阻塞" in turn["text"] for turn in self.turns)
        if ticket["state"] == "open" and not blocked_today and self.rng.random() < 0.4:
            blocker = self.rng.choice(_BLOCKERS)
            dia = self.say("助手", f"状态更新：工单 {number} 被阻塞了，原因是{blocker}。")
            ticket["state"] = "blocked"
            # The status turn names the ticket only: which work it is, its opening says.
            day = self.when.date().isoformat()
            self.ask(f"{module}的{task}是哪天卡住的？", day, [ticket["start"], dia], 2)
            self.ask(f"{_zh_day(self.when)}那次会上，哪个工单被阻塞了？", number, [dia], 2)
            return
        dia = self.say("助手", f"状态更新：工单 {number} 已经完成，可以关单了。")
        ticket["state"] = "done"
        day = self.when.date().isoformat()
        self.ask(f"{module}的{task}是哪天做完的？", day, [ticket["start"], dia], 2)
        owner = self.owners.get(module)
        if owner is not None:
            self.ask(
                f"工单 {number} 所在模块的负责人是谁？", owner[0], [ticket["start"], owner[1]], 1
            )

    def measurement(self) -> None:
        picked = self.fresh(["load"], _ENDPOINTS, [50, 100, 200, 400, 800])
        if picked is None:
            return
        _, endpoint, users = picked
        p95 = str(self.rng.randint(40, 900))
        dia = self.say(
            self.cast.tester,
            f"压测结果：{endpoint} 在 {users} 并发下 p95 延迟是 {p95} 毫秒，"
            f"报告在 reports/load-{self.n()}.html。",
        )
        self.ask(f"{endpoint} 压到 {users} 个并发的时候 p95 是多少毫秒？", p95, [dia], 4)

    def delay(self) -> None:
        picked = self.fresh(["delay"], _MODULES)
        if picked is None:
            return
        module = picked[1]
        days = self.rng.randint(3, 20)
        cause = self.rng.choice(_DELAY_CAUSES)
        dia = self.say("助手", f"风险：{module}要延期 {days} 天，因为{cause}。")
        self.delays.append((module, dia))

    def dependency(self) -> None:
        """A later meeting learns that another module depends on a delayed one."""
        if not self.delays:
            self.delay()
            return
        first, first_id = self.delays.pop(0)
        second = self.rng.choice([m for m in _MODULES if m != first])
        dia = self.say(
            self.engineer(),
            f"刚发现{second}的联调要调用{first}的新接口，那边没好我们也开始不了。",
        )
        self.ask(f"{first}延期会拖累哪个模块？", second, [first_id, dia], 1)

    def preference(self) -> None:
        waiting = [p for p in self.preferences if p[1]]
        if not waiting:
            self.rule()
            return
        person, says, _, _, ids = self.rng.choice(waiting)
        ids.append(self.say(person, says.pop(0)))

    def rule(self) -> None:
        waiting = [r for r in self.rules if r[0]]
        if not waiting:
            self.chatter()
            return
        says, _, _, ids = self.rng.choice(waiting)
        ids.append(self.say(self.cast.manager, says.pop(0)))

    def chatter(self) -> None:
        self.say(self.rng.choice(self.cast.everyone()), self.rng.choice(_CHATTER))

    # -- meetings ----------------------------------------------------------------------

    def run_session(self, number: int) -> None:
        self.session = number
        self.turns = []
        facts: list[Callable[[], None]] = [self.decision, self.owner, self.ticket_start]
        facts += self.rng.sample(
            [self.limit, self.measurement, self.ticket_move, self.ticket_move, self.decision], 3
        )
        if number > 6 and self.rng.random() < 0.4:
            facts.append(self.reversal)
        if number % 3 == 1:
            facts.append(self.delay)
        if number % 3 == 0:
            facts.append(self.dependency)
        if number % 2 == 0:
            facts.append(self.preference)
        if number % 5 == 3:
            facts.append(self.rule)
        steps = facts + [self.chatter] * self.rng.randint(len(facts) - 1, len(facts) + 3)
        self.rng.shuffle(steps)
        self.say(self.rng.choice(self.cast.everyone()), "大家早上好，开始吧")
        for step in steps:
            step()
        self.chatter()
        self.conversation[f"session_{number}"] = self.turns
        self.conversation[f"session_{number}_date_time"] = _locomo_time(self.when)

    def sample(self) -> dict[str, Any]:
        for _, _, answer, question, ids in self.preferences:
            if ids:
                self.ask(question, answer, list(ids), 3)
        for _, answer, question, ids in self.rules:
            if ids:
                self.ask(question, answer, list(ids), 3)
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
        conversation.when += timedelta(days=7 * index)
        for number in range(1, sessions + 1):
            conversation.run_session(number)
            conversation.when += timedelta(days=rng.choice([2, 3, 4]), hours=rng.choice([0, 5]))
        samples.append(conversation.sample())
    return samples


def write(path: Path, seed: int = SEED) -> int:
    """Write the set to ``path``; returns the number of questions."""
    samples = generate(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(samples, ensure_ascii=False, indent=1), encoding="utf-8")
    return sum(len(sample["qa"]) for sample in samples)
