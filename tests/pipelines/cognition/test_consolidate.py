from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from pipelines.cognition.consolidate import (
    ChangeAction,
    consolidate,
    render_conditional,
    semantic_id,
)
from pipelines.cognition.knowledge import (
    KnowledgeBatch,
    KnowledgeExtractor,
    KnowledgeItem,
    KnowledgeKind,
    extract_offline,
    parse_knowledge,
)
from pipelines.cognition.stance import conditions_of, opposed, stance_of
from pipelines.records import EpisodicMemory, Level, MemoryType, SemanticMemory

T0 = datetime(2024, 3, 1, 9, tzinfo=UTC)


class BagEmbedder:
    """A fake embedder: a normalised bag of words, so equal wording means similarity 1."""

    @property
    def version(self) -> str:
        return "bag/64"

    @property
    def dim(self) -> int:
        return 64

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out = []
        for text in texts:
            vector = np.zeros(64)
            for word in text.lower().replace(".", " ").replace("!", " ").split():
                vector[hashlib.blake2b(word.encode(), digest_size=2).digest()[0] % 64] += 1
            norm = np.linalg.norm(vector)
            out.append((vector / norm if norm else vector).tolist())
        return out


EMBED = BagEmbedder()
_counter = iter(range(1, 10_000))


def memory(
    text: str,
    *,
    task: str = "task-a",
    days: float = 0,
    user: str | None = "u1",
    tenant: str = "acme",
    memory_type: MemoryType | None = None,
) -> EpisodicMemory:
    return EpisodicMemory(
        id=uuid.UUID(int=next(_counter)),
        tenant_id=tenant,
        user_id=user,
        task_id=task,
        session_id="s",
        timestamp=T0 + timedelta(days=days),
        type=memory_type,
        content=text,
    )


def test_one_mention_of_a_preference_stays_episodic() -> None:
    plan = consolidate([memory("user: I prefer brief status updates.")], [], EMBED, T0)
    assert plan.changes == ()
    assert len(plan.episodic_only) == 1
    assert "stays episodic" in plan.episodic_only[0].reason


def test_a_preference_recurring_across_tasks_becomes_semantic() -> None:
    first = memory("user: I prefer brief status updates.", task="task-a")
    second = memory("user: I prefer brief status updates.", task="task-b")
    plan = consolidate([first, second], [], EMBED, T0)
    assert len(plan.changes) == 1
    change = plan.changes[0]
    assert change.action is ChangeAction.CREATE
    assert change.kind is KnowledgeKind.PREFERENCE
    assert change.semantic.source_memory_ids == (first.id, second.id)
    assert change.semantic.scope == "user:u1" and change.semantic.user_id == "u1"
    assert 0.5 < change.semantic.confidence < 1


def test_recurrence_over_time_counts_within_one_task() -> None:
    same_day = [memory("I prefer brief status updates.", days=d) for d in (0, 0.1)]
    assert consolidate(same_day, [], EMBED, T0).changes == ()
    two_days = [memory("I prefer brief status updates.", days=d) for d in (0, 2)]
    assert len(consolidate(two_days, [], EMBED, T0).changes) == 1


def test_conventions_patterns_and_mistakes_need_one_mention() -> None:
    rows = [
        memory("We always use snake_case for module names in this project.", user=None),
        memory("Retrying with jitter worked well for the billing timeouts."),
        memory("Lesson learned: never deploy the search index on a Friday again."),
        memory("The staging deploy of build 412 finished."),
    ]
    plan = consolidate(rows, [], EMBED, T0)
    kinds = {c.kind for c in plan.changes}
    assert kinds == {KnowledgeKind.CONVENTION, KnowledgeKind.PATTERN, KnowledgeKind.MISTAKE}
    assert all(c.semantic.scope == "tenant" for c in plan.changes)
    assert plan.memories_seen == 4 and plan.candidates == 3


def test_similar_knowledge_merges_and_a_replay_changes_nothing() -> None:
    # given knowledge already in the store
    source_a = memory("We always use snake_case for module names in this project.")
    stored = consolidate([source_a], [], EMBED, T0).changes[0].semantic
    # when the same convention is stated again in another task
    source_b = memory("We always use snake_case for module names in this project!", task="t2")
    plan = consolidate([source_b], [stored], EMBED, T0 + timedelta(days=1))
    # then it merges: same row, confidence up, source appended
    (change,) = plan.changes
    assert change.action is ChangeAction.MERGE
    assert change.semantic.id == stored.id
    assert change.semantic.source_memory_ids == (source_a.id, source_b.id)
    assert change.semantic.confidence > stored.confidence
    assert change.added_source_ids == (source_b.id,)
    # and running the same batch against the merged row changes nothing
    again = consolidate([source_b], [change.semantic], EMBED, T0 + timedelta(days=1))
    assert again.changes == ()


