"""Attention focus: before retrieval, decide which kinds of information this step needs.

The directive is a ranked list of information kinds with weights that sum to one. It moves
three things: the elastic partitions' budgets (a debugging step wants its recent turns, a
planning step its past decisions), the fusion weights of the recallers (an identifier wants
exact keyword matches, "what did we just do" wants temporal recall), and α, the weight of
relevance in the final priority. An LLM may answer (``FocusLLM``); offline, cue words of
the query and the task phase decide.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, model_validator

from pipelines.errors import InvalidInput, MalformedLLMOutput
from pipelines.read.budget import Partition
from pipelines.read.rewrite import extract_keywords
from pipelines.records import TaskPhase
from pipelines.text.identifiers import count_identifiers
from pipelines.text.words import HAN, has_han

FOCUS_HINT_MAX_CHARS = 2_000


class InfoKind(StrEnum):
    DECISIONS = "decisions"
    PREFERENCES = "preferences"
    STATE = "state"
    IDENTIFIERS = "identifiers"
    TEMPORAL = "temporal"
    RECENT_ACTIVITY = "recent_activity"
    ERRORS = "errors"
    PROCEDURES = "procedures"
    FACTS = "facts"


class FusionWeights(BaseModel):
    model_config = ConfigDict(frozen=True)

    dense: float = Field(ge=0.0)
    sparse: float = Field(ge=0.0)
    temporal: float = Field(ge=0.0)


class RankedKind(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: InfoKind
    weight: float = Field(gt=0.0, le=1.0)


class FocusDirective(BaseModel):
    """What this step needs, most needed first; weights sum to one."""

    model_config = ConfigDict(frozen=True)

    kinds: tuple[RankedKind, ...] = Field(min_length=1)
    terms: tuple[str, ...] = ()
    source: str = "offline"

    @model_validator(mode="after")
    def _normalised(self) -> FocusDirective:
        total = sum(item.weight for item in self.kinds)
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"focus weights must sum to 1, got {total:.6f}")
        if len({item.kind for item in self.kinds}) != len(self.kinds):
            raise ValueError("each kind appears once in a focus directive")
        return self

    def weight(self, kind: InfoKind) -> float:
        return next((item.weight for item in self.kinds if item.kind is kind), 0.0)

    @property
    def top(self) -> InfoKind:
        return self.kinds[0].kind

    def partition_shifts(self) -> dict[Partition, float]:
        """Multipliers of the elastic partitions' weights, in [0.75, 1.5]."""
        shifts: dict[Partition, float] = {}
        for partition in (
            Partition.RETRIEVED_MEMORY,
            Partition.RECENT_INTERACTIONS,
            Partition.SCRATCH,
        ):
            mass = sum(
                item.weight * _AFFINITY[item.kind].get(partition, 0.0) for item in self.kinds
            )
            shifts[partition] = 0.75 + 0.75 * mass
        return shifts

    def fusion_weights(self) -> FusionWeights:
        w = self.weight
        semantic = (
            w(InfoKind.FACTS)
            + w(InfoKind.PREFERENCES)
            + w(InfoKind.DECISIONS)
            + w(InfoKind.PROCEDURES)
        )
        return FusionWeights(
            dense=1.0 + 0.5 * semantic,
            sparse=1.0 + 1.0 * w(InfoKind.IDENTIFIERS) + 0.5 * w(InfoKind.ERRORS),
            temporal=0.2
            + 1.3 * w(InfoKind.RECENT_ACTIVITY)
            + 0.3 * (w(InfoKind.STATE) + w(InfoKind.ERRORS)),
        )

    def alpha(self) -> float:
        """Weight of relevance in the priority: high for look-ups, lower for "what's new"."""
        return sum(item.weight * _ALPHA[item.kind] for item in self.kinds)


# Which elastic partition serves each kind.
_AFFINITY: dict[InfoKind, dict[Partition, float]] = {
    InfoKind.DECISIONS: {Partition.RETRIEVED_MEMORY: 1.0},
    InfoKind.PREFERENCES: {Partition.RETRIEVED_MEMORY: 1.0},
    InfoKind.FACTS: {Partition.RETRIEVED_MEMORY: 1.0},
    InfoKind.TEMPORAL: {Partition.RETRIEVED_MEMORY: 1.0},
    InfoKind.STATE: {Partition.RECENT_INTERACTIONS: 0.5, Partition.RETRIEVED_MEMORY: 0.5},
    InfoKind.IDENTIFIERS: {Partition.RETRIEVED_MEMORY: 0.5, Partition.RECENT_INTERACTIONS: 0.5},
    InfoKind.RECENT_ACTIVITY: {Partition.RECENT_INTERACTIONS: 1.0},
    InfoKind.ERRORS: {Partition.RECENT_INTERACTIONS: 0.7, Partition.SCRATCH: 0.3},
    InfoKind.PROCEDURES: {Partition.RETRIEVED_MEMORY: 0.6, Partition.SCRATCH: 0.4},
}

