"""Export and import through real services: a tenant written by a real store owner is
exported, imported into a fresh database served by a second owner, re-embedded there, and
answers the same recall; re-imports change nothing; bad files import nothing."""

from __future__ import annotations

import io
import json
import random
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from memharness.bench.checkpoint import sample_state
from pipelines.errors import Conflict, InvalidInput
from pipelines.records import content_hash
from workers.db.jobs import UNINDEX_JOB

pytestmark = pytest.mark.integration

TENANT = "acme"
TOPICS = [
    "ledger", "invoice", "billing", "outbox", "migration", "postgres", "redis", "queue",
    "auth", "token", "cache", "deploy", "schema", "index", "backup", "webhook", "refund",
]  # fmt: skip
VERBS = ["We decided to rework", "Fixed a bug in", "Reviewed", "Refactored", "Measured latency of"]
TABLES = ("memories", "memory_links", "semantic_memories", "memory_events", "checkpoints", "jobs")
T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def wait_for(check: Callable[[], Any], what: str, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def one(db: psycopg.Connection[Any], query: str, *params: Any) -> Any:
    row = db.execute(query, params).fetchone()
    return row[0] if row else None


def table_counts(db: psycopg.Connection[Any]) -> dict[str, int]:
    return {table: one(db, f"SELECT count(*) FROM {table}") for table in TABLES}


def history(n: int) -> list[dict[str, Any]]:
    rng = random.Random(7)
    items = []
    for i in range(n):
        a, b, *more = rng.sample(TOPICS, 2 + rng.randrange(4))
        extra = f" It also touched {' and '.join(more)}." if more else ""
        items.append(
            {
                "content": f"{VERBS[i % len(VERBS)]} the {a} {b} path, ticket ACME-{i}.{extra}",
                "tenant_id": TENANT,
                "task_id": f"task-{i % 3}",
                "session_id": f"s{i % 3}-{i // 30}",
                "timestamp": T0 + timedelta(minutes=i),
            }
        )
    return items


def queries(n: int) -> list[str]:
    rng = random.Random(11)
    return [" ".join(rng.sample(TOPICS, 2)) for _ in range(n)]


def recall_all(client: Any, texts: list[str]) -> list[list[tuple[str, float]]]:
    """Top-10 per query: ids and scores, in order (recall orders hits tied on score by id,
    so two installs holding the same vectors answer the same list)."""
    return [
        [(hit["id"], hit["score"]) for hit in client.recall(text, tenant_id=TENANT, limit=10)]
        for text in texts
    ]


def own_the_history(db: psycopg.Connection[Any], client: Any, ids: list[uuid.UUID]) -> None:
    """A correction, a tombstone, their events, knowledge and a checkpoint, written as the
    owning and cognition code write them; the replaced and forgotten rows leave the index."""
    old, new, gone = ids[0], ids[1], ids[2]
    db.execute(
        "UPDATE memories SET status = 'corrected', corrected_by = %s, change_reason = 'typo' "
        "WHERE id = %s",
        (new, old),
    )
    db.execute("UPDATE memories SET supersedes = %s, version = 2 WHERE id = %s", (old, new))
    db.execute(
        "UPDATE memories SET status = 'forgotten', content = '', summary = NULL, "
        "metadata = '{}', content_hash = %s, forgotten_at = now(), change_reason = 'asked' "
        "WHERE id = %s",
        (content_hash(str(gone)), gone),
    )
    db.execute(
        "INSERT INTO memory_events (tenant_id, memory_id, event, version, related_id, reason, "
        "actor) VALUES (%s, %s, 'corrected', 1, %s, 'typo', 'agent'), "
        "(%s, %s, 'forgotten', 1, NULL, 'asked', 'agent')",
        (TENANT, old, new, TENANT, gone),
    )
    db.execute(
        "INSERT INTO jobs (kind, memory_id) VALUES (%s, %s), (%s, %s)",
        (UNINDEX_JOB, old, UNINDEX_JOB, gone),
    )
    for kind, sources in (("preference", ids[3:6]), ("convention", ids[6:8])):
        db.execute(
            "INSERT INTO semantic_memories (id, tenant_id, scope, content, confidence, "
            "source_ids, status, kind, reason) VALUES (%s, %s, 'tenant', %s, 0.8, %s, "
            "'active', %s, 'recurred')",
            (uuid.uuid4(), TENANT, f"The team keeps a {kind} about ledgers", sources, kind),
        )
    base = sample_state()
    for n in range(2):
        client.checkpoint(TENANT, "task-0", base.with_changes(iteration=base.iteration + n))


def test_a_round_trip_gives_the_same_recall_on_a_fresh_install(  # type: ignore[no-untyped-def]
    client, workers, db, settings, tmp_path: Path
) -> None:
    from config import Settings
    from memharness import MemoryClient
    from workers.db import drop_database, migrate
    from workers.publish import publish
    from workers.queues import TaskName

    # given 150 memories over three tasks, stored, linked and unindexed where replaced
    owner = workers("owner")
    receipts = client.record_many(history(150))
    client.wait_until_settled([r.memory_id for r in receipts], timeout_s=60)
    stored = [
        row[0]
        for row in db.execute(
            "SELECT id FROM memories WHERE status = 'stored' ORDER BY ts"
        ).fetchall()
    ]
    assert len(stored) > 100
    own_the_history(db, client, stored)
    publish(TaskName.DRAIN_EMBEDDINGS, app=client._app)
    wait_for(
        lambda: one(
            db,
            "SELECT count(*) = 0 FROM jobs WHERE status <> 'done' OR memory_id IN "
            "(SELECT id FROM memories WHERE status = 'stored' AND linked_at IS NULL)",
        ),
        "every job done and every memory linked",
    )
    assert one(db, "SELECT count(*) FROM memory_links") > 0
    texts = queries(100)
    before = recall_all(client, texts)
    assert sum(len(hits) for hits in before) > 500

    # when the tenant is exported
    out = io.StringIO()
    exported = client.export(TENANT, out)
    lines = out.getvalue().splitlines(keepends=True)
    assert exported.memory == one(db, "SELECT count(*) FROM memories")
    assert exported.link > 0 and exported.semantic == 2 and exported.checkpoint == 2
    assert exported.event == 2 and len(lines) == exported.total + 2
    owner.stop(timeout_s=10)  # one broker: the second install's owner takes the queues

    # and imported into a fresh database served by its own owner and vector store
    target_url = make_conninfo(settings.database_url, dbname=f"{_dbname(settings)}_import")
    migrate(target_url)
    try:
        target_env = {
            "MEMHARNESS_DATABASE_URL": target_url,
            "MEMHARNESS_QDRANT_PATH": str(tmp_path / "qdrant-import"),
        }
        workers("owner-import", env=target_env)
        target_settings = Settings(database_url=target_url, qdrant_path=tmp_path / "qdrant-import")
        with (
            MemoryClient(target_settings) as target,
            psycopg.connect(target_url, autocommit=True) as target_db,
        ):
            progress: list[int] = []
            counts = target.import_file(lines, progress=lambda done, _: progress.append(done))
            assert counts.inserted == exported and counts.read == exported
            assert counts.embed_jobs == len(stored) - 2 and progress

            # then the target's owner re-embeds every stored memory with its embedder
            wait_for(
                lambda: one(
                    target_db,
                    "SELECT count(*) = 0 FROM memories WHERE status = 'stored' "
                    "AND embedding_version IS NULL",
                ),
                "every imported memory embedded",
            )
            # and once the owner's index check finds no point missing (until then a recall
            # says degraded and fuses PostgreSQL's keyword matches into its hits)
            wait_for(
                lambda: not target.recall(texts[0], tenant_id=TENANT, limit=10).degraded,
                "the target's index complete",
            )
            # recall answers exactly as the source did, query by query
            after = recall_all(target, texts)
            assert after == before

            # and a checkpoint resumes where the source's did
            resumed = target.resume(TENANT, "task-0")
            assert resumed is not None and resumed.checkpoint.state.iteration == (
                sample_state().iteration + 1
            )

            # when the same file is imported again, nothing changes
            snapshot = table_counts(target_db)
            again = target.import_file(lines)
            assert again.inserted.total == 0 and again.embed_jobs == 0
            assert table_counts(target_db) == snapshot
    finally:
        drop_database(target_url)


def _dbname(settings: Any) -> str:
    from psycopg.conninfo import conninfo_to_dict

    return str(conninfo_to_dict(settings.database_url)["dbname"])


# -- refusals: no workers needed ---------------------------------------------------------------


def seed(db: psycopg.Connection[Any], client: Any, n: int) -> list[uuid.UUID]:
    """``n`` stored memories (enough to flush more than one import batch), links, a
    semantic row, an event and a checkpoint, inserted as the write and cognition paths do."""
    ids = [uuid.uuid4() for _ in range(n)]
    with db.cursor() as cur:
        cur.executemany(
            "INSERT INTO memories (id, tenant_id, task_id, session_id, ts, type, content, "
            "content_hash, status, embedding_version, metadata) "
            "VALUES (%s, %s, 'task-1', 's1', %s, 'decision', %s, %s, 'stored', 'h/64', "
            "'{\"n\": 1}')",
            [
                (mid, TENANT, T0 + timedelta(seconds=i), f"note {i} about billing",
                 content_hash(f"note {i} about billing"))
                for i, mid in enumerate(ids)
            ],
        )  # fmt: skip
        cur.executemany(
            "INSERT INTO memory_links (src_id, dst_id, kind, weight, reason, tenant_id) "
            "VALUES (%s, %s, 'causal', 0.9, 'because', %s)",
            [(ids[i], ids[i + 1], TENANT) for i in range(5)],
        )
    db.execute(
        "INSERT INTO semantic_memories (id, tenant_id, content, confidence, source_ids, kind) "
        "VALUES (%s, %s, 'bills monthly', 0.7, %s, 'pattern')",
        (uuid.uuid4(), TENANT, ids[:3]),
    )
    db.execute(
        "INSERT INTO memory_events (tenant_id, memory_id, event, reason) "
        "VALUES (%s, %s, 'summary_stale', 'source corrected')",
        (TENANT, ids[0]),
    )
    client.checkpoint(TENANT, "task-1", sample_state())
    return ids


def exported_lines(client: Any) -> list[str]:
    out = io.StringIO()
    client.export(TENANT, out)
    return out.getvalue().splitlines(keepends=True)


def empty_tables(db: psycopg.Connection[Any]) -> None:
    db.execute(f"TRUNCATE {', '.join(TABLES)} CASCADE")


def test_bad_files_import_nothing_and_a_good_one_imports_once(client, db) -> None:  # type: ignore[no-untyped-def]
    # given an export of 620 memories (two import batches) and an empty install
    ids = seed(db, client, 620)
    hashes = dict(db.execute("SELECT id, content_hash FROM memories").fetchall())
    lines = exported_lines(client)
    assert len(lines) == 1 + 620 + 5 + 1 + 1 + 1 + 1
    empty_tables(db)

    # when the last memory line is malformed, after a first batch was written
    last = 620
    bad = json.loads(lines[last])
    bad["ts"] = "2026-11-02 09:00"
    broken = [*lines[:last], json.dumps(bad) + "\n", *lines[last + 1 :]]
    with pytest.raises(InvalidInput) as info:
        client.import_file(broken)
    # then the error names the line and field, and nothing was imported
    assert info.value.field == f"line {last + 1}: memory.ts"
    assert table_counts(db) == dict.fromkeys(TABLES, 0)

    # when the file is cut short (no end line), nothing is imported either
    with pytest.raises(InvalidInput, match="truncated"):
        client.import_file(lines[:-1])
    with pytest.raises(InvalidInput) as info:
        client.import_file(lines[:300])
    assert info.value.field == "line 301: end"
    assert table_counts(db) == dict.fromkeys(TABLES, 0)

    # when the whole file is imported
    counts = client.import_file(lines)
    # then every row is back, hashed as the write path hashes, queued for embedding
    assert counts.inserted.model_dump() == {
        "memory": 620, "link": 5, "semantic": 1, "event": 1, "checkpoint": 1,
    }  # fmt: skip
    assert counts.embed_jobs == 620
    assert dict(db.execute("SELECT id, content_hash FROM memories").fetchall()) == hashes
    assert one(db, "SELECT count(*) FROM memories WHERE search_tsv IS NULL") == 0
    assert one(db, "SELECT count(*) FROM memories WHERE embedding_version IS NOT NULL") == 0
    assert one(db, "SELECT count(*) FROM jobs WHERE kind = 'embed'") == 620
    assert one(db, "SELECT count(*) FROM memory_events WHERE event = 'imported'") == 621
    assert client.resume(TENANT, "task-1") is not None
    assert client.get(ids[7], tenant_id=TENANT).metadata == {"n": 1}

    # and importing it again changes nothing
    snapshot = table_counts(db)
    again = client.import_file(lines)
    assert again.inserted.total == 0 and again.read.total == snapshot["memories"] + 8
    assert table_counts(db) == snapshot


def test_ids_of_another_tenant_are_refused_without_saying_whose(client, db) -> None:  # type: ignore[no-untyped-def]
    # given acme's export, and the same file relabelled for another tenant
    seed(db, client, 10)
    lines = exported_lines(client)
    header = {**json.loads(lines[0]), "tenant_id": "globex"}
    relabelled = [json.dumps(header) + "\n", *lines[1:]]
    before = table_counts(db)

    # when it is imported, the first id acme holds is refused, and nothing lands
    with pytest.raises(Conflict) as info:
        client.import_file(relabelled)
    assert info.value.field == "line 2: memory.id"
    assert "acme" not in str(info.value)
    assert table_counts(db) == before
    assert one(db, "SELECT count(*) FROM memories WHERE tenant_id = 'globex'") == 0


def test_the_cli_exports_and_imports_a_file(client, db, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from memharness.cli import main

    seed(db, client, 12)
    path = tmp_path / "acme.jsonl"
    assert main(["export", "--tenant", TENANT, "--out", str(path)]) == 0
    report = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert report["exported"]["memory"] == 12
    assert path.read_text().count("\n") == 1 + 12 + 5 + 1 + 1 + 1 + 1

    empty_tables(db)
    assert main(["import", str(path), "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)
    assert counts["inserted"]["memory"] == 12 and counts["embed_jobs"] == 12

    cut = tmp_path / "cut.jsonl"
    cut.write_text("".join(path.read_text().splitlines(keepends=True)[:-1]))
    assert main(["import", str(cut), "--json"]) == 2
    assert "truncated" in capsys.readouterr().err
    assert main(["import", str(tmp_path / "missing.jsonl")]) == 2
