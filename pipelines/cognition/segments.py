"""Memories cut into the segments the compression protocol annotates: code and log blocks
whole, otherwise lines and sentences (and, in a summary, the parts its layout joined), each
with its speaker and, in a two-party conversation, its addressee.

Chinese turns are cut by the same rules (:mod:`pipelines.text.sentences` reads ``王经理：``
and ``。！？``), with two more: a line label before a colon (``状态：``, ``决策记录：``,
``Status：``) is what the line is, not who said it; and a clause ends at ``，；：`` with no
space after it (:func:`split_clauses_han`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pipelines.cognition.protocol import SEGMENT_GLUE, Segment, SourceMemory
from pipelines.records import Level
from pipelines.text.sentences import split_sentences, split_speaker
from pipelines.text.words import HAN, has_han, words

# Words that open a Chinese line as a label, not a speaker: what the line is ("状态：已完成"),
# in the words project notes use for it. A speaker is a person or a role (王经理, 助手, 用户).
LINE_LABELS_ZH: frozenset[str] = words(
    """状态 状态变更 决策 决策记录 决定 决议 用户偏好 偏好 错误 报错 异常 故障 根因 原因
    教训 经验 结论 备注 注意 问题 进展 进度 风险 计划 总结 更新 说明 背景 目标 结果 下一步
    待办 提醒 建议 日志 输出 命令 步骤 补充 记录 需求 方案 现象 影响 事项 议题 约定 规范
    时间 地点 版本 链接 附件 原文 摘要 要点"""
)
# The same labels in English, before the full-width colon of mixed text ("Status：done").
LINE_LABELS_EN: frozenset[str] = words(
    """status decision decisions note notes error errors lesson update updates preference
    preferences result results reason reasons todo action actions summary outcome plan
    risk risks context background goal next fix cause impact ids"""
)


def split_turn(line: str) -> tuple[str | None, str]:
    """(speaker, body) of a line as :func:`split_speaker` reads it, except that in a line
    with Chinese a label (``状态：…``, ``Status：…``) is no speaker."""
    speaker, body = split_speaker(line)
    if speaker is None or not has_han(line):
        return speaker, body
    if speaker in LINE_LABELS_ZH or speaker.casefold() in LINE_LABELS_EN:
        return None, line
    return speaker, body


# Clause marks: full-width ones anywhere, ASCII ones before a space or a Han character, so
# "02:00", "Node.js" and "a,b" stay whole.
_HAN_CLAUSE_RE = re.compile(rf"\s*(?:[，；：]|[,;:](?=\s|[{HAN}]))\s*")


def split_clauses_han(sentence: str) -> list[str]:
    """The clauses of a sentence with Chinese in it, cut at ``，；：`` (and ``, ; :``)."""
    return [part for part in _HAN_CLAUSE_RE.split(sentence) if part.strip()]


def is_question(text: str) -> bool:
    return text.rstrip().endswith(("?", "？"))


_FENCE_RE = re.compile(r"```.*?(?:```|$)", re.S)
_LOG_LINE_RE = re.compile(
    r"^\s*(?:\[?\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}|\[?(?:DEBUG|TRACE|INFO|WARN(?:ING)?|ERROR|"
    r"FATAL|CRITICAL)\]?[\s:]|Traceback \(most recent call last\)|File \".*\", line \d+|"
    r"at [\w.$<>]+\(.*\)|\$ \S|>>> |[\w.]+(?:Error|Exception):|E\s{2,}|\d+ (?:passed|failed)"
    r"|=+ .* =+$|debug(?: output)?:)",
    re.I,
)


def looks_like_debug(text: str) -> bool:
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return False
    logish = sum(1 for line in lines if _LOG_LINE_RE.match(line))
    return logish >= max(1, (len(lines) + 1) // 2)


def segment_sources(sources: Sequence[SourceMemory]) -> tuple[Segment, ...]:
    """Cut memories into segments: code/log blocks whole, otherwise lines and sentences.

    The addressee of a line is the other party when the rows have exactly two speakers.
    """
    speakers: list[str] = []
    split: list[tuple[SourceMemory, str | None, str]] = []
    for source in sources:
        for line in source.content.splitlines() or [source.content]:
            if not line.strip():
                continue
            speaker, body = split_turn(line)
            if speaker and speaker not in speakers:
                speakers.append(speaker)
            split.append((source, speaker, body))
    # Join lines back per (memory, speaker) run so multi-line logs stay together.
    runs: list[tuple[SourceMemory, str | None, list[str]]] = []
    for source, speaker, body in split:
        if runs and runs[-1][0].id == source.id and (speaker is None or speaker == runs[-1][1]):
            runs[-1][2].append(body)
        else:
            runs.append((source, speaker, [body]))
    segments: list[Segment] = []
    for source, speaker, bodies in runs:
        addressee = None
        if speaker and len(speakers) == 2:
            addressee = speakers[1] if speaker == speakers[0] else speakers[0]
        for piece in _pieces("\n".join(bodies), summary=source.level > Level.L0):
            segments.append(
                Segment(
                    index=len(segments),
                    memory_id=source.id,
                    speaker=speaker,
                    addressee=addressee,
                    timestamp=source.timestamp,
                    text=piece,
                )
            )
    return tuple(segments)


def _pieces(text: str, *, summary: bool = False) -> list[str]:
    pieces: list[str] = []
    cursor = 0
    for fence in _FENCE_RE.finditer(text):
        pieces.extend(_prose_pieces(text[cursor : fence.start()], summary=summary))
        pieces.append(fence.group(0).strip())
        cursor = fence.end()
    pieces.extend(_prose_pieces(text[cursor:], summary=summary))
    return [p for p in pieces if p.strip()]


def _prose_pieces(text: str, *, summary: bool) -> list[str]:
    """Sentences; in a summary also the parts the offline layout joined with " | "."""
    if not text.strip():
        return []
    if looks_like_debug(text):
        return [text.strip()]
    pieces: list[str] = []
    for sentence in split_sentences(text):
        if summary:
            pieces.extend(part.strip() for part in sentence.split(SEGMENT_GLUE) if part.strip())
        else:
            pieces.append(sentence.strip())
    return pieces