_ALPHA: dict[InfoKind, float] = {
    InfoKind.FACTS: 0.75,
    InfoKind.PREFERENCES: 0.75,
    InfoKind.IDENTIFIERS: 0.75,
    InfoKind.TEMPORAL: 0.75,
    InfoKind.DECISIONS: 0.7,
    InfoKind.PROCEDURES: 0.7,
    InfoKind.STATE: 0.6,
    InfoKind.ERRORS: 0.6,
    InfoKind.RECENT_ACTIVITY: 0.55,
}

_MONTHS = (
    r"jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|"
    r"sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?"
)
# Cue words of each kind, in English (word-bounded) and in Chinese (no spaces, so none).
_CUES_EN: dict[InfoKind, str] = {
    InfoKind.DECISIONS: (
        r"\b(decid\w*|decision\w*|chose|choose|choice|why did (?:we|you|i)|agreed|plan(?:ned|s)?"
        r"|approach|trade-?offs?|should (?:we|i)|rationale|go with|settled)\b"
    ),
    InfoKind.PREFERENCES: (
        r"\b(prefer\w*|favou?rite|like[sd]?|love[sd]?|enjoy\w*|hate[sd]?|dislike[sd]?|"
        r"style|want(?:s|ed)?|interest(?:s|ed)?|hobb(?:y|ies)|taste)\b"
    ),
    InfoKind.STATE: (
        r"\b(status|progress|current(?:ly)?|state|blocked|done|finished|complete[d]?|pending|"
        r"remaining|left to do|where are we|so far|still)\b"
    ),
    InfoKind.IDENTIFIERS: (
        r"\b(file|path|director(?:y|ies)|config\w*|setting|key|id|name[sd]?|version|port|url|"
        r"endpoint|command|variable|flag|table|column|branch|commit|number)\b"
    ),
    InfoKind.TEMPORAL: (
        r"\b(when|what (?:date|day|time|year|month)|how long|since|until|before|after|"
        r"ago|date[sd]?|year|month|week(?:end)?|day|during|first time|"
        rf"(?:{_MONTHS})|19\d\d|20\d\d)\b"
    ),
    InfoKind.RECENT_ACTIVITY: (
        r"\b(just|latest|recent(?:ly)?|last (?:step|turn|message|run|time|few)|previous(?:ly)?|"
        r"earlier(?: today)?|today|this (?:morning|session)|a moment ago|what (?:did|have) "
        r"(?:we|i|you) (?:just )?(?:do|done|try|tried))\b"
    ),
    InfoKind.ERRORS: (
        r"\b(errors?|exceptions?|fail\w*|bugs?|traceback|crash\w*|broken|fix\w*|issues?|"
        r"wrong|timeout|stack ?trace|debug\w*)\b"
    ),
    InfoKind.PROCEDURES: (
        r"\b(how (?:to|do|can|should)|steps?|procedure|instructions?|install\w*|set ?up|"
        r"configure|run|deploy\w*|recipe|process)\b"
    ),
}
# The same kinds in Chinese. 原因 and 理由 ask why something was decided (a failure's cause
# also counts as an error by its 失败/报错); 要求 and 希望 say what someone wants, like "want";
# 怎么样 asks how things stand and 怎么回事 what went wrong, so neither is a procedure.
_CUES_ZH: dict[InfoKind, str] = {
    InfoKind.DECISIONS: (
        r"决定|决策|定下|敲定|选定|选择|选用|采用|方案|理由|原因|权衡|取舍|商定|拍板|"
        r"为什么(?:选|用|要|改|定|采用)|为何(?:选|用|要|改|定)"
    ),
    InfoKind.PREFERENCES: (
        r"喜欢|偏好|偏爱|更愿意|倾向|习惯|风格|格式|口味|爱好|兴趣|讨厌|希望|想要|要求"
    ),
    InfoKind.STATE: (
        r"进度|进展|状态|现状|目前|当前|完成|做完|搞定|阻塞|卡住|卡在|待办|剩下|剩余|还差|"
        r"到哪|进行到|还在|仍然|怎么样"
    ),
    InfoKind.IDENTIFIERS: (
        r"文件|路径|目录|配置|设置|编号|名称|名字|版本|端口|地址|网址|链接|接口|命令|变量|参数|"
        r"数据表|表名|字段|列名|分支|提交|号码|工单号"
    ),
    InfoKind.TEMPORAL: (
        r"什么时候|何时|哪天|哪一天|几号|几点|几月|日期|多久|多长时间|以来|直到|之前|之后|以前|"
        r"以后|期间|第一次|首次|截止|上周|下周|本周|这周|昨天|前天|去年|上个月|下个月|"
        r"星期[一二三四五六日天]|周[一二三四五六日末]|\d+\s*[年月日号]"
    ),
    InfoKind.RECENT_ACTIVITY: (
        r"刚才|刚刚|最近|最新|上一步|上一轮|上一次|上次|今天|今早|这次会话|本次会话|"
        r"(?:做|试|尝试)了什么"
    ),
    InfoKind.ERRORS: (
        r"错误|报错|出错|失败|异常|故障|崩溃|缺陷|修复|修好|超时|堆栈|调试|排查|坏了|挂了|宕机|"
        r"不稳定|问题|怎么回事"
    ),
    InfoKind.PROCEDURES: (
        r"如何|怎么(?!样|回事)|怎样|步骤|流程|操作|说明|教程|安装|部署|搭建|配置|运行|执行|上线|发布"
    ),
}
_CUES: dict[InfoKind, re.Pattern[str]] = {
    kind: re.compile(f"{_CUES_EN[kind]}|{_CUES_ZH[kind]}", re.I) for kind in _CUES_EN
}
_HAN_RUN_RE = re.compile(f"[{HAN}]+")


