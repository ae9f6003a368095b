"""Extractive summaries: the offline adapter's summariser and the write path's default.

Sentences are scored by the cues the design cares about (decisions and their reasons,
preferences, state changes) and by identifiers (paths, names, numbers), then kept in their
original order until the word budget is spent. Nothing is paraphrased, so nothing is invented.
"""

from __future__ import annotations

from pipelines.text.cues import guess_type
from pipelines.text.identifiers import count_identifiers
from pipelines.text.sentences import split_sentences

# Short memories are their own summary: compressing 40 words saves nothing worth a call.
SUMMARY_MIN_WORDS = 40


def needs_summary(content: str) -> bool:
    return len(content.split()) > SUMMARY_MIN_WORDS


def extractive_summary(content: str, max_words: int = 60) -> str:
    if max_words < 1:
        raise ValueError("max_words must be at least 1")
    words = content.split()
    if len(words) <= max_words:
        return " ".join(words)
    sentences = split_sentences(content)
    scored: list[tuple[float, int, str]] = []
    for index, sentence in enumerate(sentences):
        _, cues = guess_type(sentence)
        score = 2.0 * cues + 1.0 * min(count_identifiers(sentence), 4)
        score += 0.5 if index == 0 else 0.0  # the opening usually states the topic
        scored.append((score, index, sentence))
    chosen: list[tuple[int, str]] = []
    budget = max_words
    for _, index, sentence in sorted(scored, key=lambda item: (-item[0], item[1])):
        size = len(sentence.split())
        if size <= budget:
            chosen.append((index, sentence))
            budget -= size
        if budget <= 0:
            break
    if not chosen:  # the best sentence alone is over budget: cut it at a word boundary
        return " ".join(sentences[0].split()[:max_words]) + " …"
    return " ".join(sentence for _, sentence in sorted(chosen))
