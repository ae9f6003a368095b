"""The things a text talks about, in both languages: the names of people, ids and paths,
and the noun phrases that name a part of a project ("the auth module", "billing service",
支付模块联调, 账单迁移). Links share them, causal cues point at them, and a question starts
from them.

English noun phrases are a head noun (module, service, release ...) with the word before it;
Chinese ones a head (联调, 迁移, 审计 ...) with the module right before it (支付模块的联调 →
支付模块联调) or else the two Han characters before it. People, modules and ids are the
identifiers of :mod:`pipelines.text.identifiers`; numbers and dates are no entities.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pipelines.text.dates import find_dates
from pipelines.text.identifiers import find_identifiers
from pipelines.text.sentences import split_speaker
from pipelines.text.words import (
    CJK_STOPWORDS,
    HAN,
    PARTICLES,
    STOPWORDS,
    fold,
    has_han,
    normalise_token,
    words,
)

# Heads of the noun phrases that name things in a software project: "the auth module",
# "billing service", "frontend release" ("release 2.3" is caught by the identifier rules).
_HEADS = words(
    """module service api endpoint component library package database db table queue worker
    job pipeline feature page screen server client cluster bucket repo repository branch
    ticket suite migration schema index team release sprint milestone deadline project
    integration dashboard flow cache store backend frontend app model spec launch rollout
    provider"""
)
_WEAK_MODIFIERS = words(
    """new old current next last first second same other this that whole entire main big
    small our your their my his her its the a an some any each every"""
)
_WORDS_RE = re.compile(r"[A-Za-z][\w-]*|[^\sA-Za-z]+")


def _head_phrases(text: str) -> set[str]:
    """'modifier head' for each head noun that ends a phrase ("the auth module")."""
    words = [fold(w) for w in _WORDS_RE.findall(text)]
    found: set[str] = set()
    for i, word in enumerate(words):
        head = word[:-1] if word.endswith("s") and word[:-1] in _HEADS else word
        if head not in _HEADS:
            continue
        following = words[i + 1] if i + 1 < len(words) else ""
        if following in _HEADS or following.rstrip("s") in _HEADS:
            continue  # "frontend release": the phrase ends at the next head
        for j in (i - 1, i - 2):
            if j < 0 or not words[j][0].isalpha():
                break
            if words[j] in STOPWORDS or words[j] in _WEAK_MODIFIERS:
                continue
            found.add(f"{normalise_token(words[j])} {normalise_token(head)}")
            break
    return found


# Heads of Chinese noun phrases that name a piece of work rather than a system (systems and
# modules are identifiers already): 支付模块联调, 账单迁移, 安全审计, 集成测试.
_HEADS_ZH = words("联调 迁移 审计 测试 需求 版本 里程碑 工单 分支 项目 流程 方案 文档 功能 上线")
_HEAD_ZH_RE = re.compile("|".join(sorted(_HEADS_ZH, key=len, reverse=True)))
# Two characters before a head that are no modifier of it: function words, and words that
# point at a thing rather than name it (这个, 每次, 一起).
_NOT_A_MODIFIER_START = frozenset("这那哪该此每各某其本整全所一了的")
_NOT_A_MODIFIER = CJK_STOPWORDS | words(
    "一起 已经 正在 进行 开始 继续 需要 相关 对应 目前 所有 新的"
)


def _han_phrases(text: str, identifiers: Sequence[str]) -> set[str]:
    """'modifier head' of each Chinese head: the module right before it (支付模块的联调 →
    支付模块联调), else the two Han characters before it (账单迁移)."""
    found: set[str] = set()
    modules = sorted({i for i in identifiers if has_han(i)}, key=len, reverse=True)
    for match in _HEAD_ZH_RE.finditer(text):
        before = text[: match.start()].rstrip()
        before = before[:-1] if before.endswith("的") else before
        module = next((m for m in modules if before.endswith(m)), None)
        if module is not None:
            found.add(module + match.group())
            continue
        modifier = before[-2:]
        if (
            len(modifier) == 2
            and _HAN_CHAR_RE.fullmatch(modifier)
            and modifier[0] not in _NOT_A_MODIFIER_START
            and modifier not in _NOT_A_MODIFIER
            and not any(ch in PARTICLES for ch in modifier)
        ):
            found.add(modifier + match.group())
    return found


_HAN_CHAR_RE = re.compile(f"[{HAN}]+")


def extract_entities(text: str) -> frozenset[str]:
    """Normalised names of the things a text talks about (not numbers or dates)."""
    _, body = split_speaker(text)
    found: set[str] = set()
    date_words = {fold(body[s:e]) for s, e, _ in find_dates(body)}
    identifiers = find_identifiers(body)
    for identifier in identifiers:
        key = fold(identifier).strip("`")
        if key.replace(".", "").replace(",", "").isdigit() or key in date_words:
            continue
        if has_han(key) and any(ch.isdigit() for ch in key):
            continue  # a Chinese number with its unit (30 天) or a date (1 月 15 日)
        if len(key) > 1:
            found.add(key)
    found |= _head_phrases(body)
    if has_han(body):
        found |= _han_phrases(body, identifiers)
    return frozenset(found)
