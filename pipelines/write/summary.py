"""Extractive summaries: the offline adapter's summariser and the write path's default.

Sentences are scored by the cues the design cares about (decisions and their reasons,
preferences, state changes) and by identifiers (paths, names, numbers), then kept in their
original order until the word budget is spent. Nothing is paraphrased, so nothing is invented.

Words are counted the same way in both languages (``word_count``: a run of Han characters is
its characters / 1.5), and never fewer than the text's whitespace-separated pieces, so a budget
bounds both measures.
"""

from __future__ import annotations

from pipelines.text.cues import guess_type
from pipelines.text.identifiers import count_identifiers
from pipelines.text.sentences import split_sentences
from pipelines.text.words import has_han, word_count

# Short memories are their own summary: compressing 40 words saves nothing worth a call.
SUMMARY_MIN_WORDS = 40

# Chinese sentence marks: a sentence ending in one is followed by the next without a space.
_CJK_ENDS = ("。", "！", "？", "；", "”", "’", "」", "』", "）")


def needs_summary(content: str) -> bool:
    return word_count(content) > SUMMARY_MIN_WORDS


def _size(text: str) -> int:
    return max(word_count(text), len(text.split()))


def _han_prefix(word: str, max_words: int) -> str:
    """The longest start of ``word`` (one whitespace-free piece holding Han characters) that
    counts at most ``max_words`` words. A longer start never counts fewer words, so the
    length is found by bisection."""
    low, high = 0, len(word)
    while low < high:
        middle = (low + high + 1) // 2
        if word_count(word[:middle]) <= max_words:
            low = middle
        else:
            high = middle - 1
    return word[:low]


def _cut(sentence: str, max_words: int) -> str:
    """The start of ``sentence`` within ``max_words``, cut at a word (a Han character)."""
    kept: list[str] = []
    budget = max_words
    for word in sentence.split():
        size = _size(word)
        if size <= budget:
            kept.append(word)
            budget -= size
            continue
        if has_han(word) and budget > 0:
            kept.append(_han_prefix(word, budget))
        break
    return " ".join(part for part in kept if part)


def _join(sentences: list[str]) -> str:
    text = ""
    for sentence in sentences:
        glue = "" if not text or (text.endswith(_CJK_ENDS) and has_han(sentence)) else " "
        text += glue + sentence
    return text


def extractive_summary(content: str, max_words: int = 60) -> str:
    if max_words < 1:
        raise ValueError("max_words must be at least 1")
    if _size(content) <= max_words:
        return " ".join(content.split())
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
        size = _size(sentence)
        if size <= budget:
            chosen.append((index, sentence))
            budget -= size
        if budget <= 0:
            break
    if not chosen:  # the best sentence alone is over budget: cut it at a word boundary
        return _cut(sentences[0], max_words) + " …"
    return _join([sentence for _, sentence in sorted(chosen)])
