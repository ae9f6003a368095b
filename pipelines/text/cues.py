"""Cue words of the memory types: which type a text's words suggest (a decision, a
preference, a status change, ...). The offline write rules, the extractive summary and the
reranker's kind match read them.

Each type has English cues (whole words) and Chinese cues. Chinese has no spaces, so its cues
match anywhere in a run of Han characters; the few that are also the start of an unrelated
word carry a lookaround (``请`` but not ``请问`` "may I ask", ``合并`` but not ``合并请求``
"merge request"). A reason ("because", 因为) counts as a decision cue in both languages:
a stated reason is what makes a choice worth remembering.
"""

from __future__ import annotations

import re

from pipelines.records import MemoryType


def _either(english: str, chinese: str) -> re.Pattern[str]:
    """English cues as whole words, or Chinese cues (regexes separated by whitespace, tried
    longest first so 已完成 counts once, not as 已完成 and 完成)."""
    cjk = sorted(chinese.split(), key=len, reverse=True)
    return re.compile(rf"\b({english})\b|" + "|".join(cjk), re.I)


_DECISION_ZH = r"""
    决定 决策 (?<!不)确定 选定 选择 选用 采用 改用 改为 换成 定为 定下 敲定 商定 约定 拍板
    代替 替代 取代 而不是 而非 权衡 取舍
    负责 里程碑 截止 期限 最晚 约束 限制 必须 务必 不得 不允许 禁止 硬性要求 强制
    (?:之|以)?前(?:完成|上线|交付|提交|发布|搞定)
    因为 原因 由于 所以 鉴于 考虑到 为了 理由 出于
"""
_PREFERENCE_ZH = r"""
    偏好 喜欢 希望 习惯 不要 (?<![申邀])请(?!问|假|求|教|示) 总是 从不 从来不 永远不 一律
    以后都 每次都 统一 宁愿 宁可 倾向 更愿意 我想要 别再 千万别 风格
"""
_STATUS_ZH = r"""
    状态 已完成 完成 做完 搞定 进行中 开始 阻塞 卡住 受阻 延期 推迟 延后 暂停 挂起 上线
    发布(?!会) 合并(?!请求) 关闭 重新打开 已解决 交付
"""
_FEEDBACK_ZH = r"""
    错了 不对 搞错 弄错 做得好 干得好 干得漂亮 不是我要的 不是我想要的 太长 太短 太啰嗦
    应该先 本应 本该 不该 别这样 失误 教训 返工
"""
_ACTION_ZH = r"""
    运行 跑了 跑完 执行 部署 修复 提交 推送 重构 创建 新建 删除 迁移 安装 更新 升级 实现
    添加 新增 移除 重命名 调用 编写 压测 评审
"""

_TYPE_CUES: tuple[tuple[MemoryType, re.Pattern[str]], ...] = (
    (
        MemoryType.DECISION,
        _either(
            r"decid\w*|we(?:'ll| will) (?:use|go with)|chose|choos\w+|agreed|settled on|"
            r"going with|opt(?:ed)? for|switch(?:ed)? to|instead of|because|rationale|"
            r"trade-?off|constraint|must(?: not)?|may not|required to|deadline|"
            # Owners and milestones: the commitments later work is planned around. Written
            # as phrases, because "owner" and "milestone" alone are everyday words too
            # ("a dog owner", "a milestone moment").
            r"owner of|owned by|owns the|owner(?: is|:)|responsible for|in charge of|"
            r"assigned to|milestone(?: \d| is|:| date| for| will| of)|due (?:by|on|date)|"
            r"no later than",
            _DECISION_ZH,
        ),
    ),
    (
        MemoryType.PREFERENCE,
        _either(
            r"prefer\w*|i like|i don't like|i dislike|always|never|please (?:always|"
            r"don't|do not)|i want|i'd rather|rather than|my style",
            _PREFERENCE_ZH,
        ),
    ),
    (
        MemoryType.STATUS_CHANGE,
        _either(
            r"status|blocked|unblocked|is now|moved to|done|completed|finished|shipped|"
            r"merged|deployed|released|in progress|started|delayed|slipp\w+|on hold|"
            r"closed|reopened",
            _STATUS_ZH,
        ),
    ),
    (
        MemoryType.FEEDBACK,
        _either(
            r"wrong|incorrect|that's not|not what i|good job|well done|mistake|fix this|"
            r"too (?:long|short|verbose)|should have|don't do that",
            _FEEDBACK_ZH,
        ),
    ),
    (
        MemoryType.ACTION,
        _either(
            r"ran|run|running|created|deleted|wrote|updated|installed|executed|called|"
            r"opened|committed|pushed|refactor\w*|implemented|added|removed|renamed",
            _ACTION_ZH,
        ),
    ),
)


def guess_type(content: str) -> tuple[MemoryType, int]:
    """The first type whose cues match, and how many cue words matched in all."""
    best: MemoryType | None = None
    hits = 0
    for memory_type, pattern in _TYPE_CUES:
        found = len(pattern.findall(content))
        if found and best is None:
            best = memory_type
        hits += found
    return (best or MemoryType.OBSERVATION), hits


# What later work is planned around: who owns a thing, a milestone, a deadline, a constraint.
_COMMITMENT_RE = re.compile(
    r"\b(?:owners?|owns|owned by|responsible for|in charge of|assigned to|milestones?|"
    r"deadlines?|due (?:by|on|date)|no later than|constraints?|must|required to|may not)\b|"
    r"负责|里程碑|截止|期限|最晚|约束|限制|必须|务必|不得|不允许|禁止|硬性要求|强制|"
    r"(?:之|以)?前(?:完成|上线|交付|提交|发布|搞定)",
    re.I,
)


def names_commitment(content: str) -> bool:
    """Whether the text names an owner, a milestone, a deadline or a constraint."""
    return _COMMITMENT_RE.search(content) is not None
