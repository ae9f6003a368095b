"""The automatic path of corrections: which older memory a new one supersedes."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from pipelines.own.contradict import contradicted, has_correction_cue
from pipelines.records import EpisodicMemory, Level

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def memory(text: str, kind: str = "preference", minute: int = 0, **extra: object) -> EpisodicMemory:
    fields: dict[str, object] = {
        "id": uuid.uuid4(),
        "tenant_id": "acme",
        "user_id": "dana",
        "task_id": "t",
        "session_id": "s",
        "timestamp": T0 + timedelta(minutes=minute),
        "type": kind,
        "content": text,
        "status": "stored",
    }
    fields.update(extra)
    return EpisodicMemory.model_validate(fields)


@pytest.mark.parametrize(
    ("old", "new", "kind"),
    [
        (
            "I prefer tabs for indentation.",
            "Actually I now prefer spaces for indentation.",
            "preference",
        ),
        ("I like brief answers.", "I want detailed answers.", "preference"),
        (
            "We decided to use PostgreSQL for storage.",
            "Actually we decided to use MySQL for storage instead.",
            "decision",
        ),
        ("我喜欢用制表符缩进。", "我现在改用空格缩进。", "preference"),
        ("数据库决定使用 PostgreSQL 存储。", "数据库改为使用 MySQL 存储。", "decision"),
    ],
)
def test_a_later_opposite_statement_on_the_same_topic_supersedes(
    old: str, new: str, kind: str
) -> None:
    earlier, later = memory(old, kind), memory(new, kind, minute=5)

    [found] = contradicted(later, [earlier])

    assert (found.old_id, found.new_id) == (earlier.id, later.id)
    assert found.reason.startswith("automatic:")


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # different topics
        (
            "We decided to use PostgreSQL for storage.",
            "We decided to ship the login page on Friday.",
        ),
        ("We decided to use PostgreSQL for storage.", "We decided to use Redis as the broker."),
        # the same stance restated
        ("I prefer brief answers.", "Please keep answers short."),
        # each holds in its own situation
        ("When reviewing architecture I want detailed answers.", "I like brief answers."),
        # a long note that agrees in one sentence and is negative in another
        (
            "We decided to keep the outbox in PostgreSQL because it commits with the memory.",
            "We reviewed the billing rewrite today. The team decided to keep invoices in "
            "PostgreSQL because the ledger needs transactions. Status: the payments module is "
            "blocked on SEC-12 until the audit finishes. Nobody complained about lunch.",
        ),
    ],
)
def test_what_does_not_contradict_is_left_alone(old: str, new: str) -> None:
    kind = "decision" if "decided" in old else "preference"
    assert contradicted(memory(new, kind, minute=5), [memory(old, kind)]) == []


def test_only_earlier_episodes_of_the_same_user_and_a_correctable_type_count() -> None:
    new = memory("I want detailed answers.", minute=5)
    candidates = [
        memory("I like brief answers.", minute=9),  # later
        memory("I like brief answers.", user_id="sam"),  # another user
        memory("I like brief answers.", kind="observation"),  # not a preference or decision
        memory("I like brief answers.", level=Level.L1),  # a summary
    ]
    assert contradicted(new, candidates) == []
    assert contradicted(memory("Noted.", kind="observation"), candidates) == []


def test_correction_cues_in_both_languages() -> None:
    assert has_correction_cue("Actually, let's use spaces")
    assert has_correction_cue("we no longer deploy on Fridays")
    assert has_correction_cue("以后改用空格")
    assert not has_correction_cue("We use spaces")


def test_the_conflicting_sentence_of_a_longer_note_still_supersedes() -> None:
    earlier = memory("We decided to use PostgreSQL for storage.", "decision")
    later = memory(
        "Meeting notes from Tuesday. Actually we decided to use MySQL for storage instead. "
        "Bob will share the plan on Friday.",
        "decision",
        minute=5,
    )

    [found] = contradicted(later, [earlier])

    assert found.old_id == earlier.id
