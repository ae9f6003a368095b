"""Stance, topic and conditions of a knowledge statement: what consolidation compares to
tell a merge from a contradiction. Two statements contradict when they share a topic but take
opposite stances (antonyms such as brief/detailed, or a negation); a condition ("for
architecture questions", "when reviewing") makes the contrary one conditional knowledge.

Chinese states the same things with words that stand inside a run of characters (周报请用
**简洁**的要点式, **不要**写太长): a statement holding Han characters is also read with the
Chinese axes, negations, liking words and conditions (遇到架构问题时, 如果是事故复盘, 对于
新人文档), matched in its text rather than among its tokens. English statements are read
exactly as before.
"""

from __future__ import annotations

import re

from pipelines.text.words import (
    NEGATIONS,
    STOPWORDS,
    content_tokens,
    has_han,
    normalise_token,
    raw_tokens,
    words,
)

# Opposite ends of the axes knowledge most often disagrees on. Side 0 and side 1.
_AXES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "length": (
        words("brief short concise terse succinct minimal compact shorter"),
        words(
            "detailed long verbose thorough extensive elaborate comprehensive in-depth "
            "longer lengthy"
        ),
    ),
    "formality": (frozenset({"formal"}), frozenset({"casual", "informal"})),
    "indentation": (frozenset({"tabs", "tab"}), frozenset({"spaces", "space"})),
    "amount": (frozenset({"more"}), frozenset({"less", "fewer"})),
    "pace": (frozenset({"fast", "quick", "quickly"}), frozenset({"slow", "slowly", "careful"})),
    "timing": (frozenset({"sync", "synchronous"}), frozenset({"async", "asynchronous"})),
}
# Verbs of liking set the polarity of a statement rather than an axis of their own: "I hate
# long answers" and "I prefer brief answers" agree.
_LIKING = frozenset({"like", "love", "enjoy", "prefer", "prefers", "want", "use"})
_DISLIKING = frozenset({"dislike", "hate", "hates", "avoid", "stop"})
_STANCE_WORDS = frozenset().union(*(a | b for a, b in _AXES.values())) | _LIKING | _DISLIKING
CUE_WORDS = words(
    """please prefer prefers preferred preference rather would i'd like love enjoy want
    favorite favourite always never use uses we our convention naming rule standard must
    should lesson learned mistake again avoid worked works well better fix fixed solved
    helped trick best practice effective"""
)
_CONDITION_RE = re.compile(
    r"\b(?:for|when|during|if|while)\s+((?:the\s+|a\s+|an\s+)?[\w'/-]+(?:\s+[\w'/-]+){0,4}?)"
    r"(?=\s*(?:[,.;!?]|$|\s+(?:and|but|or|so|because|unless|i|we|you|please)\b))",
    re.I,
)
_NOT_CONDITIONS = frozenset({"general", "now", "sure", "fact", "example", "short", "total"})


# -- the same in Chinese ---------------------------------------------------------------------
# Axes as regexes over the text, sides 0 and 1 as in ``_AXES``; 非正式 is not 正式.
_AXES_ZH: dict[str, tuple[re.Pattern[str], re.Pattern[str]]] = {
    "length": (
        re.compile(r"简短|简洁|简要|简明|精简|扼要|要点式|短一?些|短一点|言简意赅"),
        re.compile(r"详细|详尽|完整|展开|冗长|啰嗦|叙述式|长一?些|长一点|太长|过长|深入|全面|细致"),
    ),
    "formality": (re.compile(r"(?<!非)正式|书面"), re.compile(r"随意|口语|非正式|轻松")),
    "indentation": (re.compile(r"制表符|tab", re.I), re.compile(r"空格")),
    "amount": (re.compile(r"更多|多写|多给|多一些"), re.compile(r"更少|少写|少给|少一些")),
    "pace": (
        re.compile(r"尽快|快速|迅速|快一点|快一些"),
        re.compile(r"慢一点|慢慢|仔细|谨慎|稳妥"),
    ),
    "timing": (re.compile(r"(?<!异)同步"), re.compile(r"异步")),
}
_NEGATION_ZH_RE = re.compile(
    r"不要|不用|不想|不希望|不需要|不必|(?<![区识])别|勿|禁止|不能|不得|不许|不可|切忌|拒绝|没必要|"
    r"从不|从来不|永远不|不再"
)
# Verbs of disliking turn the polarity back, as in English ("讨厌写得太长" agrees with
# "希望写得简短").
_DISLIKING_ZH_RE = re.compile(r"讨厌|反感|不喜欢|受不了|避免")
# Cue, liking and stance words of Chinese statements: cut out of the text before its topic
# words are taken, so 希望 / 请用 / 一律 say nothing about what the statement is about.
_CUES_ZH_RE = re.compile(
    r"不喜欢|喜欢|偏好|希望|想要|宁愿|宁可|倾向于?|习惯(?:用|于)?|请(?:用|使用|保持|务必|尽量|先)?|"
    r"总是|始终|一律|统一(?:使用|用|采用)?|以后都|每次都|本项目|这个项目|我们|约定|规范|惯例|"
    r"教训|经验|效果很好|效果不错|很有效|最佳实践|讨厌|反感|避免|务必|必须|应该|一些|一点|"
    r"写得|写成|[我请的了都里很]"
)