def _cue_text(text: str) -> str:
    """``text`` with its Han runs set apart by spaces: an English word or an identifier
    touching one ("deploy失败", "PAY-3已完成") is word-bounded as it would be in English."""
    return _HAN_RUN_RE.sub(r" \g<0> ", text) if has_han(text) else text


# What a phase needs before any cue is read. FACTS needs no prior: its floor is below. A
# prior outweighs the floor so that a neutral question follows the phase, and a single cue
# word (1.0) outweighs a prior so that what is asked beats what is usual.
_PHASE_PRIORS: dict[TaskPhase, dict[InfoKind, float]] = {
    TaskPhase.PLANNING: {InfoKind.DECISIONS: 0.8, InfoKind.PREFERENCES: 0.5},
    TaskPhase.EXECUTION: {
        InfoKind.STATE: 0.6,
        InfoKind.IDENTIFIERS: 0.5,
        InfoKind.PROCEDURES: 0.5,
        InfoKind.RECENT_ACTIVITY: 0.4,
    },
    TaskPhase.DEBUGGING: {
        InfoKind.ERRORS: 0.9,
        InfoKind.RECENT_ACTIVITY: 0.5,
        InfoKind.IDENTIFIERS: 0.5,
    },
    TaskPhase.REVIEW: {InfoKind.DECISIONS: 0.7, InfoKind.STATE: 0.6},
    TaskPhase.REFLECTION: {InfoKind.DECISIONS: 0.6, InfoKind.ERRORS: 0.5},
}

# Every question asks for some facts; this floor keeps FACTS in every offline directive.
_FACTS_FLOOR = 0.5
# A kind below this share is noise: dropped and the rest renormalised.
_MIN_SHARE = 0.04


@runtime_checkable
class FocusLLM(Protocol):
    """What the focus decision asks of the LLM port."""

    @property
    def name(self) -> str: ...

    def focus_directive(
        self, query: str, phase: TaskPhase | None, hint: str | None
    ) -> FocusDirective: ...


def check_phase(value: object) -> TaskPhase | None:
    if value is None:
        return None
    if isinstance(value, TaskPhase):
        return value
    if isinstance(value, str):
        try:
            return TaskPhase(value.strip().lower())
        except ValueError:
            pass
    allowed = ", ".join(phase.value for phase in TaskPhase)
    raise InvalidInput("phase", f"unknown value {value!r}; expected one of: {allowed}")


