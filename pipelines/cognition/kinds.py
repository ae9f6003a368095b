"""The kind of a segment by cue words, in both languages: a decision with its rationale, a
user preference, a status change, an error with its root cause, chatter, or an outcome
(debug output is told by its shape, :func:`pipelines.cognition.segments.looks_like_debug`).
Stage 1 of the offline compressor annotates with it; quality sampling picks statements and
rationales with it.

English text is read with the English cues alone, in this order: an error with a cause or
an identifier, a decision (its reason after "because", "since", ...), chatter (fewer than
two informative words, a question without identifiers, or a sentence about the other party
with nothing of the speaker's own and no identifier or date), a preference, a status
change, else an outcome. Text holding Chinese is read in the same order with the cues of
both languages, and three more rules: a line label (``决策记录：``, ``状态变更：``, ``用户偏好：``,
``错误：``) names the kind; a reason (因为/由于/原因是, or what precedes 所以) marks a
decision when the statement is no status change, since Chinese states decisions without a
verb of deciding; and reactions are whole clauses (收到，谢谢), as is the small talk of a
working chat (稍等，我共享一下屏幕; 今天中午吃什么), which a relative date in it (明天再聊)
does not make a fact.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pipelines.cognition.protocol import SegmentKind
from pipelines.cognition.segments import is_question, looks_like_debug, split_clauses_han
from pipelines.text.dates import RELATIVE_RE, find_dates
from pipelines.text.identifiers import find_identifiers
from pipelines.text.words import (
    FILLERS,
    REACTIONS,
    STOPWORDS,
    fold,
    has_han,
    raw_tokens,
)

_DECISION_RE = re.compile(
    r"\b(?:decid(?:e|ed|ing)|decision|we(?:'ll|\s+will|\s+shall)\s+(?:use|go\s+with|keep|"
    r"switch|adopt|drop)|going\s+with|go\s+with|chose|choose|chosen|opt(?:ed)?\s+(?:for|to)|"
    r"settled\s+on|agreed\s+(?:to|on)|switch(?:ed|ing)?\s+(?:to|from)|picked\s+(?!up\b)|went\s+with|"
    r"instead\s+of|rather\s+than)\b",
    re.I,
)
_RATIONALE_RE = re.compile(
    r"\b(?:because|since|so\s+that|as\s+it|given\s+that|due\s+to|in\s+order\s+to|to\s+avoid|"
    r"which\s+means|the\s+reason)\b",
    re.I,
)
_PREFERENCE_RE = re.compile(
    r"\b(?:prefer(?:s|red|ence)?|i(?:'d|\s+would)\s+rather|i\s+(?:really\s+)?(?:like|love|"
    r"enjoy|hate|dislike|adore)|(?:don't|do\s+not|never)\s+(?:like|want)|can't\s+stand|"
    r"(?:my|our)\s+fav(?:ou)?rite|please\s+(?:always|never|don't|do\s+not|keep|use|avoid)|"
    r"always\s+(?:use|want|keep)|i\s+want|i'd\s+like)\b",
    re.I,
)
_STATUS_RE = re.compile(
    r"\b(?:is\s+now|are\s+now|moved\s+to|(?:un)?blocked|completed|finished|shipped|merged|"
    r"deployed|released|in\s+progress|on\s+hold|delayed|slipp(?:ed|ing)|closed|reopened|"
    r"status|got\s+(?:a\s+|the\s+)?(?:new\s+)?job|graduated|promoted|retired|quit|launched|"
    r"signed\s+up|started\s+(?:a|my|the|working|to)|(?:is|are|was)\s+done)\b",
    re.I,
)
_ERROR_RE = re.compile(
    r"\b(?:error|exception|traceback|stack\s*trace|crash(?:ed|es)?|bug|regression|segfault|"
    r"panic|oom|out\s+of\s+memory|timed?\s*out|deadlock|race\s+condition|"
    r"(?:http|status)\s*[45]\d\d|[45]\d\d\s+(?:error|response))\b",
    re.I,
)
_CAUSE_RE = re.compile(
    r"\b(?:because|caused\s+by|root\s+cause|due\s+to|turned\s+out|the\s+reason|was\s+caused|"
    r"came\s+from|triggered\s+by)\b",
    re.I,
)

# -- the same cues in Chinese ------------------------------------------------------------------
# Chinese has no word boundaries: a cue matches anywhere in the text, so cues are whole words
# of two or more characters, and the few that also end or start an unrelated word carry a
# lookaround (没有报错 "no errors" is no error, 回归测试 "regression test" no regression,
# 超时时间 "the timeout setting" no timeout).
_DECISION_ZH_RE = re.compile(
    r"决定|决策|决议|选择|选用|选定|采用|改用|改为|改成|换成|切换到|切到|确定(?:用|为|采用|使用)|"
    r"定为|定下|敲定|拍板|商定|同意(?:用|采用)|放弃|弃用|不再(?:用|使用)|保留|而不是|而非|替代|"
    r"取代|负责人(?:是|为|定为)|由[^，。；]{1,6}负责"
)
# A reason given for a statement: Chinese states many decisions without a verb of deciding
# ("签名密钥每 30 天轮换一次，原因是…"), so a reason marks a decision when the statement is
# not a status change or an error.
_RATIONALE_ZH_RE = re.compile(
    r"因为|由于|原因是|理由是|之所以|为了|以便|以免|免得|考虑到|鉴于|出于|所以|因此|因而"
)
# Connectives after which comes the consequence, not the reason: the reason is before them.
_CONSEQUENCE_ZH = frozenset({"所以", "因此", "因而"})
_PREFERENCE_ZH_RE = re.compile(
    r"偏好|(?<!不)喜欢|不喜欢|讨厌|希望|想要|宁愿|宁可|倾向|习惯(?:用|于)?|"
    r"(?<![申邀])请(?:用|使用|保持|不要|别|务必|一律|总是|始终|先|尽量|以后|统一)|"
    r"总是|一律|以后都|每次都|(?<!并)不要|别再|我的风格"
)
_STATUS_ZH_RE = re.compile(
    r"状态|已完成|完成|做完|搞定|上线|(?<!开)发布(?!会)|合并了|已合并|部署|延期|推迟|延后|延误|"
    r"阻塞|卡住|受阻|暂停|搁置|挂起|进行中|进入(?:评审|测试|开发|联调)|(?<!迁)移到|转到|(?<!开)关闭|"
    r"重新打开|已解决|(?<!未)开始|启动|交付|验收"
)
_ERROR_ZH_RE = re.compile(
    r"(?<![没无不零])(?<!没有)(?:报错|错误|异常|崩溃|故障|宕机|超时(?!时间|设置|配置|阈值|参数)|"
    r"死锁|内存溢出|泄漏|缺陷|回归(?!测试))"
)
# Causes that follow their cue ("…，因为连接池耗尽") and causes that precede it ("连接池
# 耗尽导致超时").
_CAUSE_AFTER_ZH_RE = re.compile(r"是因为|因为|由于|原因是|根本原因是?|根因是?|源于|起因是?")
_CAUSE_BEFORE_ZH_RE = re.compile(r"导致|引起|引发|造成")
# Labels that open a line and say what it is ("状态：已上线", "决策记录：…"): the kind
# they name is taken as it is, and the line is kept verbatim.
_LABEL_KINDS_ZH: dict[str, SegmentKind] = {
    **dict.fromkeys(("决策记录", "决策", "决定", "决议"), SegmentKind.DECISION_RATIONALE),
    **dict.fromkeys(("状态变更", "状态", "进展"), SegmentKind.STATUS_CHANGE),
    **dict.fromkeys(("用户偏好", "偏好"), SegmentKind.USER_PREFERENCE),
    **dict.fromkeys(("错误", "报错", "故障", "异常", "根因"), SegmentKind.ERROR_ROOT_CAUSE),
}
_LABEL_ZH_RE = re.compile(
    r"^\s*(" + "|".join(sorted(_LABEL_KINDS_ZH, key=len, reverse=True)) + r")\s*[:：]"
)
# Clauses that only react (thanks, acknowledgements, goodbyes): Chinese writes them as short
# set phrases, so a clause made only of these (and particles) is chatter.
_REACTION_CLAUSE_ZH_RE = re.compile(
    r"^(?:谢谢(?:你|您|大家)?|感谢|多谢|辛苦|收到|好的|好滴|好嘞|好吧|好啊|好|行|嗯|哦|哈|呵|"
    r"没问题|没事|不客气|明天再聊|回头再聊|回头聊|再聊|再见|拜拜|晚安|早上好|你好|您好|大家好|"
    r"太好|很好|不错|挺好|厉害|真棒|棒|赞|了解|明白|知道|可以|对的|是的|没错|加油|有帮助|"
    r"很有帮助|听起来不错|哇|恭喜|可爱|那就好|真好|太棒|羡慕|ok|okay|[了的啊呀吧呢哦嘛啦哈嗯～~!！.。\s])+$",
    re.I,
)
_CLAUSE_MARKS_ZH_RE = re.compile(r"[，,；;。！？!?：:\n]+")
# Small talk of a working chat: running the meeting (开始吧, 先到这里, 稍等, 共享屏幕,
# 听不清), stepping away (接个电话, 马上回来), follow-up promises with no content (我跟进一下,
# 我看一下), and the talk around the work: meals, coffee, the weather, the room, the weekend.
# A clause counts only when it holds such a cue and no digit (a clause with a number, such as
# "会议室换到 3 楼", may be a fact): these phrases carry nothing a summary needs.
_SMALL_TALK_ZH_RE = re.compile(
    r"开始吧|先到这(?:里|儿)|就到这|散会|稍等|等一下|等我一下|共享(?:一下)?屏幕|投屏|听不(?:太)?清|"
    r"听得到|能听到|网络(?:有点|有些|不太)?卡|掉线|卡住了吗|接个电话|马上回来|去趟洗手间|"
    r"(?:我|我们)?(?:先|再)?(?:跟进|看|确认|查|想)一下$|(?:我|我们)再(?:看看|想想)$|"
    r"链接我再发|再发一(?:遍|次)|发群里了|"
    r"吃什么|吃饭|午饭|午餐|晚饭|晚餐|外卖|食堂|面馆|奶茶|咖啡|下午茶|零食|"
    r"下(?:大)?雨|天气|好冷|好热|降温|注意安全|会议室|好好休息|周末(?:愉快|快乐|见)|"
    r"早点休息|节日快乐|生日快乐|大家早|早上好|下午好|晚上好"
)
_DIGIT_RE = re.compile(r"\d|[一二三四五六七八九十两百千万]+(?:个|次|天|周|月|年|点|号|楼|层|人|条)")


def _small_talk_clause(clause: str) -> bool:
    return bool(_SMALL_TALK_ZH_RE.search(clause)) and not _DIGIT_RE.search(clause)


def strip_reactions(text: str) -> str:
    """Chinese text without its clauses of pure reaction ("收到，谢谢" → "") and of small talk
    ("稍等，我共享一下屏幕" → ""); other text as it is (English reactions are words of
    ``REACTIONS``)."""
    if not has_han(text):
        return text
    clauses = _CLAUSE_MARKS_ZH_RE.split(text)
    return "，".join(
        c
        for c in clauses
        if c.strip() and not _REACTION_CLAUSE_ZH_RE.match(c) and not _small_talk_clause(c)
    )


def _informative(tokens: Iterable[str], names: set[str]) -> list[str]:
    return [
        t
        for t in tokens
        if t not in STOPWORDS and t not in FILLERS and t not in REACTIONS and t not in names
    ]


def classify_segment(
    text: str, party: Iterable[str] = ()
) -> tuple[SegmentKind, str | None, str | None]:
    """The kind of a segment by cue words, with the rationale or root cause when there is one."""
    if looks_like_debug(text) or text.lstrip().startswith("```"):
        return SegmentKind.DEBUG_OUTPUT, None, None
    if has_han(text):
        return _classify_han(text, party)
    names = {fold(p) for p in party}
    tokens = raw_tokens(text)
    informative = _informative(tokens, names)
    has_ids = bool(find_identifiers(text, exclude=party))
    error = _ERROR_RE.search(text)
    cause = _CAUSE_RE.search(text)
    if error and (cause or has_ids):
        root = text[cause.end() :].strip(" ,.:;") if cause else None
        return SegmentKind.ERROR_ROOT_CAUSE, None, root or None
    if _DECISION_RE.search(text) and informative:
        reason = _RATIONALE_RE.search(text)
        rationale = text[reason.start() :].strip(" ,.;") if reason else None
        return SegmentKind.DECISION_RATIONALE, rationale or None, None
    if len(informative) < 2 and not has_ids and not _mentions_date(text):
        return SegmentKind.CHATTER, None, None
    if text.rstrip().endswith("?") and not has_ids:
        return SegmentKind.CHATTER, None, None
    if _aimed_at_other(text) and not has_ids and not _mentions_date(text):
        return SegmentKind.CHATTER, None, None
    if _PREFERENCE_RE.search(text):
        return SegmentKind.USER_PREFERENCE, None, None
    if _STATUS_RE.search(text):
        return SegmentKind.STATUS_CHANGE, None, None
    return SegmentKind.OUTCOME, None, None


_HAN_EDGE_PUNCT = " ,.:;，。；：！？、"


def _classify_han(text: str, party: Iterable[str]) -> tuple[SegmentKind, str | None, str | None]:
    """The English rules' order with the cues of both languages (text with Chinese in it),
    plus line labels and a reason as the mark of a decision."""
    party = list(party)
    names = {fold(p) for p in party} | {t for p in party if has_han(p) for t in raw_tokens(p)}
    said = strip_reactions(text)  # "OK的，没问题": its OK is no identifier
    informative = _informative(raw_tokens(said), names)
    has_ids = bool(said) and bool(find_identifiers(said, exclude=party))
    label = _LABEL_ZH_RE.match(text)
    kind = _LABEL_KINDS_ZH[label.group(1)] if label else None
    if kind is None or kind is SegmentKind.ERROR_ROOT_CAUSE:
        error = _ERROR_RE.search(text) or _ERROR_ZH_RE.search(text)
        if kind is not None or (error and (_han_cause(text) or has_ids)):
            return SegmentKind.ERROR_ROOT_CAUSE, None, _root_cause_han(text)
    status = _STATUS_RE.search(text) or _STATUS_ZH_RE.search(text)
    reason = _RATIONALE_ZH_RE.search(text) or _RATIONALE_RE.search(text)
    decided = _DECISION_RE.search(text) or _DECISION_ZH_RE.search(text)
    if kind is SegmentKind.DECISION_RATIONALE or (
        informative and (decided or (reason and not status))
    ):
        return SegmentKind.DECISION_RATIONALE, _rationale_han(text), None
    if kind is not None:
        return kind, None, None
    if len(informative) < 2 and not has_ids and not _mentions_date(said):
        return SegmentKind.CHATTER, None, None
    if is_question(text) and not has_ids:
        return SegmentKind.CHATTER, None, None
    if _PREFERENCE_RE.search(text) or _PREFERENCE_ZH_RE.search(text):
        return SegmentKind.USER_PREFERENCE, None, None
    if status:
        return SegmentKind.STATUS_CHANGE, None, None
    return SegmentKind.OUTCOME, None, None


def _han_cause(text: str) -> re.Match[str] | None:
    after = _CAUSE_RE.search(text) or _CAUSE_AFTER_ZH_RE.search(text)
    return after or _CAUSE_BEFORE_ZH_RE.search(text)


def _rationale_han(text: str) -> str | None:
    """The reason of a decision: what follows 因为/由于/because, or what precedes 所以."""
    found = [m for m in (_RATIONALE_ZH_RE.search(text), _RATIONALE_RE.search(text)) if m]
    if not found:
        return None
    cue = min(found, key=lambda m: m.start())
    before = cue.group(0) in _CONSEQUENCE_ZH
    rationale = text[: cue.start()] if before else text[cue.start() :]
    return rationale.strip(_HAN_EDGE_PUNCT) or None


def _root_cause_han(text: str) -> str | None:
    """The root cause of an error: after 因为/由于/because, or before 导致/引起."""
    after = _CAUSE_RE.search(text) or _CAUSE_AFTER_ZH_RE.search(text)
    if after:
        return text[after.end() :].strip(_HAN_EDGE_PUNCT) or None
    before = _CAUSE_BEFORE_ZH_RE.search(text)
    if before:
        clause = split_clauses_han(text[: before.start()])
        return clause[-1].strip(_HAN_EDGE_PUNCT) if clause else None
    return None


_SECOND_PERSON_RE = re.compile(
    r"\b(?:you|your|yours|yourself|you're|you've|you'll|you'd|u|ur)\b", re.I
)
_FIRST_PERSON_RE = re.compile(
    r"\b(?:i|me|my|mine|myself|we|us|our|ours|i'm|i've|i'd|i'll|we're|we've|we'll|we'd)\b", re.I
)


def _aimed_at_other(text: str) -> bool:
    """A sentence about the other party with nothing of the speaker's own ("You'd be a great
    counselor!", "Your store looks amazing."): in a dialogue it reacts to what the other
    just said, which that party's own turn states."""
    return bool(_SECOND_PERSON_RE.search(text)) and not _FIRST_PERSON_RE.search(text)


def _mentions_date(text: str) -> bool:
    return bool(RELATIVE_RE.search(text)) or bool(find_dates(text))
