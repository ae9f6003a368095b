"""Corrections through real workers: by hand with ``correct()``, and automatically when a later
preference contradicts earlier ones; reads return the current version only, knowledge
follows, history shows every version."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from pipelines.errors import Conflict, InvalidInput, NotFound
from tests.integration.test_cognition import one, wait_for
from workers.app import app

pytestmark = pytest.mark.integration

TENANT = "own-acme"
START = datetime(2026, 11, 2, 9, tzinfo=UTC)


def settled_corrections(db: psycopg.Connection[Any]) -> bool:
    return bool(
        one(
            db,
            "SELECT count(*) = 0 FROM jobs WHERE kind IN ('settle', 'write') AND status <> 'done'",
        )
    )


def test_correct_a_decision_by_hand(client, workers, db) -> None:  # type: ignore[no-untyped-def]
    # given a stored decision
    workers("owner")
    receipt = client.record(
        "We decided to use PostgreSQL for the billing ledger because it has serializable "
        "transactions.",
        tenant_id=TENANT,
        task_id="billing",
        session_id="s1",
        type="decision",
    )
    client.wait_until_settled([receipt.memory_id])

    # when it is corrected
    fixed = client.correct(
        receipt.memory_id,
        "We decided to use CockroachDB for the billing ledger because it spans regions.",
        tenant_id=TENANT,
        reason="the architecture review moved the ledger to a multi-region database",
        actor="dana",
    )

    # then there is a new version, the old one is kept as corrected
    assert fixed.supersedes == receipt.memory_id and fixed.version == 2
    client.wait_until_settled([fixed.memory_id])
    wait_for(lambda: settled_corrections(db), "the correction settled")
    old = client.get(receipt.memory_id, tenant_id=TENANT)
    new = client.get(fixed.memory_id, tenant_id=TENANT)
    assert old is not None and old.status == "corrected" and old.corrected_by == fixed.memory_id
    assert new is not None and new.status == "stored" and new.supersedes == receipt.memory_id

    # and every read returns the current version only
    hits = client.recall("which database holds the billing ledger", tenant_id=TENANT, limit=5)
    ids = {h["id"] for h in hits}
    assert str(fixed.memory_id) in ids and str(receipt.memory_id) not in ids
    context = client.context(
        "billing", "which database for the billing ledger", 4000, tenant_id=TENANT
    )
    assert "CockroachDB" in context.text and "PostgreSQL" not in context.text

    # and the history has both versions, the reason and who corrected it
    history = client.history(receipt.memory_id, tenant_id=TENANT)
    assert [v.version for v in history.versions] == [1, 2]
    assert history.current_id == fixed.memory_id
    events = {(e.event, e.memory_id) for e in history.events}
    assert ("superseded", receipt.memory_id) in events
    assert ("corrected", fixed.memory_id) in events
    assert any(e.actor == "dana" and "multi-region" in (e.reason or "") for e in history.events)

    # and the trace of the context names the new version and why it was chosen
    trace = client.explain(context, tenant_id=TENANT)
    placed = [t for t in trace if t.id == str(fixed.memory_id)]
    assert placed and placed[0].memory_version == 2 and placed[0].relevance is not None

    # when the same correction is replayed, nothing new is written
    again = client.correct(
        receipt.memory_id,
        "We decided to use CockroachDB for the billing ledger because it spans regions.",
        tenant_id=TENANT,
        reason="replayed",
    )
    assert again.memory_id == fixed.memory_id and again.status == "replay"

    # and bad corrections are refused with the field named, nothing written
    with pytest.raises(Conflict, match="already corrected"):
        client.correct(receipt.memory_id, "Something else.", tenant_id=TENANT, reason="x")
    with pytest.raises(NotFound) as unknown:
        client.correct(uuid.uuid4(), "Something else.", tenant_id=TENANT, reason="x")
    with pytest.raises(NotFound) as foreign:
        client.correct(fixed.memory_id, "Something else.", tenant_id="other", reason="x")
    assert unknown.value.field == foreign.value.field == "memory_id"
    assert "in this tenant" in str(foreign.value)
    with pytest.raises(InvalidInput, match="reason"):
        client.correct(fixed.memory_id, "Something else.", tenant_id=TENANT, reason="  ")
    with pytest.raises(InvalidInput, match="memory_id"):
        client.correct("not-a-uuid", "Something else.", tenant_id=TENANT, reason="x")
    assert one(db, "SELECT count(*) FROM memories WHERE tenant_id = %s", TENANT) == 2

    # when the current version is forgotten, it can no longer be corrected
    client.wait_until_forgotten(
        client.forget(tenant_id=TENANT, memory_id=fixed.memory_id, reason="GDPR request"),
        tenant_id=TENANT,
    )
    with pytest.raises(Conflict, match="forgotten"):
        client.correct(fixed.memory_id, "Something else.", tenant_id=TENANT, reason="x")


def test_a_preference_stated_three_times_is_corrected(client, workers, db) -> None:  # type: ignore[no-untyped-def]
    # given a preference stated in three tasks, consolidated into knowledge
    workers("owner")
    workers("background", ("maintenance", "compress", "quality", "consolidate"))
    said = [
        client.record(
            "I prefer tabs for indentation in every repository.",
            tenant_id=TENANT,
            task_id=f"repo-{n}",
            session_id=f"s{n}",
            user_id="dana",
            type="preference",
            timestamp=START + timedelta(days=n),
        ).memory_id
        for n in range(3)
    ]
    client.wait_until_settled(said)
    now = START + timedelta(days=4)
    app.send_task(
        "memory.consolidate.tenant",
        kwargs={"tenant_id": TENANT, "run_id": str(uuid.uuid4()), "now": now.isoformat()},
        queue="consolidate",
    )
    tabs = wait_for(
        lambda: one(
            db,
            "SELECT id FROM semantic_memories WHERE content ILIKE '%%tabs%%' "
            "AND status = 'active' AND cardinality(source_ids) = 3",
        ),
        "the preference consolidated",
    )

    # when the user says the opposite later
    spaces = client.record(
        "Actually I now prefer spaces for indentation.",
        tenant_id=TENANT,
        task_id="repo-9",
        session_id="s9",
        user_id="dana",
        type="preference",
        timestamp=START + timedelta(days=5),
    ).memory_id
    client.wait_until_settled([spaces])

    # then the three earlier statements are superseded by it, automatically
    wait_for(
        lambda: one(
            db,
            "SELECT count(*) = 3 FROM memories WHERE status = 'corrected' AND corrected_by = %s",
            spaces,
        ),
        "the contradiction found",
    )
    wait_for(lambda: settled_corrections(db), "the corrections settled")

    # and the knowledge follows: tabs retired, spaces stated from the correction
    assert one(db, "SELECT status FROM semantic_memories WHERE id = %s", tabs) == "retired"
    knowledge = client.knowledge(tenant_id=TENANT, kind="preference")
    assert [k.content for k in knowledge if "spaces" in k.content]
    assert not [k for k in knowledge if "tabs" in k.content]

    # and context() shows the new preference only, even in a task where the old one was said
    # (its window turn corrected, its episode no longer recalled, the knowledge restated)
    context = client.context(
        "repo-0", "which indentation do I prefer", 4000, tenant_id=TENANT, session_id="s0"
    )
    assert "spaces" in context.text and "tabs" not in context.text

    # and history shows both statements
    history = client.history(said[0], tenant_id=TENANT)
    assert {v.id for v in history.versions} >= {said[0], spaces}
    assert history.current_id == spaces
    superseded = [e for e in history.events if e.event == "superseded"]
    assert superseded and "automatic" in (superseded[0].reason or "")

    # and the automatic supersession can be undone: the earlier statement is recalled again
    receipt = client.undo_correction(
        said[0], tenant_id=TENANT, reason="both hold: tabs in old repositories", actor="dana"
    )
    assert (receipt.restored_id, receipt.kept_id, receipt.status) == (said[0], spaces, "restored")
    assert client.get(said[0], tenant_id=TENANT).status == "stored"
    assert client.get(spaces, tenant_id=TENANT).status == "stored"
    wait_for(
        lambda: (
            one(db, "SELECT status FROM jobs WHERE kind = 'embed' AND memory_id = %s", said[0])
            == "done"
        ),
        "the restored memory back in the index",
    )
    recalled = client.recall("tabs for indentation", tenant_id=TENANT)
    assert str(said[0]) in {str(hit["id"]) for hit in recalled}
    again = client.undo_correction(said[0], tenant_id=TENANT, reason="again", actor="dana")
    assert again.status == "replay"
    events = [(e.event, e.actor) for e in client.history(said[0], tenant_id=TENANT).events]
    assert ("restored", "dana") in events
    # a person's correction is not undone this way, and a live memory has nothing to undo
    with pytest.raises(Conflict, match="not superseded"):
        client.undo_correction(spaces, tenant_id=TENANT, reason="x")


def test_what_is_not_certain_is_kept_as_a_conflict_and_shown(client, workers, db) -> None:  # type: ignore[no-untyped-def]
    # given a constraint and a preference
    workers("owner")
    constraint = client.record(
        "关键约束二：认证模块的 JWT 迁移不能影响线上用户会话，必须灰度发布。",
        tenant_id=TENANT,
        task_id="auth",
        session_id="d1",
        user_id="li",
        type="decision",
        timestamp=START,
    ).memory_id
    brief = client.record(
        "Keep the weekly status report brief, in bullet points for the whole team.",
        tenant_id=TENANT,
        task_id="auth",
        session_id="d1",
        user_id="li",
        type="preference",
        timestamp=START + timedelta(minutes=1),
    ).memory_id
    client.wait_until_settled([constraint, brief])

    # when the user later asks about the constraint, and states a preference that may
    # contradict the earlier one
    question = client.record(
        "认证模块的JWT迁移有什么约束？",
        tenant_id=TENANT,
        task_id="auth",
        session_id="d9",
        user_id="li",
        type="decision",
        timestamp=START + timedelta(days=8),
    ).memory_id
    detailed = client.record(
        "I want detailed weekly status reports.",
        tenant_id=TENANT,
        task_id="auth",
        session_id="d9",
        user_id="li",
        type="preference",
        timestamp=START + timedelta(days=8, minutes=1),
    ).memory_id
    client.wait_until_settled([question, detailed])
    wait_for(
        lambda: one(db, "SELECT count(*) = 2 FROM memories WHERE id = ANY(%s) AND linked_at "
                    "IS NOT NULL", [question, detailed]),
        "the new memories linked",
    )  # fmt: skip

    # then nothing is superseded: the question replaces no constraint
    assert one(db, "SELECT count(*) FROM memories WHERE status = 'corrected'") == 0
    assert client.get(constraint, tenant_id=TENANT).status == "stored"
    # and the two preferences are recorded as a conflict, listed by history()
    assert one(
        db,
        "SELECT status FROM memory_conflicts WHERE older_id = %s AND newer_id = %s",
        brief,
        detailed,
    ) == "open"  # fmt: skip
    events = [(e.event, e.related_id) for e in client.history(brief, tenant_id=TENANT).events]
    assert ("conflict", detailed) in events
    # and context() shows both side by side, with their dates
    context = client.context(
        "auth", "how should the weekly status report be written", 4000, tenant_id=TENANT,
        session_id="d10",
    )  # fmt: skip
    assert "conflicts with, both kept" in context.text
    assert "[2026-11-02] Keep the weekly status report brief" in context.text
    assert "[2026-11-10] I want detailed weekly status reports." in context.text