def test_a_contradiction_with_a_condition_becomes_conditional_knowledge() -> None:
    stored = SemanticMemory(
        id=uuid.UUID(int=777),
        tenant_id="acme",
        user_id="u1",
        content="I prefer brief answers.",
        confidence=0.8,
        source_memory_ids=(uuid.UUID(int=776),),
        scope="user:u1",
    )
    new = memory("For architecture questions I prefer detailed answers.")
    plan = consolidate([new], [stored], EMBED, T0)
    (change,) = plan.changes
    assert change.action is ChangeAction.CONDITIONAL
    assert change.conflicts_with == stored.id
    assert change.semantic.id != stored.id  # the stored item is never overwritten
    assert change.semantic.conditions == "architecture questions"
    assert change.status == "active"
    line = render_conditional([stored, change.semantic])
    assert line == "I prefer brief answers; For architecture questions I prefer detailed answers"


def test_a_bare_contradiction_is_flagged_for_confirmation() -> None:
    stored = SemanticMemory(
        id=uuid.UUID(int=778),
        tenant_id="acme",
        content="Use tabs in the Makefile.",
        confidence=0.7,
        scope="tenant",
    )
    new = memory("We always use spaces in the Makefile.", user=None)
    (change,) = consolidate([new], [stored], EMBED, T0).changes
    assert change.action is ChangeAction.FLAG
    assert change.status == "needs_confirmation"
    assert change.conflicts_with == stored.id


def test_stance() -> None:
    brief = stance_of("I prefer brief answers")
    assert stance_of("Don't give me detailed answers") == brief
    assert stance_of("I hate long answers")[1] == brief[1]
    assert opposed(brief, stance_of("I prefer detailed answers"))
    assert opposed(stance_of("use Redis for caching"), stance_of("don't use Redis for caching"))
    assert not opposed(brief, stance_of("answers please"))


def test_conditions() -> None:
    assert conditions_of("I prefer brief answers for status updates.") == "status updates"
    assert conditions_of("When reviewing PRs, be detailed.") == "reviewing PRs"
    assert conditions_of("I prefer brief answers in general.") is None


def test_offline_extraction_skips_questions_and_empty_cues() -> None:
    rows = [
        memory("Do you prefer tea?"),
        memory("I love it."),
        memory("I love hiking in the Alps with my dog."),
    ]
    items = extract_offline(rows).items
    assert [i.statement for i in items] == ["I love hiking in the Alps with my dog."]


class CitingExtractor:
    """A fake LLM extractor that also cites a memory it was not given."""

    @property
    def name(self) -> str:
        return "fake-llm"

    def extract_knowledge(self, memories: Sequence[EpisodicMemory]) -> KnowledgeBatch:
        return KnowledgeBatch(
            items=[
                KnowledgeItem(
                    kind=KnowledgeKind.CONVENTION,
                    statement="Every migration ships with a downgrade.",
                    confidence=0.9,
                    source_ids=[memories[0].id],
                ),
                KnowledgeItem(
                    kind=KnowledgeKind.CONVENTION,
                    statement="Invented knowledge.",
                    confidence=0.9,
                    source_ids=[uuid.UUID(int=123456)],
                ),
            ]
        )


def test_an_extractor_port_is_used_and_invented_sources_are_ignored() -> None:
    extractor = CitingExtractor()
    assert isinstance(extractor, KnowledgeExtractor)
    row = memory("migrations: always add a downgrade")
    plan = consolidate([row], [], EMBED, T0, extractor)
    assert plan.extracted_by == "fake-llm"
    (change,) = plan.changes
    assert change.semantic.content == "Every migration ships with a downgrade."
    assert change.semantic.source_memory_ids == (row.id,)
    assert change.semantic.id == semantic_id(
        "acme", "tenant", KnowledgeKind.CONVENTION, "Every migration ships with a downgrade."
    )


def test_consolidation_runs_per_tenant() -> None:
    with pytest.raises(ValueError):
        consolidate([memory("a", tenant="x"), memory("b", tenant="y")], [], EMBED, T0)


class BrokenExtractor:
    """A fake LLM that never answers with valid JSON."""

    def __init__(self) -> None:
        self.calls = 0

    @property
    def name(self) -> str:
        return "broken-llm"

    def extract_knowledge(self, memories: Sequence[EpisodicMemory]) -> KnowledgeBatch:
        self.calls += 1
        return parse_knowledge('{"items": [{"kind": "gossip"}]}')


def test_a_malformed_extraction_is_retried_then_answered_offline() -> None:
    extractor = BrokenExtractor()
    rows = [memory("We always use snake_case for module names in this project.")]
    plan = consolidate(rows, [], EMBED, T0, extractor)
    assert extractor.calls == 2
    assert plan.extracted_by == "offline-fallback"
    assert [c.kind for c in plan.changes] == [KnowledgeKind.CONVENTION]


# -- restatements, owners and stacks -----------------------------------------------------------


