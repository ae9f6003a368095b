"""Which older memory a new one corrects: the automatic path of corrections, made to do no harm.

A superseded memory leaves recall() and context(), so an automatic supersession hides what the
user said: it is taken only on precise evidence, and anything weaker keeps both memories and
records the pair as a *conflict* (context() shows both with their dates; history() lists it).

Candidates: a new preference or decision and an older one of the same scope (tenant and user),
both at level 0, in the same situation ("when reviewing", 遇到架构问题时: each holds in its own).

Never a supersession, nor a conflict, when:

* the new memory is a **question** (认证模块的JWT迁移有什么约束？ asks about the constraint, it
  does not replace it) — question sentences are left out of every comparison;
* either is a **report or summary** (周报：, "Weekly update:", "Release notes 4.1:", a list of
  three clauses or more, four sentences or more): it
  mentions many things and is no statement of its own (its plainest sentence makes a conflict
  at most);
* the two have **different speakers** ("Dana: …" and "Lee: …" may simply disagree);
* they are **copies** (the same words) or the new one **elaborates** the old one (it says all the
  old one said and more): nothing said before is contradicted.

Evidence, sentence by sentence (a long note shares half the words of any short decision):

* **supersede** when a sentence of each is about the same thing (at least two topic words in
  common, covering two thirds of the shorter and 40 % of the longer sentence's topic) and
  - they take opposite ends of a stance axis (tabs/spaces, brief/detailed, 同步/异步) (half
    of the longer topic in common, or the shorter one whole with a correction cue), or
  - the new sentence says it corrects ("actually", "instead", "no longer", 改为, 不再, 推迟到)
    and a value changed (each side has a topic word the other lacks), or
  - without a cue, a single value changed: each side names an identifier the other does not
    (a date, a number, a person, a technology: "due May 3" → "due May 10", 负责人是张工 →
    负责人是李工) while at least 60 % of the longer topic is shared, or
  - one kind of value was replaced (a time for a time, a quantity for a quantity, a name for a
    name; never a name and a date at once, never a numbered thing such as eu-3): with a cue
    ("extending", "dropped", 调到, 挪到, 现在) half of the old statement's other words said
    again suffice, and the old value may be named beside the new one ("dropped Redux ... for
    Zustand"); without a cue every other word of the old statement is said again (three
    quarters of its character pairs in Chinese), so "the staging database runs PostgreSQL
    14" / "the production database ... 16" stays two statements, or
  - one negates the other on a topic they share almost whole (three quarters of the longer);
* **conflict** when the weaker signs hold (the topic overlap the rule of consolidation uses,
  half of the shorter topic, and opposed stances or a correction cue) but not the above.

With a model configured the rule only proposes: :func:`confirm` asks the model about each
proposal (``confirm_correction``, its own narrow JSON protocol), and a proposal the model does
not confirm is kept as a conflict or dropped; when the model cannot answer, both stay.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from enum import StrEnum
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from pipelines.cognition.stance import (
    opposed,
    topic_overlap,
)
from pipelines.errors import LLMError, MalformedLLMOutput
from pipelines.own.statements import (
    Statement,
    attributes,
    content_words,
    is_report,
    main_clause,
    names_a_thing,
    situation_of,
    statements,
    subjects,
    value_kind,
)
from pipelines.records import EpisodicMemory, Level, MemoryType
from pipelines.text.sentences import split_speaker
from pipelines.text.words import (
    NEGATIONS,
    fold,
    has_han,
)

# The types whose later statements replace earlier ones: what the user wants (preference),
# what was decided (decision; a constraint is recorded as one of these two).
CORRECTABLE = frozenset({MemoryType.PREFERENCE, MemoryType.DECISION})
# The weak sign (a conflict): consolidation's measure, half of the smaller topic in common.
TOPIC_OVERLAP = 0.5
# The strong signs (a supersession): two thirds of the shorter topic and 40 % of the longer
# one, with at least two topic words in common, so a one-word topic ("like") never decides.
STRICT_OVERLAP = 2 / 3
STRICT_LONGER_OVERLAP = 0.4
MIN_SHARED = 2
# A changed value without a cue: most of both sentences is the same statement.
VALUE_LONGER_OVERLAP = 0.6
# A negation without a cue or an axis: the same statement, negated.
NEGATION_LONGER_OVERLAP = 0.75


class Verdict(StrEnum):
    """What becomes of a proposed pair: the older is superseded, or both stay as a conflict."""

    SUPERSEDE = "supersede"
    CONFLICT = "conflict"


class Supersession(BaseModel):
    """A proposal about one (older, newer) pair: ``verdict`` says what is done with it."""

    model_config = ConfigDict(frozen=True)

    old_id: uuid.UUID
    new_id: uuid.UUID
    reason: str
    verdict: Verdict = Verdict.SUPERSEDE


def _correctable(memory: EpisodicMemory) -> bool:
    return memory.level == Level.L0 and memory.type in CORRECTABLE


def _same_speaker(old: str, new: str) -> tuple[bool, str, str]:
    """Whether both lines have one speaker (or none), and their bodies."""
    old_speaker, old_body = split_speaker(old)
    new_speaker, new_body = split_speaker(new)
    if old_speaker is not None and new_speaker is not None:
        return fold(old_speaker) == fold(new_speaker), old_body, new_body
    return True, old_body, new_body


def _one_value_changed(old: frozenset[str], new: frozenset[str]) -> bool:
    """Without a cue, one value for one value, and none of them naming a thing: "the deadline
    is May 3" → "May 10". Two changes at once ("archive-3 at 02:03" → "archive-8 at 02:08")
    or another named thing ("region eu-3" → "region eu-8") speak of another subject."""
    old_only, new_only = old - new, new - old
    if len(old_only) != 1 or len(new_only) != 1:
        return False
    return not any(names_a_thing(v) for v in old_only | new_only)


def _topic_changed_beyond(old: Statement, new: Statement) -> bool:
    """Whether words other than the changed value differ on both sides: "the search
    endpoint's limit is 100" → "the login endpoint's limit is 5" names another endpoint."""
    values = old.values ^ new.values
    return bool(old.topic - new.topic - values) and bool(new.topic - old.topic - values)


