"""Which older memory a new one corrects: the automatic path of corrections.

A new preference, decision or constraint supersedes an older memory of the same scope (the
same tenant and user, a preference or decision too, at level 0) when the two are about the
same thing and say opposite things:

* a sentence of each shares its topic with the other (at least half of the smaller topic's
  words, the measure consolidation uses), and
* those two sentences' stances are opposed (opposite ends of an axis such as tabs/spaces or
  brief/detailed, or a negation), or the new memory says it corrects ("actually", "no
  longer", "instead", "changed my mind", 不再, 改为, 改成, 其实) and the two sentences share
  at least two thirds of their topic.

Sentence by sentence, because a long note covers half the words of any short decision and
carries a negation somewhere: "We decided to keep the outbox in PostgreSQL" is not
contradicted by a meeting note that agrees with it in one sentence and says "the payments
module is blocked" in another.

A situation decides between superseding and keeping both: when either states one ("when
reviewing", "if it is an incident", 遇到架构问题时) the other does not share, both hold, each in
its own situation (consolidation makes that conditional knowledge), and nothing is superseded.
A "for ..." phrase is part of the topic here ("tabs for indentation"), not a situation.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from pipelines.cognition.stance import (
    Stance,
    conditions_of,
    opposed,
    stance_of,
    topic_of,
    topic_overlap,
)
from pipelines.records import EpisodicMemory, Level, MemoryType
from pipelines.text.sentences import split_sentences
from pipelines.text.words import fold, has_han, normalise_token

# The types whose later statements replace earlier ones: what the user wants (preference),
# what was decided (decision; a constraint is recorded as one of these two).
CORRECTABLE = frozenset({MemoryType.PREFERENCE, MemoryType.DECISION})
TOPIC_OVERLAP = 0.5
# A correction cue without opposed stances needs more of the topic in common: "actually we
# use MySQL for storage instead" vs "we use PostgreSQL for storage" share 2 of 3 words.
CUED_TOPIC_OVERLAP = 2 / 3
_CORRECTION_CUE_RE = re.compile(
    r"\b(?:actually|no longer|not anymore|any ?more|instead|changed? (?:my|our) minds?|"
    r"switch(?:ed|ing)? to|correction|scratch that|from now on)\b|不再|改为|改成|改用|其实|更正|"
    r"以后改|换成",
    re.I,
)
# The cue words themselves say nothing about the topic.
_CUE_WORDS = """actually now longer anymore instead changed change mind minds switch switched
switching correction scratch from"""
_CUE_TOKENS = frozenset(normalise_token(w) for w in _CUE_WORDS.split())
_SITUATION_RE = re.compile(r"\b(?:when|whenever|if|during|while|unless)\b", re.I)


class Supersession(BaseModel):
    model_config = ConfigDict(frozen=True)

    old_id: uuid.UUID
    new_id: uuid.UUID
    reason: str


def has_correction_cue(text: str) -> bool:
    return bool(_CORRECTION_CUE_RE.search(text))


def _correctable(memory: EpisodicMemory) -> bool:
    return memory.level == Level.L0 and memory.type in CORRECTABLE


def situation_of(text: str) -> str | None:
    """The situation a statement is limited to, folded; None when it holds generally."""
    if _SITUATION_RE.search(text) or has_han(text):
        found = conditions_of(text)
        return fold(found) if found else None
    return None


def topic_words(text: str) -> frozenset[str]:
    """What a statement is about: consolidation's topic words of the whole statement (its
    "for ..." phrase included), without the correction cues."""
    return topic_of(_CORRECTION_CUE_RE.sub(" ", text), None) - _CUE_TOKENS


def _statements(text: str) -> list[tuple[frozenset[str], Stance]]:
    """Each sentence's topic words and stance (sentences without topic words left out)."""
    parts = []
    for sentence in split_sentences(text) or [text]:
        topic = topic_words(sentence)
        if topic:
            parts.append((topic, stance_of(sentence)))
    return parts


def _conflict(
    older: list[tuple[frozenset[str], Stance]],
    newer: list[tuple[frozenset[str], Stance]],
    cued: bool,
) -> tuple[str, float] | None:
    """Why the newer statements replace the older ones, and the topic overlap of the
    sentences that say so; None when no pair of sentences conflicts."""
    cue: tuple[str, float] | None = None
    for old_topic, old_stance in older:
        for new_topic, new_stance in newer:
            overlap = topic_overlap(old_topic, new_topic)
            if overlap < TOPIC_OVERLAP:
                continue
            if opposed(old_stance, new_stance):
                return "states the opposite on the same topic", overlap
            if cued and overlap >= CUED_TOPIC_OVERLAP and cue is None:
                cue = "says it corrects an earlier statement on the same topic", overlap
    return cue


def contradicted(new: EpisodicMemory, older: Sequence[EpisodicMemory]) -> list[Supersession]:
    """The older memories ``new`` supersedes (see the module docstring); ``older`` are the
    candidates, any order; only those before ``new`` in time count."""
    if not _correctable(new):
        return []
    new_situation = situation_of(new.content)
    new_parts = _statements(new.content)
    if not new_parts:
        return []
    cued = has_correction_cue(new.content)
    found: list[Supersession] = []
    for old in older:
        if old.id == new.id or not _correctable(old):
            continue
        if old.tenant_id != new.tenant_id or old.user_id != new.user_id:
            continue
        if (old.timestamp, str(old.id)) >= (new.timestamp, str(new.id)):
            continue
        if situation_of(old.content) != new_situation:
            continue  # each holds in its own situation
        conflict = _conflict(_statements(old.content), new_parts, cued)
        if conflict is None:
            continue
        why, overlap = conflict
        found.append(
            Supersession(
                old_id=old.id,
                new_id=new.id,
                reason=f"automatic: a later {new.type} {why} (topic overlap {overlap:.2f})",
            )
        )
    return found