def test_a_preference_restated_in_other_words_on_other_days_is_one_item() -> None:
    # given one wish said three times in other words (the embeddings are far apart)
    rows = [
        memory("I prefer short answers with bullet points.", days=0),
        memory("Please keep your replies brief, a few bullets is plenty.", days=2),
        memory("Please don't use emojis in commit messages.", days=3),
        memory("I really dislike emojis in commits.", days=5),
    ]
    plan = consolidate(rows, [], EMBED, T0 + timedelta(days=6))
    # then each wish is one item citing every mention, promoted by its recurrence
    by_first = {c.semantic.content: c.semantic.source_memory_ids for c in plan.changes}
    assert by_first == {
        "I prefer short answers with bullet points.": (rows[0].id, rows[1].id),
        "Please don't use emojis in commit messages.": (rows[2].id, rows[3].id),
    }


def test_restatements_need_the_same_topic_and_stance() -> None:
    # given wishes of one user that share a word but not their object, their stance or
    # their situation
    rows = [
        memory("Please write commit messages in English.", days=0),
        memory("Please write code comments in English.", days=2),
        memory("I prefer brief answers.", days=0, task="t1"),
        memory("I prefer detailed answers.", days=3, task="t2"),
        memory("When reviewing PRs, I like comments on each function."),
        memory("I like comments on each function.", days=4, task="t3"),
    ]
    plan = consolidate(rows, [], EMBED, T0 + timedelta(days=5))
    # then nothing joined: each mention stays on its own (a single mention stays episodic)
    assert all(len(c.semantic.source_memory_ids) == 1 for c in plan.changes)
    assert all(len(w.source_ids) == 1 for w in plan.episodic_only)


def test_a_reassigned_owner_is_a_second_item_not_a_merge() -> None:
    # given an owner, and ten days later the same service owned by someone else
    before = memory("Dana owns the billing service.", user=None)
    after = memory("The billing service is now owned by Omar.", days=10, user=None)
    plan = consolidate([before, after], [], EMBED, T0 + timedelta(days=11))
    # then both are owner knowledge of the tenant, neither merged into the other
    assert [(c.kind, c.action, c.semantic.source_memory_ids) for c in plan.changes] == [
        (KnowledgeKind.OWNER, ChangeAction.CREATE, (before.id,)),
        (KnowledgeKind.OWNER, ChangeAction.CREATE, (after.id,)),
    ]
    assert all(c.semantic.scope == "tenant" for c in plan.changes)
    # and a stored owner is not extended by a statement that names another one
    stored = plan.changes[0].semantic
    again = memory("Omar owns the billing service.", days=12, user=None)
    (change,) = consolidate([again], [stored], EMBED, T0 + timedelta(days=13)).changes
    assert change.action is ChangeAction.CREATE and change.semantic.id != stored.id


def test_a_stack_restated_merges_but_another_technology_does_not() -> None:
    first = memory("The backend is written in Go.", user=None)
    same = memory("The backend is written in Go!", task="t2", user=None)
    other = memory("The backend is written in Rust.", task="t3", user=None)
    plan = consolidate([first, same, other], [], EMBED, T0)
    assert sorted(
        (c.semantic.content, len(c.semantic.source_memory_ids)) for c in plan.changes
    ) == [("The backend is written in Go.", 2), ("The backend is written in Rust.", 1)]
    assert {c.kind for c in plan.changes} == {KnowledgeKind.STACK}


class RecordingExtractor:
    """A fake model that states every memory it is shown as a convention."""

    def __init__(self) -> None:
        self.shown: list[str] = []

    @property
    def name(self) -> str:
        return "recording"

    def extract_knowledge(self, memories: Sequence[EpisodicMemory]) -> KnowledgeBatch:
        self.shown.extend(m.content for m in memories)
        return KnowledgeBatch(
            items=[
                KnowledgeItem(
                    kind=KnowledgeKind.CONVENTION,
                    statement=f"Rule: {m.content}",
                    confidence=0.9,
                    source_ids=[m.id],
                )
                for m in memories
            ]
        )


def test_a_model_is_shown_no_report_summary_or_chatter() -> None:
    # given a report, a summary, an acknowledgement and one raw statement
    rule = memory("In this project, branch names start with the ticket number.", user=None)
    rows = [
        memory("Weekly report: we use feature flags, the login page is done.", user=None),
        memory("Summary: branch naming was discussed.", user=None).model_copy(
            update={"level": Level.L1}
        ),
        memory("Gotcha, Jon!", user=None),
        rule,
    ]
    model = RecordingExtractor()
    plan = consolidate(rows, [], EMBED, T0, model)
    # then the model saw the statement only, and only it became knowledge
    assert model.shown == [rule.content]
    assert [c.semantic.source_memory_ids for c in plan.changes] == [(rule.id,)]
    assert plan.memories_seen == 4
    # and with nothing to read, the model is not asked at all
    idle = RecordingExtractor()
    assert consolidate(rows[:3], [], EMBED, T0, idle).changes == () and idle.shown == []
