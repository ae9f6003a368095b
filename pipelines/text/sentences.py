"""Sentences of a text, and the speaker of a line ("Alice: ...", "张工：...")."""

from __future__ import annotations

import re

from pipelines.text.words import HAN

# Closing quotes and brackets that may follow a sentence's final mark (他说：“好。”然后).
_CLOSERS = "”’」』）)》"
# English marks end a sentence only before whitespace ("v1.2", "e.g." stay whole); Chinese
# text puts no space after 。！？；, and a Latin mark right after a Han character ends a
# sentence the same way. A run of marks or a closing quote stays with its sentence.
_ENDS = "。！？；"
_SENTENCE_RE = re.compile(
    rf"(?<=[.!?。！？])\s+"
    rf"|(?:(?<=[{_ENDS}])|(?<=[{_ENDS}][{_CLOSERS}])|(?<=[{HAN}][.!?])|(?<=[{HAN}][.!?][{_CLOSERS}]))"
    rf"(?![{_ENDS}.!?{_CLOSERS}])\s*"
    rf"|\n+"
)


def split_sentences(text: str) -> list[str]:
    return [part.strip() for part in _SENTENCE_RE.split(text) if part and part.strip()]


# A Chinese speaker is a name or a role of two to six Han characters (张工, 产品经理), before
# a full-width or an ASCII colon; the English form also takes a full-width colon.
_SPEAKER_RE = re.compile(
    r"^\s*(?:([A-Z][\w.'’-]{0,24}(?:\s[A-Z][\w.'’-]{0,24}){0,3}|user|assistant|agent|system|"
    r"human|ai)\s*(?::\s+|：\s*)|"
    rf"([{HAN}]{{2,6}})\s*[:：]\s*)(?=\S)"
)


def split_speaker(content: str) -> tuple[str | None, str]:
    match = _SPEAKER_RE.match(content)
    if match is None:
        return None, content
    speaker = match.group(1) or match.group(2)
    if len(speaker.split()) <= 4:
        return speaker.strip(), content[match.end() :]
    return None, content