def check_focus(value: object) -> str | tuple[InfoKind, ...] | None:
    """``focus`` is None, a free-text hint, or a sequence of kind names, most needed first."""
    if value is None:
        return None
    if isinstance(value, str):
        if len(value) > FOCUS_HINT_MAX_CHARS:
            raise InvalidInput(
                "focus",
                f"is {len(value)} characters; a focus hint is at most {FOCUS_HINT_MAX_CHARS}",
                limit=f"{FOCUS_HINT_MAX_CHARS} chars",
            )
        return value if value.strip() else None
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        kinds: list[InfoKind] = []
        for item in value:
            try:
                kind = InfoKind(item) if isinstance(item, str) else None
            except ValueError:
                kind = None
            if kind is None:
                allowed = ", ".join(k.value for k in InfoKind)
                raise InvalidInput("focus", f"unknown kind {item!r}; expected some of: {allowed}")
            if kind not in kinds:
                kinds.append(kind)
        if not kinds:
            raise InvalidInput("focus", "is an empty list; pass None for no focus")
        return tuple(kinds)
    raise InvalidInput(
        "focus", f"must be None, a text hint or a list of kinds, got {type(value).__name__}"
    )


def directive_from_weights(
    raw: Mapping[InfoKind, float], terms: Sequence[str], source: str
) -> FocusDirective:
    positive = {kind: value for kind, value in raw.items() if value > 0}
    if not positive:
        positive = {InfoKind.FACTS: 1.0}
    total = sum(positive.values())
    kept = {kind: value for kind, value in positive.items() if value / total >= _MIN_SHARE}
    total = sum(kept.values())
    ranked = sorted(kept.items(), key=lambda item: (-item[1], list(InfoKind).index(item[0])))
    weights = [value / total for _, value in ranked]
    weights[0] += 1.0 - sum(weights)  # absorb rounding so the sum is exactly one
    return FocusDirective(
        kinds=tuple(
            RankedKind(kind=kind, weight=weight)
            for (kind, _), weight in zip(ranked, weights, strict=True)
        ),
        terms=tuple(terms),
        source=source,
    )


def directive_from_kinds(kinds: Sequence[InfoKind], terms: Sequence[str]) -> FocusDirective:
    """A caller's explicit ranking: weight 1/rank, normalised."""
    return directive_from_weights(
        {kind: 1.0 / (rank + 1) for rank, kind in enumerate(kinds)}, terms, "caller"
    )


def offline_focus(
    query: str, phase: TaskPhase | None = None, hint: str | None = None
) -> FocusDirective:
    """Cue words of the query (and a caller's hint, counted 1.5x) plus the phase's priors."""
    raw: dict[InfoKind, float] = {kind: 0.0 for kind in InfoKind}
    raw[InfoKind.FACTS] = _FACTS_FLOOR
    for text, factor in ((query, 1.0), (hint or "", 1.5)):
        if not text:
            continue
        spaced = _cue_text(text)
        for kind, pattern in _CUES.items():
            raw[kind] += factor * min(2, len(pattern.findall(spaced)))
        if count_identifiers(spaced):
            raw[InfoKind.IDENTIFIERS] += factor * 0.5
    for kind, prior in (_PHASE_PRIORS.get(phase, {}) if phase else {}).items():
        raw[kind] += prior
    terms = extract_keywords(query + (" " + hint if hint else ""))
    return directive_from_weights(raw, terms, "offline")


def decide_focus(
    query: str,
    *,
    phase: TaskPhase | None = None,
    focus: str | Sequence[InfoKind] | None = None,
    llm: FocusLLM | None = None,
) -> FocusDirective:
    """The focus of one step. A caller's explicit kinds win; then the LLM; then the rules.

    A malformed LLM answer gets one retry, then the rules decide. Transient errors propagate.
    """
    hint = focus if isinstance(focus, str) else None
    terms = extract_keywords(query + (" " + hint if hint else ""))
    if focus is not None and not isinstance(focus, str):
        return directive_from_kinds(list(focus), terms)
    if llm is not None:
        for _ in range(2):
            try:
                directive = llm.focus_directive(query, phase, hint)
            except MalformedLLMOutput:
                continue
            return directive.model_copy(update={"terms": directive.terms or tuple(terms)})
        return offline_focus(query, phase, hint).model_copy(update={"source": "offline-fallback"})
    return offline_focus(query, phase, hint)