# Conditions: a clause ending in 时 / 的时候 before a comma, or opened by 如果 / 对于 /
# 只有 ... 才; the verbs that introduce the situation (遇到, 碰到, 写, 做) are not part of it.
_CONDITION_ZH_RES: tuple[re.Pattern[str], ...] = (
    re.compile(r"(?:^|[，,；;。])\s*(?P<c>[^，,；;。！？!?]{1,16}?)(?:的时候|时候|时)\s*(?=[，,])"),
    re.compile(r"(?:如果|假如|要是|若是|若)(?P<c>[^，,；;。！？!?]{1,16}?)(?:的话)?\s*(?=[，,])"),
    re.compile(r"(?:对于|针对|关于)(?P<c>[^，,；;。！？!?]{1,16}?)\s*(?=[，,])"),
    re.compile(r"只有(?:在)?(?P<c>[^，,；;。！？!?]{1,16}?)(?:的时候|时)?才"),
)
_SITUATION_VERBS_RE = re.compile(r"^(?:遇到|碰到|涉及|处理|在|当|写|做|是)+")


def _conditions_zh(statement: str) -> str | None:
    for pattern in _CONDITION_ZH_RES:
        match = pattern.search(statement)
        if match is None:
            continue
        phrase = _SITUATION_VERBS_RE.sub("", match.group("c").strip())
        if content_tokens(phrase):
            return phrase
    return None


def conditions_of(statement: str) -> str | None:
    """The first 'for …' / 'when …' / 'in …' phrase that scopes the statement, if any; in
    Chinese, the situation of 遇到…时 / 如果… / 对于… / 只有…才."""
    for match in _CONDITION_RE.finditer(statement):
        phrase = " ".join(match.group(1).split())
        words = [w for w in raw_tokens(phrase) if w not in STOPWORDS]
        if words and not set(words) <= _NOT_CONDITIONS:
            return phrase
    if has_han(statement):
        return _conditions_zh(statement)
    return None


Stance = tuple[int, dict[str, int]]


def stance_of(statement: str) -> Stance:
    """(polarity, {axis: side}) of a statement, sides already flipped by the polarity.

    Polarity is -1 for a negation or a verb of disliking (both: +1 again), so "don't give
    me detailed answers", "I hate long answers" and "I prefer brief answers" all come out
    as ``length: brief``.
    """
    tokens = raw_tokens(statement)
    han = has_han(statement)
    negated = any(t in NEGATIONS for t in tokens) or (
        han and bool(_NEGATION_ZH_RE.search(statement))
    )
    polarity = -1 if negated else 1
    if any(t in _DISLIKING for t in tokens) or (han and _DISLIKING_ZH_RE.search(statement)):
        polarity = -polarity
    axes: dict[str, int] = {}
    for axis, (low, high) in _AXES.items():
        side = 0 if any(t in low for t in tokens) else (1 if any(t in high for t in tokens) else -1)
        if side < 0 and han:
            low_zh, high_zh = _AXES_ZH[axis]
            side = 0 if low_zh.search(statement) else (1 if high_zh.search(statement) else -1)
        if side >= 0:
            axes[axis] = side if polarity > 0 else 1 - side
    # With an axis the polarity is folded into the sides; it only matters without one.
    return (1 if axes else polarity), axes


_CLAUSE_RE = re.compile(r"[，,;；]")


def stance_by_clause(sentence: str) -> Stance:
    """The sentence's stance, read clause by clause: "不要写太长，要简洁" says brief twice
    (a negated long, then brief), where one reading of the whole would see a negated brief.
    Clauses that take both sides of an axis leave it undecided."""
    clauses = [c for c in _CLAUSE_RE.split(sentence) if c.strip()]
    if len(clauses) < 2:
        return stance_of(sentence)
    axes: dict[str, int] = {}
    split: set[str] = set()
    polarity = 1
    for clause in clauses:
        clause_polarity, clause_axes = stance_of(clause)
        if not clause_axes and clause_polarity < 0:
            polarity = -1
        for axis, side in clause_axes.items():
            if axes.setdefault(axis, side) != side:
                split.add(axis)
    decided = {axis: side for axis, side in axes.items() if axis not in split}
    return (1 if decided else polarity), decided


def topic_of(statement: str, conditions: str | None) -> frozenset[str]:
    """Content words minus stance, cue and condition words: what the knowledge is about."""
    skip = set(raw_tokens(conditions)) if conditions else set()
    if has_han(statement):
        # Conditions, cue and stance words are cut out of the text itself: a bigram across
        # one of them (望进 in 希望进度) is no topic word.
        for pattern in _CONDITION_ZH_RES:
            statement = pattern.sub(" ", statement)
        if conditions:
            statement = statement.replace(conditions, " ")
        statement = _CUES_ZH_RE.sub(" ", _NEGATION_ZH_RE.sub(" ", statement))
        for low, high in _AXES_ZH.values():
            statement = high.sub(" ", low.sub(" ", statement))
    return frozenset(
        normalise_token(t)
        for t in raw_tokens(statement)
        if t not in STOPWORDS
        and t not in NEGATIONS
        and t not in _STANCE_WORDS
        and t not in CUE_WORDS
        and t not in skip
    )


def opposed(a: Stance, b: Stance) -> bool:
    """Opposite ends of a shared axis; with no axis on either side, opposite polarities."""
    (polarity_a, axes_a), (polarity_b, axes_b) = a, b
    shared = set(axes_a) & set(axes_b)
    if shared:
        return any(axes_a[axis] != axes_b[axis] for axis in shared)
    if not axes_a and not axes_b:
        return polarity_a != polarity_b
    return False


def topic_overlap(a: frozenset[str], b: frozenset[str]) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / min(len(a), len(b))
