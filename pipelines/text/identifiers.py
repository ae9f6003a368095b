"""Identifiers in text: numbers, paths, tickets, keys, code names and the names of people,
the things a summary must not lose and a search must match exactly.

Three detectors for three jobs: :func:`count_identifiers` (a quick count, for importance and
focus), :func:`holds_identifiers` (configuration keys and CamelCase too, for eviction) and
:func:`find_identifiers` (the identifiers themselves, for the compression protocol).

Chinese text has no spaces and no capitals, so a text holding Han characters is read for
four more shapes first: dates (2027年1月15日), numbers with their unit (3天, 20%, 5万,
2 小时), people named by surname and title (张工, 李总, 王经理, 刘老师, 小王) and modules or
systems (支付模块, 认证服务, 第三方网关, 订单系统). The English shapes are then looked for
in what is left, with Han characters as word boundaries (``用Redis存`` holds ``Redis``). A
text without Han characters is read exactly as before.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pipelines.text.words import (
    CJK_STOPWORDS,
    HAN,
    HAN_SEPARATOR_CHARS,
    STOPWORDS,
    fold,
    has_han,
    words,
)

_IDENTIFIER_RE = re.compile(
    r"(?:[\w.-]+/[\w./-]+|\b\w+\.\w{1,5}\b|\b[A-Z]{2,}-\d+\b|\b\d+(?:\.\d+)*\b|"
    r"\b[A-Z_]{3,}\b|`[^`]+`|#\d+)"
)

# The hundred or so commonest Chinese surnames, minus characters that are far more often
# part of another word before a title (和, 时, 明, 全, 成, 文, ...).
_SURNAMES = (
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何林罗高郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘蒋蔡余杜叶程"
    "苏魏吕丁任沈姚卢姜崔钟谭陆汪范金石廖贾夏韦付傅方邹孟熊秦邱江尹薛闫段雷侯龙史陶黎贺顾毛"
    "郝龚邵万钱严覃武戴莫孔汤"
)
# Surnames that also follow 小/老 inside common words (小程序, 老方法, 小于) are left out there.
_FAMILIAR_SURNAMES = "".join(c for c in _SURNAMES if c not in "高程于方金石田江万龙史毛黎武莫付任")
# Titles after a surname; a one-character title must not start a longer word (周工作, 高总结).
_TITLES = (
    r"(?:工程师|董事长|总经理|总监|总工|总裁|经理|老师|主任|主管|组长|科长|处长|部长|局长|院长|"
    r"校长|队长|老板|博士|教授|医生|律师|先生|女士|小姐|师傅|同学|"
    r"工(?![作程具资厂人业期时艺单位种序号会商地])|总(?![结共是体部线数计额裁之的算])|哥|姐|董(?!事))"
)
# Surnames that end a word of time, quantity or party after these (下周, 每周, 对方, 双方,
# 几万, 资金) are read as that word: 下周工作 is "next week's work", not 周工.
_WORD_ENDING_SURNAMES = "周方万金"
_NOT_BEFORE_NAME = "每下上本这那对各双多一两几第前后今明去资现"
_PERSON = (
    rf"(?<![{_NOT_BEFORE_NAME}])[{_WORD_ENDING_SURNAMES}]{_TITLES}"
    rf"|[{''.join(c for c in _SURNAMES if c not in _WORD_ENDING_SURNAMES)}]{_TITLES}"
    rf"|[小老][{_FAMILIAR_SURNAMES}](?![{_FAMILIAR_SURNAMES}])"
)
# People named with a title or a familiar prefix (张工, 王经理, 李总, 老王, 小李): Chinese
# has no capitals to tell a name. The query rewrite finds them with the same rule.
PERSON_RE = re.compile(_PERSON)

# What names a module or a system; its name is the two Han characters before it (支付模块,
# 认证服务), or 第三方 and at most two more (第三方网关, 第三方支付网关).
_SYSTEM_WORDS = (
    "子系统 微服务 模块 服务 系统 网关 平台 接口 组件 数据库 中心 引擎 后台 客户端 服务端 集群 "
    "队列 缓存 页面 框架 脚本"
)
_SYSTEM = "(?:" + "|".join(sorted(_SYSTEM_WORDS.split(), key=len, reverse=True)) + ")"
_MODULE = rf"(?:第三方(?:[{HAN}]{{2}})?|(?P<prefix>[{HAN}]{{2}})){_SYSTEM}"
# Two characters that point at a system rather than name it (这个模块, 所有服务, 新的系统).
_NOT_A_NAME_START = frozenset("这那哪该此每各某其本整全所")
_NOT_A_NAME = CJK_STOPWORDS | words(
    "相关 对应 上述 下游 上游 现有 原有 目前 整个 所有 全部 部分 其他 新的 旧的 多个 各个"
)
_NOT_IN_A_NAME = HAN_SEPARATOR_CHARS | frozenset("个")

_UNITS = (
    "% ％ 个月 个小时 个星期 小时 分钟 毫秒 秒 天 周 星期 年 月 日 号 万 亿 千 倍 元 块 人 个 "
    "次 条 行 项 台 页 版 位 张 份 篇 件 批 轮"
)
_UNIT = "(?:" + "|".join(sorted(_UNITS.split(), key=len, reverse=True)) + ")"
# A number glued to a letter, a dash or a path (p95, PAY-3, pay-3) is part of that identifier.
_NUMBER_WITH_UNIT = rf"(?<![A-Za-z0-9_.\-/#])\d+(?:[.,]\d+)?\s?{_UNIT}"
_ZH_DATE = (
    r"(?<!\d)(?:\d{4}\s*年\s*)?\d{1,2}\s*月\s*\d{1,2}\s*[日号]"
    r"|(?<!\d)\d{4}\s*年(?:\s*\d{1,2}\s*月)?"
)

_ZH_IDENTIFIER_RE = re.compile(
    rf"(?P<date>{_ZH_DATE})|(?P<number>{_NUMBER_WITH_UNIT})|(?P<person>{_PERSON})|{_MODULE}"
)


def _zh_identifiers(text: str) -> list[re.Match[str]]:
    """The Chinese-shaped identifiers of ``text``, in order."""
    found = []
    for match in _ZH_IDENTIFIER_RE.finditer(text):
        prefix = match["prefix"]
        if prefix is not None and (
            prefix[0] in _NOT_A_NAME_START
            or prefix in _NOT_A_NAME
            or any(ch in _NOT_IN_A_NAME for ch in prefix)
        ):
            continue
        found.append(match)
    return found


_HAN_RUN_RE = re.compile(f"[{HAN}]+")


def _masked(text: str, matches: Iterable[re.Match[str]]) -> str:
    """``text`` with ``matches`` blanked out, keeping every other character's position."""
    chars = list(text)
    for match in matches:
        chars[match.start() : match.end()] = " " * (match.end() - match.start())
    return "".join(chars)


