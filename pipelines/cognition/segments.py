"""Memories cut into the segments the compression protocol annotates: code and log blocks
whole, otherwise lines and sentences (and, in a summary, the parts its layout joined), each
with its speaker and, in a two-party conversation, its addressee.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pipelines.cognition.protocol import SEGMENT_GLUE, Segment, SourceMemory
from pipelines.records import Level
from pipelines.text.sentences import split_sentences, split_speaker

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
            speaker, body = split_speaker(line)
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
