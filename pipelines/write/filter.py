"""Tier 1 of the write decision: bare acknowledgements are dropped by rule.

It runs on the synchronous path and must stay pure and fast (microseconds). Exact repeats are
caught by the database's unique index on the content hash, which is both cheaper and
race-free. Tiers 2 and 3 run in the write workers (``pipelines.write.decide``).

English acknowledgements are whole phrases ("ok thanks"). Chinese ones run together with or
without a comma ("收到，谢谢", "好的谢谢", "OK的"), so a message holding a Han character is an
acknowledgement when it is made only of acknowledgement pieces, in any order and number.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

from pipelines.text.words import has_han, words

# Whole messages that carry no information. Matched after normalisation (case, width,
# punctuation and emoji stripped), so "OK!!", "ｏｋ" and "好的。" all match.
ACKNOWLEDGEMENTS: frozenset[str] = frozenset(
    {
        # English
        "ok",
        "okay",
        "okey",
        "k",
        "kk",
        "yes",
        "yep",
        "yeah",
        "yup",
        "no",
        "nope",
        "sure",
        "thanks",
        "thank you",
        "thx",
        "ty",
        "thanks a lot",
        "thank you very much",
        "cool",
        "great",
        "nice",
        "good",
        "fine",
        "got it",
        "gotcha",
        "understood",
        "roger",
        "ack",
        "noted",
        "sounds good",
        "lgtm",
        "right",
        "alright",
        "all right",
        "continue",
        "go on",
        "go ahead",
        "next",
        "done",
        "hmm",
        "hm",
        "uh huh",
        "mhm",
        "i see",
        "makes sense",
        "perfect",
        "awesome",
        "will do",
        "np",
        "no problem",
        "yes please",
        "ok thanks",
        "okay thanks",
        "ok thank you",
        "great thanks",
        "cheers",
        # Chinese
        "好",
        "好的",
        "好滴",
        "好吧",
        "行",
        "可以",
        "嗯",
        "嗯嗯",
        "哦",
        "噢",
        "收到",
        "明白",
        "明白了",
        "知道了",
        "了解",
        "继续",
        "谢谢",
        "多谢",
        "感谢",
        "没问题",
        "对",
        "是的",
        "好的谢谢",
        "ok谢谢",
    }
)


def normalise_for_ack(text: str) -> str:
    """Lower-case, NFKC, punctuation and symbols dropped, spaces collapsed."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    kept = [
        ch if not unicodedata.category(ch).startswith(("P", "S", "C")) else " " for ch in folded
    ]
    return " ".join("".join(kept).split())


# The pieces a Chinese acknowledgement is made of: received, understood, ok, yes, thanks,
# "you worked hard" (辛苦了, said to close an exchange), and the sentence-final particles
# that soften them (好的呢, 收到啦). None of them states a fact on its own.
CJK_ACK_PIECES: frozenset[str] = words(
    """好 好的 好滴 好吧 好嘞 好哒 好呀 好啊 好了 好哦 行 行吧 行的 可以 可以的 嗯 恩 嗯呢 哦 噢 喔
    哈 哈哈 嘿嘿 收到 收到了 明白 明白了 知道 知道了 了解 了解了 懂了 清楚了 继续 谢谢 多谢
    感谢 谢啦 谢了 谢谢你 谢谢您 谢谢大家 感谢大家 非常感谢 十分感谢 辛苦 辛苦了 辛苦啦
    辛苦大家 辛苦各位 没问题 没事 不客气 对 对的 是 是的 妥 妥了 赞 棒 太好了 很好 不错
    ok的 ok啦 呢 啦 呀 哟 嘛"""
)
# Inside a Chinese message an English acknowledgement is a piece too ("收到，thanks").
ACK_PIECES: frozenset[str] = CJK_ACK_PIECES | ACKNOWLEDGEMENTS


def compact_pieces(pieces: Iterable[str]) -> frozenset[str]:
    """Pieces as :func:`made_of` matches them: without their spaces ("thank you" → thankyou)."""
    return frozenset(piece.replace(" ", "") for piece in pieces)


def made_of(norm: str, pieces: frozenset[str]) -> bool:
    """Whether a normalised text holding a Han character is only ``pieces`` (compacted), in
    any order and number; an English text never is (English phrases are matched whole).

    A word break by dynamic programming, linear in the text: a regex of alternatives under
    ``+`` backtracks exponentially on a text like 哈哈哈…哈x (seconds at 30 characters).
    """
    if not has_han(norm):
        return False
    text = norm.replace(" ", "")
    longest = max(map(len, pieces))
    ends = [True] + [False] * len(text)  # ends[i]: text[:i] is made of pieces
    for start in range(len(text)):
        if ends[start]:  # only a reached position can start a piece
            for end in range(start + 1, min(len(text), start + longest) + 1):
                ends[end] = ends[end] or text[start:end] in pieces
    return ends[-1]


_ACK_PIECES = compact_pieces(ACK_PIECES)


def is_acknowledgement(norm: str) -> bool:
    """A whole message, normalised by :func:`normalise_for_ack`, that only acknowledges."""
    return norm in ACKNOWLEDGEMENTS or made_of(norm, _ACK_PIECES)


class Tier1Result(BaseModel):
    model_config = ConfigDict(frozen=True)

    keep: bool
    reason: str


def tier1_filter(content: str) -> Tier1Result:
    """Drop a bare acknowledgement; keep everything else for tier 2."""
    if len(content) > 40:  # no acknowledgement is this long; skip the normalisation
        return Tier1Result(keep=True, reason="passed tier-1 rules")
    norm = normalise_for_ack(content)
    if not norm:
        return Tier1Result(keep=False, reason="no words: punctuation or symbols only")
    if is_acknowledgement(norm):
        return Tier1Result(keep=False, reason=f"bare acknowledgement {norm!r}")
    return Tier1Result(keep=True, reason="passed tier-1 rules")