def count_identifiers(content: str) -> int:
    if not has_han(content):
        return len(_IDENTIFIER_RE.findall(content))
    zh = _zh_identifiers(content)
    rest = _HAN_RUN_RE.sub(lambda run: " " * len(run.group()), _masked(content, zh))
    return len(zh) + len(_IDENTIFIER_RE.findall(rest))


# Names (a capitalised word after a lower-case one), configuration keys (snake_case,
# dotted.keys, KEY=value, --flags) and CamelCase, on top of write_filter's paths and numbers.
_NAME_OR_KEY_RE = re.compile(
    r"(?<=[a-z,;:] )[A-Z][a-z]+\b|\b[a-z]+_[a-z0-9_]+\b|\b[a-z]+(?:\.[a-z_]+){2,}\b|"
    r"\b\w+=\S+|(?<!\w)--[a-z][\w-]+|\b[a-z]+[A-Z]\w*\b|\b[A-Z][a-z]+[A-Z]\w*\b"
)


def holds_identifiers(text: str) -> bool:
    """Paths, names, numbers or configuration keys: the things a summary must not lose."""
    return count_identifiers(text) > 0 or _NAME_OR_KEY_RE.search(text) is not None


_IDENTIFIER_SHAPES = re.compile(
    r"^(?:\d[\d.,:/-]*\w*|[\w.-]*[/\\][\w./\\-]+|[A-Za-z]+-\d+|#\d+|\w+_\w+|[A-Za-z]+\d\w*|"
    r"[a-z]+[A-Z]\w*|[A-Z]{2,}\w*|\w+\.\w{1,5}|v\d[\w.]*|`[^`]+`)$"
)
WORD_SPAN_RE = re.compile(r"`[^`]+`|\S+")
EDGE_PUNCT = "\"'“”‘’()[]{}<>,.;:!?…*"

