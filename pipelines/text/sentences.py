"""Sentences of a text, and the speaker of a line ("Alice: ...")."""

from __future__ import annotations

import re

_SENTENCE_RE = re.compile(r"(?<=[.!?。！？])\s+|\n+")


def split_sentences(text: str) -> list[str]:
    return [part.strip() for part in _SENTENCE_RE.split(text) if part and part.strip()]


_SPEAKER_RE = re.compile(
    r"^\s*([A-Z][\w.'’-]{0,24}(?:\s[A-Z][\w.'’-]{0,24}){0,3}|user|assistant|agent|system|"
    r"human|ai)\s*:\s+(?=\S)"
)


def split_speaker(content: str) -> tuple[str | None, str]:
    match = _SPEAKER_RE.match(content)
    if match and len(match.group(1).split()) <= 4:
        return match.group(1).strip(), content[match.end() :]
    return None, content
