"""Cue words of the memory types: which type a text's words suggest (a decision, a
preference, a status change, ...). The offline write rules, the extractive summary and the
reranker's kind match read them.
"""

from __future__ import annotations

import re

from pipelines.records import MemoryType

_TYPE_CUES: tuple[tuple[MemoryType, re.Pattern[str]], ...] = (
    (
        MemoryType.DECISION,
        re.compile(
            r"\b(decid\w*|we(?:'ll| will) (?:use|go with)|chose|choos\w+|agreed|settled on|"
            r"going with|opt(?:ed)? for|switch(?:ed)? to|instead of|because|rationale|"
            r"trade-?off|constraint|must(?: not)?|may not|required to|deadline)\b|"
            r"决定|选择|采用|必须",
            re.I,
        ),
    ),
    (
        MemoryType.PREFERENCE,
        re.compile(
            r"\b(prefer\w*|i like|i don't like|i dislike|always|never|please (?:always|"
            r"don't|do not)|i want|i'd rather|rather than|my style)\b|喜欢|偏好|不要|希望",
            re.I,
        ),
    ),
    (
        MemoryType.STATUS_CHANGE,
        re.compile(
            r"\b(status|blocked|unblocked|is now|moved to|done|completed|finished|shipped|"
            r"merged|deployed|released|in progress|started|delayed|slipp\w+|on hold|"
            r"closed|reopened)\b|完成|阻塞|延期|上线",
            re.I,
        ),
    ),
    (
        MemoryType.FEEDBACK,
        re.compile(
            r"\b(wrong|incorrect|that's not|not what i|good job|well done|mistake|fix this|"
            r"too (?:long|short|verbose)|should have|don't do that)\b|错了|不对",
            re.I,
        ),
    ),
    (
        MemoryType.ACTION,
        re.compile(
            r"\b(ran|run|running|created|deleted|wrote|updated|installed|executed|called|"
            r"opened|committed|pushed|refactor\w*|implemented|added|removed|renamed)\b",
            re.I,
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
