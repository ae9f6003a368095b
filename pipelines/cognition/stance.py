"""Stance, topic and conditions of a knowledge statement: what consolidation compares to
tell a merge from a contradiction. Two statements contradict when they share a topic but take
opposite stances (antonyms such as brief/detailed, or a negation); a condition ("for
architecture questions", "when reviewing") makes the contrary one conditional knowledge.
"""

from __future__ import annotations

import re

from pipelines.text.words import NEGATIONS, STOPWORDS, normalise_token, raw_tokens, words

# Opposite ends of the axes knowledge most often disagrees on. Side 0 and side 1.
_AXES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "length": (
        words("brief short concise terse succinct minimal compact shorter"),
        words(
            "detailed long verbose thorough extensive elaborate comprehensive in-depth "
            "longer lengthy"
        ),
    ),
    "formality": (frozenset({"formal"}), frozenset({"casual", "informal"})),
    "indentation": (frozenset({"tabs", "tab"}), frozenset({"spaces", "space"})),
    "amount": (frozenset({"more"}), frozenset({"less", "fewer"})),
    "pace": (frozenset({"fast", "quick", "quickly"}), frozenset({"slow", "slowly", "careful"})),
    "timing": (frozenset({"sync", "synchronous"}), frozenset({"async", "asynchronous"})),
}
# Verbs of liking set the polarity of a statement rather than an axis of their own: "I hate
# long answers" and "I prefer brief answers" agree.
_LIKING = frozenset({"like", "love", "enjoy", "prefer", "prefers", "want", "use"})
_DISLIKING = frozenset({"dislike", "hate", "hates", "avoid", "stop"})
_STANCE_WORDS = frozenset().union(*(a | b for a, b in _AXES.values())) | _LIKING | _DISLIKING
CUE_WORDS = words(
    """please prefer prefers preferred preference rather would i'd like love enjoy want
    favorite favourite always never use uses we our convention naming rule standard must
    should lesson learned mistake again avoid worked works well better fix fixed solved
    helped trick best practice effective"""
)
_CONDITION_RE = re.compile(
    r"\b(?:for|when|during|if|while)\s+((?:the\s+|a\s+|an\s+)?[\w'/-]+(?:\s+[\w'/-]+){0,4}?)"
    r"(?=\s*(?:[,.;!?]|$|\s+(?:and|but|or|so|because|unless|i|we|you|please)\b))",
    re.I,
)
_NOT_CONDITIONS = frozenset({"general", "now", "sure", "fact", "example", "short", "total"})


def conditions_of(statement: str) -> str | None:
    """The first 'for …' / 'when …' / 'in …' phrase that scopes the statement, if any."""
    for match in _CONDITION_RE.finditer(statement):
        phrase = " ".join(match.group(1).split())
        words = [w for w in raw_tokens(phrase) if w not in STOPWORDS]
        if words and not set(words) <= _NOT_CONDITIONS:
            return phrase
    return None


Stance = tuple[int, dict[str, int]]


def stance_of(statement: str) -> Stance:
    """(polarity, {axis: side}) of a statement, sides already flipped by the polarity.

    Polarity is -1 for a negation or a verb of disliking (both: +1 again), so "don't give
    me detailed answers", "I hate long answers" and "I prefer brief answers" all come out
    as ``length: brief``.
    """
    tokens = raw_tokens(statement)
    polarity = -1 if any(t in NEGATIONS for t in tokens) else 1
    if any(t in _DISLIKING for t in tokens):
        polarity = -polarity
    axes: dict[str, int] = {}
    for axis, (low, high) in _AXES.items():
        side = 0 if any(t in low for t in tokens) else (1 if any(t in high for t in tokens) else -1)
        if side >= 0:
            axes[axis] = side if polarity > 0 else 1 - side
    # With an axis the polarity is folded into the sides; it only matters without one.
    return (1 if axes else polarity), axes


def topic_of(statement: str, conditions: str | None) -> frozenset[str]:
    """Content words minus stance, cue and condition words: what the knowledge is about."""
    skip = set(raw_tokens(conditions)) if conditions else set()
    return frozenset(
        normalise_token(t)
        for t in raw_tokens(statement)
        if t not in STOPWORDS
        and t not in NEGATIONS
        and t not in _STANCE_WORDS
        and t not in CUE_WORDS
        and t not in skip
    )


def opposed(a: Stance, b: Stance) -> bool:
    """Opposite ends of a shared axis; with no axis on either side, opposite polarities."""
    (polarity_a, axes_a), (polarity_b, axes_b) = a, b
    shared = set(axes_a) & set(axes_b)
    if shared:
        return any(axes_a[axis] != axes_b[axis] for axis in shared)
    if not axes_a and not axes_b:
        return polarity_a != polarity_b
    return False


def topic_overlap(a: frozenset[str], b: frozenset[str]) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / min(len(a), len(b))