def _core(statement: Statement, changed: frozenset[str]) -> frozenset[str]:
    """A statement's topic without the words of the values that changed: what it is about."""
    return frozenset(t for t in statement.topic if not any(t in v for v in changed))


def _replaced_value(old: Statement, new: Statement) -> str | None:
    """Why ``new`` gives a new value to what ``old`` said, when the rest of ``old`` is said
    again: one kind of value changed ("ends on the 9th" → "ends on the 16th", 每分钟100次 →
    每分钟300次, Saturday 02:00 → Sunday 01:00), old's other words are in the new statement, and
    with a cue, half of them are enough (the cue says a value was replaced)."""
    old_only, new_only = old.values - new.values, new.values - old.values
    if not new_only or len(old_only) > 2 or len(new_only) > 3:
        return None
    if any(names_a_thing(v) or subjects(v) for v in old_only | new_only):
        # another numbered thing (eu-3 / eu-8), another module (认证模块 / 账单系统): another
        # subject, not a new value
        return None
    kinds_new = {value_kind(v) for v in new_only}
    if len(kinds_new) != 1:
        return None  # a name and a date changed at once: another subject
    if old_only:
        if {value_kind(v) for v in old_only} != kinds_new:
            return None
    elif not (new.cued and any(value_kind(v) in kinds_new for v in old.values)):
        # The old value named again beside a new one of its kind is what the cue replaces
        # ("dropped Redux in the mobile app, state is Zustand"); without a cue it is an
        # addition.
        return None
    changed = old_only | new_only
    old_core, new_core = _core(old, changed), _core(new, changed)
    shared = old_core & new_core
    if not old_core or not shared:
        return None
    covered = len(shared) / len(old_core)
    if new.cued and covered >= 0.5 and len(shared) >= 1 + (len(old_core) > 3):
        return "says it replaces a value of the same statement"
    # Without a cue every other word of the old statement is said again ("the staging
    # database runs PostgreSQL 14" / "the production database ... 16" names another database);
    # Chinese topics are character pairs, and a pair across a word boundary (示安 of 演示安排)
    # may change with the phrasing, so three quarters suffice there.
    needed = 0.75 if has_han(old.text) else 1.0
    if not new.cued and covered >= needed and len(shared) >= MIN_SHARED:
        return "states another value for the same thing"
    return None


