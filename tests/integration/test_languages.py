"""The same two weeks of a project in English, Chinese and mixed Chinese/English, through
real workers with the offline adapters and the hashing embedder: what is kept at write,
what a keyword query finds, how summaries fare in their quality samples, what becomes
semantic knowledge, what the causal links reach, the task summary, and a 12k context.

Each run prints one line of figures (``figures[lang]``) so the languages can be compared
side by side (``pytest -s``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from pipelines.read.budget import Partition
from tests.integration.test_cognition import END, START, one, run_sweep, settle_quality, wait_for
from tests.support import project_history, project_history_zh
from workers.app import app

pytestmark = pytest.mark.integration

BACKGROUND_QUEUES = ("maintenance", "compress", "quality", "consolidate")


@dataclass(frozen=True)
class Language:
    history: Callable[[datetime], list[dict[str, Any]]]
    tenant: str
    task: str
    chatter: tuple[str, ...]
    keyword_query: str
    keyword_hit: str
    preference: str
    stack: str
    traversal_query: str
    affected: str


LANGUAGES = {
    "en": Language(
        history=project_history.history,
        tenant=project_history.TENANT,
        task=project_history.TASK,
        chatter=("Thanks, that helps!", "Great, sounds good.", "Cool, talk tomorrow."),
        keyword_query="Which storage did we choose for sessions?",
        keyword_hit="Redis for session storage",
        preference="brief answers",
        stack="snake_case",
        traversal_query="What does the delay of the auth module affect?",
        affected="mobile release",
    ),
    "zh": Language(
        history=project_history_zh.history_zh,
        tenant=project_history_zh.TENANT,
        task=project_history_zh.TASK,
        chatter=tuple(project_history_zh.CHATTER["zh"]),
        keyword_query="支付模块的负责人是谁？",
        keyword_hit="支付模块负责人是张工",
        preference="要点式",
        stack="TypeScript",
        traversal_query="认证模块延期会影响哪些模块？",
        affected="支付模块的联调",
    ),
    "mixed": Language(
        history=project_history_zh.history_mixed,
        tenant=project_history_zh.TENANT,
        task=project_history_zh.TASK,
        chatter=tuple(project_history_zh.CHATTER["mixed"]),
        keyword_query="Payment module 的 owner 是谁？",
        keyword_hit="owner 定为张工",
        preference="要点式",
        stack="TypeScript",
        traversal_query="auth module 延期会影响哪些模块？",
        affected="Payment module 的联调",
    ),
}


def quality_figures(db: psycopg.Connection[Any]) -> dict[str, Any]:
    rows = db.execute(
        "SELECT m.level, q.verdict, count(*) FROM quality_reports q "
        "JOIN memories m ON m.id = q.summary_id GROUP BY 1, 2"
    ).fetchall()
    by_level: dict[int, dict[str, int]] = {}
    for level, verdict, n in rows:
        by_level.setdefault(int(level), {})[str(verdict)] = int(n)
    return {
        f"l{level}_pass_rate": round(v.get("keep", 0) / max(1, sum(v.values())), 3)
        for level, v in sorted(by_level.items())
    } | {"checked": sum(sum(v.values()) for v in by_level.values())}


@pytest.mark.parametrize("lang", sorted(LANGUAGES))
def test_two_weeks_in_each_language(client, workers, db, settings, lang: str) -> None:  # type: ignore[no-untyped-def]
    spec = LANGUAGES[lang]
    workers("write")
    workers("background", BACKGROUND_QUEUES)

    # when an agent records the two weeks in this language
    items = spec.history(START)
    receipts = client.record_many(items)
    accepted = [r.memory_id for r in receipts if r.status == "accepted"]
    client.wait_until_settled(accepted, timeout_s=90)

    # then no meaningful turn was discarded at write: only the chatter may go
    fates = dict(db.execute("SELECT id, status FROM memories WHERE tenant_id = %s", (spec.tenant,)))
    lost = [
        item["content"]
        for item, receipt in zip(items, receipts, strict=True)
        if not item["content"].endswith(spec.chatter)
        and (receipt.status == "dropped" or fates.get(receipt.memory_id) == "discarded")
    ]
    assert lost == []

    # and a keyword query in the language finds its memory, in a 12k-token context
    context = client.context(spec.task, spec.keyword_query, 12_000, tenant_id=spec.tenant)
    retrieved = context.partition(Partition.RETRIEVED_MEMORY)
    assert spec.keyword_hit in retrieved.text, retrieved.text
    assert context.budget_tokens == 12_000 and context.total_tokens <= 12_000

    # when compression and its quality sampling run until nothing is left to promote
    wait_for(
        lambda: one(
            db, "SELECT count(*) = 0 FROM memories WHERE status = 'stored' AND linked_at IS NULL"
        ),
        "every stored memory linked",
        90,
    )
    for _ in range(10):
        stats = run_sweep(db, "memory.compress.sweep", "compress", END)
        settle_quality(db)
        if not any(k.endswith("_created") for k in stats):
            break

    # then sessions became L1 and L2 summaries that kept their facts
    levels = dict(
        db.execute("SELECT level || ':' || status, count(*) FROM memories GROUP BY 1").fetchall()
    )
    assert levels.get("1:stored", 0) > 0 and levels.get("2:stored", 0) > 0
    figures = quality_figures(db)

    # when the task is complete, its L3 summary is made and checked
    client.complete_task(spec.tenant, spec.task)
    wait_for(
        lambda: one(
            db,
            "SELECT count(*) FROM quality_reports q JOIN memories m ON m.id = q.summary_id "
            "WHERE m.level = 3",
        ),
        "the L3 task summary's check",
        90,
    )

    # then its first version survived its check on its own merit, smaller than its sources
    l3 = db.execute(
        "SELECT m.version, m.status, q.verdict, q.reason, (m.metadata->>'source_words')::int, "
        "(m.metadata->>'summary_words')::int, (m.metadata->>'annotate_only')::boolean "
        "FROM memories m JOIN quality_reports q ON q.summary_id = m.id WHERE m.level = 3"
    ).fetchall()
    assert len(l3) == 1, l3
    version, status, verdict, reason, source_words, summary_words, annotate_only = l3[0]
    assert (version, status, verdict, reason) == (1, "stored", "keep", "passed")
    assert not annotate_only and summary_words < source_words
    figures["l3_ratio"] = round(source_words / summary_words, 3)

    # when the nightly consolidation runs
    app.send_task(
        "memory.consolidate.nightly", kwargs={"now": END.isoformat()}, queue="consolidate"
    )
    wait_for(
        lambda: one(
            db,
            "SELECT count(*) FROM cognition_runs WHERE kind = 'consolidate' "
            "AND finished_at IS NOT NULL",
        ),
        "consolidation",
    )

    # then the recurring preference and the stack are semantic knowledge
    knowledge = [row[0] for row in db.execute("SELECT content FROM semantic_memories")]
    assert any(spec.preference in text for text in knowledge), knowledge
    assert any(spec.stack in text for text in knowledge), knowledge

    # and the causal links reach across modules
    from workers.db import open_pool
    from workers.read.affected import affected_by

    pool = open_pool(settings, name="test-languages")
    try:
        answer = affected_by(pool, spec.tenant, spec.traversal_query)
    finally:
        pool.close()
    assert any(spec.affected in a.content for a in answer.affected), answer

    links = dict(db.execute("SELECT kind, count(*) FROM memory_links GROUP BY 1").fetchall())
    figures |= {
        "lang": lang,
        "turns": len(items),
        "stored": one(db, "SELECT count(*) FROM memories WHERE level = 0 AND status = 'stored'"),
        "dropped": sum(r.status == "dropped" for r in receipts),
        "links": links,
        "semantic": len(knowledge),
        "checked_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    print(f"figures[{lang}] {json.dumps(figures, ensure_ascii=False, sort_keys=True)}")