# Inside a span holding Han characters, the pieces between Han characters and Chinese
# punctuation are read as English words (``用Redis存`` → ``Redis``).
_CJK_PUNCT = "，。！？；：、（）《》〈〉「」『』【】“”‘’…—～·"
_LATIN_PIECE_RE = re.compile(rf"[^\s{HAN}{_CJK_PUNCT}]+")
_SENTENCE_ENDS = (".", "!", "?", "。", "！", "？")


def is_capitalised_name(word: str) -> bool:
    return len(word) > 1 and word[0].isupper() and not word.isupper() and word.isalpha()


def _is_name(word: str) -> bool:
    return (
        is_capitalised_name(word)
        and fold(word) not in STOPWORDS
        and word not in {"I", "I'm", "I've", "I'd", "I'll"}
    )


def find_identifiers(text: str, exclude: Iterable[str] = (), *, names: bool = True) -> list[str]:
    """Numbers, paths, ids, code names, and capitalised names not at a sentence start; in a
    text holding Han characters, the Chinese shapes of the module docstring too.

    ``names=False`` for logs and code, where capitals ("File", "Traceback") are not names.
    """
    skip = {fold(e) for e in exclude}
    if not has_han(text):
        return _find_english(text, skip, names=names)
    found: list[tuple[int, str]] = []
    zh = _zh_identifiers(text)
    for match in zh:
        if match["person"] is None or names:
            found.append((match.start(), match.group()))
    sentence_start = True
    for span in WORD_SPAN_RE.finditer(_masked(text, zh)):
        raw = span.group()
        # Chinese punctuation separates words as spaces do (``#400，李工``); a Latin word
        # right after a Han character is never capitalised for a sentence start.
        start = sentence_start and not has_han(raw[:1])
        for piece in _LATIN_PIECE_RE.finditer(raw):
            found += [
                (span.start() + piece.start(), word)
                for word in _english_identifiers(piece.group(), start, names=names)
            ]
            start = False
        sentence_start = raw.rstrip("\"')”’").endswith(_SENTENCE_ENDS)
    kept: list[str] = []
    seen: set[str] = set()
    for _, word in sorted(found, key=lambda item: item[0]):
        key = fold(word)
        if key not in skip and key not in seen:
            seen.add(key)
            kept.append(word)
    return kept


def _english_identifiers(raw: str, sentence_start: bool, *, names: bool) -> list[str]:
    """The identifier a whitespace-free span is, if it is one (at most one)."""
    word = raw.strip(EDGE_PUNCT) if not raw.startswith("`") else raw
    word = re.sub(r"['’]s$", "", word)
    if not word:
        return []
    is_id = bool(_IDENTIFIER_SHAPES.match(word)) and any(c.isalnum() for c in word)
    is_name = names and not sentence_start and _is_name(word)
    return [word] if is_id or is_name else []


def _find_english(text: str, skip: set[str], *, names: bool) -> list[str]:
    found: list[str] = []
    seen: set[str] = set()
    sentence_start = True
    for raw in WORD_SPAN_RE.findall(text):
        ends_sentence = raw.rstrip("\"')”’").endswith((".", "!", "?"))
        for word in _english_identifiers(raw, sentence_start, names=names):
            if fold(word) not in skip and fold(word) not in seen:
                seen.add(fold(word))
                found.append(word)
        sentence_start = ends_sentence
    return found