def _strong(old: Statement, new: Statement) -> str | None:
    """Why ``new`` replaces ``old`` on precise evidence, or None."""
    shared = old.topic & new.topic
    longer = len(shared) / max(len(old.topic), len(new.topic))
    axis = opposed(old.stance, new.stance) and bool(old.stance[1]) and bool(new.stance[1])
    if axis and old.values and new.values and not old.values & new.values:
        # "tabs in Go files" / "spaces in YAML files": the side and the thing both changed,
        # so it speaks of another thing.
        axis = False
    if axis and shared and longer >= 0.5:
        return "takes the opposite side on the same topic"
    if axis and shared and new.cued and topic_overlap(old.topic, new.topic) >= STRICT_OVERLAP:
        # "Actually I now prefer spaces for indentation" after "tabs for indentation in every
        # repository": the shorter topic whole, the other side, and a cue.
        return "says it changed sides on the same topic"
    values_changed = bool(old.values - new.values) and bool(new.values - old.values)
    if new.cued and values_changed and shared and topic_overlap(old.topic, new.topic) >= 0.5:
        # "we write the backend in Go" → "the backend moves to Rust": a cue and a new value
        # say it, even when the rest shares one word (后端).
        return "says it corrects the same statement and names a new value"
    replaced = _replaced_value(old, new)
    if replaced is not None:
        return replaced
    if len(shared) < MIN_SHARED or topic_overlap(old.topic, new.topic) < STRICT_OVERLAP:
        return None
    if longer < STRICT_LONGER_OVERLAP:
        return None
    changed = bool(old.topic - new.topic) and bool(new.topic - old.topic)
    if new.cued and (changed or axis):
        return "says it corrects the same statement and changes its value"
    if (
        longer >= VALUE_LONGER_OVERLAP
        and _one_value_changed(old.values, new.values)
        and not _topic_changed_beyond(old, new)
    ):
        return "states another value for the same thing"
    polarity_flip = opposed(old.stance, new.stance) and not old.stance[1] and not new.stance[1]
    if polarity_flip and longer >= NEGATION_LONGER_OVERLAP:
        return "negates the same statement"
    return None


def _weak(old: Statement, new: Statement) -> str | None:
    """The signs that make a pair worth showing side by side, short of a supersession."""
    shared = old.topic & new.topic
    if len(shared) < MIN_SHARED or topic_overlap(old.topic, new.topic) < TOPIC_OVERLAP:
        return None
    if opposed(old.stance, new.stance):
        return "may state the opposite on the same topic"
    if new.cued:
        return "may correct an earlier statement on the same topic"
    return None


def _other_subject(old: str, new: str) -> bool:
    """Both name the part of the system they are about, and no part is the same; or both
    name what of it they are about, and that differs (报表模块的数据库 / 报表模块的消息队列)."""
    old_clause, new_clause = main_clause(old), main_clause(new)
    a, b = subjects(old_clause), subjects(new_clause)
    if a and b and not (a & b):
        return True
    x, y = attributes(old_clause), attributes(new_clause)
    return bool(x) and bool(y) and not (x & y)


def _names_a_replacement(old_parts: list[Statement], new_parts: list[Statement]) -> bool:
    """Whether a new sentence says it corrects and names, beside an old value, a new one of
    its kind: "dropped Redux ... for Zustand" repeats every old word and still replaces one."""
    old_values = frozenset().union(*(p.values for p in old_parts)) if old_parts else frozenset()
    kinds = {value_kind(v) for v in old_values}
    return any(
        part.cued and any(value_kind(v) in kinds for v in part.values - old_values)
        for part in new_parts
    )


def judge_pair(older: str, newer: str) -> tuple[Verdict, str] | None:
    """The rule on two statements' texts: a verdict and why, or None when they do not bear on
    each other. (Scope, types, order and situations are the caller's: see
    :func:`contradicted`.)"""
    same, old_body, new_body = _same_speaker(older, newer)
    if not same:
        return None
    if _other_subject(old_body, new_body):
        return None  # the same words about another module: another subject
    old_parts, new_parts = statements(old_body), statements(new_body)
    old_content, new_content = content_words(old_body), content_words(new_body)
    if (
        not old_content - new_content
        and old_content & NEGATIONS == new_content & NEGATIONS
        and not _names_a_replacement(old_parts, new_parts)
    ):
        return None  # a copy, or an elaboration: all the old one said is said again
    report = is_report(old_body) or is_report(new_body)
    weak: str | None = None
    best: tuple[str, float] | None = None
    for old in old_parts:
        for new in new_parts:
            why = _strong(old, new)
            overlap = topic_overlap(old.topic, new.topic)
            if why is not None and (best is None or overlap > best[1]):
                best = (why, overlap)
            elif weak is None:
                found = _weak(old, new)
                if found is not None:
                    weak = f"{found} (topic overlap {overlap:.2f})"
    if best is not None and report:
        # A report's sentence may say it plainly, but the report is no statement of its own.
        return Verdict.CONFLICT, f"a report {best[0]} (topic overlap {best[1]:.2f})"
    if best is not None:
        return Verdict.SUPERSEDE, f"{best[0]} (topic overlap {best[1]:.2f})"
    if weak is not None and not report:
        return Verdict.CONFLICT, weak
    return None


def contradicted(new: EpisodicMemory, older: Sequence[EpisodicMemory]) -> list[Supersession]:
    """The rule's proposals for ``new`` against ``older`` (any order; only those before
    ``new`` in time count): supersessions on precise evidence, conflicts on weaker signs."""
    if not _correctable(new):
        return []
    _, new_body = split_speaker(new.content)
    if not statements(new_body):
        return []  # a question, or nothing stated
    new_situation = situation_of(new.content)
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
        judged = judge_pair(old.content, new.content)
        if judged is None:
            continue
        verdict, why = judged
        found.append(
            Supersession(
                old_id=old.id,
                new_id=new.id,
                verdict=verdict,
                reason=f"automatic: a later {new.type} {why}",
            )
        )
    return found


