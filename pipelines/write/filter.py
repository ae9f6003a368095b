"""Tier 1 of the write decision: bare acknowledgements are dropped by rule.

It runs on the synchronous path and must stay pure and fast (microseconds). Exact repeats are
caught by the database's unique index on the content hash, which is both cheaper and
race-free. Tiers 2 and 3 run in the write workers (``pipelines.write.decide``).
"""

from __future__ import annotations

import unicodedata

from pydantic import BaseModel, ConfigDict

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


class Tier1Result(BaseModel):
    model_config = ConfigDict(frozen=True)

    keep: bool
    reason: str


def normalise_for_ack(text: str) -> str:
    """Lower-case, NFKC, punctuation and symbols dropped, spaces collapsed."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    kept = [
        ch if not unicodedata.category(ch).startswith(("P", "S", "C")) else " " for ch in folded
    ]
    return " ".join("".join(kept).split())


def tier1_filter(content: str) -> Tier1Result:
    """Drop a bare acknowledgement; keep everything else for tier 2."""
    if len(content) > 40:  # no acknowledgement is this long; skip the normalisation
        return Tier1Result(keep=True, reason="passed tier-1 rules")
    norm = normalise_for_ack(content)
    if not norm:
        return Tier1Result(keep=False, reason="no words: punctuation or symbols only")
    if norm in ACKNOWLEDGEMENTS:
        return Tier1Result(keep=False, reason=f"bare acknowledgement {norm!r}")
    return Tier1Result(keep=True, reason="passed tier-1 rules")