# -- the model's confirmation ----------------------------------------------------------------


class ConfirmVerdict(StrEnum):
    SUPERSEDES = "supersedes"  # the newer statement replaces the older one
    CONFLICT = "conflict"  # they disagree and it is not clear which holds: keep both
    UNRELATED = "unrelated"  # they do not bear on each other


class CorrectionStatement(BaseModel):
    model_config = ConfigDict(frozen=True)

    content: str
    date: str  # ISO date of the statement
    type: str


class CorrectionRequest(BaseModel):
    """What the model is shown: the older and the newer statement, with their dates."""

    model_config = ConfigDict(frozen=True)

    older: CorrectionStatement
    newer: CorrectionStatement


class CorrectionAnswer(BaseModel):
    """The model's answer, as the ``confirm_correction`` protocol asks for it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    verdict: ConfirmVerdict
    reason: str = Field("", max_length=2_000)


@runtime_checkable
class CorrectionLLM(Protocol):
    """What the automatic path of corrections asks of the LLM port."""

    @property
    def name(self) -> str: ...

    def confirm_correction(self, request: CorrectionRequest) -> CorrectionAnswer: ...


def correction_request(old: EpisodicMemory, new: EpisodicMemory) -> CorrectionRequest:
    return CorrectionRequest(
        older=CorrectionStatement(
            content=old.content, date=old.timestamp.date().isoformat(), type=str(old.type)
        ),
        newer=CorrectionStatement(
            content=new.content, date=new.timestamp.date().isoformat(), type=str(new.type)
        ),
    )


def offline_confirmation(request: CorrectionRequest) -> CorrectionAnswer:
    """The rule's own answer, for the offline adapter: what :func:`judge_pair` says."""
    judged = judge_pair(request.older.content, request.newer.content)
    if judged is None:
        return CorrectionAnswer(verdict=ConfirmVerdict.UNRELATED, reason="offline rules")
    verdict, why = judged
    return CorrectionAnswer(
        verdict=(
            ConfirmVerdict.SUPERSEDES if verdict is Verdict.SUPERSEDE else ConfirmVerdict.CONFLICT
        ),
        reason=f"offline rules: {why}",
    )


def apply_confirmation(proposal: Supersession, answer: CorrectionAnswer) -> Supersession | None:
    """A proposal after the model's answer. The model confirms or weakens, never strengthens:
    a supersession it confirms stands; a conflict stays a conflict even if it says
    ``supersedes`` (the rule's evidence was not precise enough to hide a memory on a model's
    word alone); ``unrelated`` drops the proposal."""
    said = answer.reason.strip()[:300] or "no reason given"
    if answer.verdict is ConfirmVerdict.UNRELATED:
        return None
    if answer.verdict is ConfirmVerdict.SUPERSEDES and proposal.verdict is Verdict.SUPERSEDE:
        return proposal.model_copy(update={"reason": f"{proposal.reason}; confirmed: {said}"})
    return proposal.model_copy(
        update={"verdict": Verdict.CONFLICT, "reason": f"{proposal.reason}; model: {said}"}
    )


def unconfirmed(proposal: Supersession, why: str) -> Supersession:
    """A proposal the model could not be asked about: both memories stay, as a conflict."""
    return proposal.model_copy(
        update={
            "verdict": Verdict.CONFLICT,
            "reason": f"{proposal.reason}; not confirmed ({why}): both kept",
        }
    )


def confirm(
    llm: CorrectionLLM,
    new: EpisodicMemory,
    older: Sequence[EpisodicMemory],
    proposals: Sequence[Supersession],
) -> list[Supersession]:
    """Each proposal after the model's answer (see :func:`apply_confirmation`). Any error of
    the model keeps both memories as a conflict with the reason: the pair is never lost and
    nothing is hidden on the rule's word alone."""
    by_id = {m.id: m for m in older}
    out: list[Supersession] = []
    for proposal in proposals:
        old = by_id.get(proposal.old_id)
        if old is None:
            continue
        request = correction_request(old, new)
        answer: CorrectionAnswer | None = None
        failure = ""
        for _ in range(2):  # a malformed answer gets one retry, as every protocol's does
            try:
                answer = llm.confirm_correction(request)
                break
            except MalformedLLMOutput as exc:
                failure = f"malformed answer: {exc}"
            except LLMError as exc:  # unreachable, refused: a model's failure must not decide
                failure = f"{type(exc).__name__}: {exc}"
                break
        if answer is None:
            out.append(unconfirmed(proposal, failure[:200]))
            continue
        kept = apply_confirmation(proposal, answer)
        if kept is not None:
            out.append(kept)
    return out
