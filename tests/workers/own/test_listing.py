"""Listing memories and knowledge through ``MemoryClient`` on the real database: keyset pages
newest first, the filters, tombstones without content, and every bad argument named."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from pipelines.errors import InvalidInput
from pipelines.records import INSTANT_RANGE, content_hash

T0 = datetime(2026, 11, 1, 8, 0, tzinfo=UTC)


def add_memory(
    db: psycopg.Connection[Any],
    tenant: str,
    task: str,
    minute: int,
    *,
    type: str = "decision",
    status: str = "stored",
    level: int = 0,
    content: str | None = None,
) -> uuid.UUID:
    memory_id = uuid.uuid4()
    text = "" if status == "forgotten" else (content or f"{tenant} {task} note {minute}")
    db.execute(
        "INSERT INTO memories (id, tenant_id, task_id, session_id, ts, type, content, "
        "content_hash, status, level, change_reason, forgotten_at) "
        "VALUES (%s, %s, %s, 's1', %s, %s, %s, %s, %s, %s, %s, %s)",
        (
            memory_id, tenant, task, T0 + timedelta(minutes=minute), type, text,
            content_hash(text or str(memory_id)), status, level,
            "user asked" if status == "forgotten" else None,
            T0 if status == "forgotten" else None,
        ),
    )  # fmt: skip
    return memory_id


@pytest.fixture
def store(db: psycopg.Connection[Any]) -> dict[str, uuid.UUID]:
    ids = {f"m{i}": add_memory(db, "acme", "t1" if i % 2 else "t2", i) for i in range(7)}
    ids["gone"] = add_memory(db, "acme", "t1", 20, status="forgotten")
    ids["old"] = add_memory(db, "acme", "t1", 21, status="corrected")
    ids["sum"] = add_memory(db, "acme", "t1", 22, level=1, type="observation")
    ids["other"] = add_memory(db, "globex", "t1", 30)
    return ids


@pytest.fixture
def client(db, redis_client):  # type: ignore[no-untyped-def]
    from config import Settings
    from memharness import MemoryClient

    with MemoryClient(Settings()) as memory_client:
        yield memory_client


def test_pages_run_newest_first_and_end_with_no_cursor(client, store) -> None:  # type: ignore[no-untyped-def]
    # when the tenant's stored memories are read two at a time
    seen: list[uuid.UUID] = []
    cursor = None
    pages = 0
    while True:
        page = client.list_memories("acme", limit=2, cursor=cursor)
        seen += [item.id for item in page.items]
        pages += 1
        cursor = page.next_cursor
        if cursor is None:
            break
    # then every stored row came once, newest first, and no other tenant's or status's row
    expected = [store["sum"], *(store[f"m{i}"] for i in reversed(range(7)))]
    assert seen == expected
    assert pages == 4


def test_filters_narrow_the_listing(client, store) -> None:  # type: ignore[no-untyped-def]
    t1 = client.list_memories("acme", task_id="t1", level=0).items
    assert [i.id for i in t1] == [store["m5"], store["m3"], store["m1"]]
    assert [i.id for i in client.list_memories("acme", level="L1").items] == [store["sum"]]
    assert [i.id for i in client.list_memories("acme", type="observation").items] == [store["sum"]]
    since = (T0 + timedelta(minutes=5)).isoformat()
    assert [i.id for i in client.list_memories("acme", since=since, level=0).items] == [
        store["m6"],
        store["m5"],
    ]
    corrected = client.list_memories("acme", status="corrected").items
    assert [i.id for i in corrected] == [store["old"]]


def test_status_any_lists_tombstones_without_their_content(client, store) -> None:  # type: ignore[no-untyped-def]
    items = client.list_memories("acme", status="any", limit=500).items
    assert len(items) == 10
    gone = next(i for i in items if i.id == store["gone"])
    assert gone.status == "forgotten" and gone.content == "" and gone.summary is None
    assert gone.change_reason == "user asked" and gone.forgotten_at == T0
    assert gone.task_id == "t1" and gone.session_id == "s1"


def test_a_cursor_only_resumes_the_listing_it_came_from(client, store) -> None:  # type: ignore[no-untyped-def]
    cursor = client.list_memories("acme", limit=1).next_cursor
    assert cursor
    for call in (
        lambda: client.list_memories("globex", limit=1, cursor=cursor),
        lambda: client.list_memories("acme", limit=1, cursor=cursor, task_id="t1"),
        lambda: client.list_semantic("acme", cursor=cursor),
    ):
        with pytest.raises(InvalidInput) as info:
            call()
        assert info.value.field == "cursor" and "another" in info.value.message
    for bad in ("not-a-cursor", "x" * 500, cursor[:-4]):
        with pytest.raises(InvalidInput) as info:
            client.list_memories("acme", cursor=bad)
        assert info.value.field == "cursor"


def test_bad_filters_name_the_field_and_limit(client, store) -> None:  # type: ignore[no-untyped-def]
    cases: list[tuple[dict[str, Any], str, str | None]] = [
        ({"limit": 0}, "limit", "500"),
        ({"limit": 501}, "limit", "500"),
        ({"type": "dream"}, "type", None),
        ({"status": "lost"}, "status", None),
        ({"level": 5}, "level", "0-4"),
        ({"since": "yesterday"}, "since", "ISO 8601 with offset"),
        ({"since": "2026-11-01T08:00:00"}, "since", "ISO 8601 with offset"),
        ({"since": "9999-12-31T23:59:59-12:00"}, "since", INSTANT_RANGE),
        ({"task_id": "no spaces allowed"}, "task_id", "128 chars"),
    ]
    for filters, field, limit in cases:
        with pytest.raises(InvalidInput) as info:
            client.list_memories("acme", **filters)
        assert (info.value.field, info.value.limit) == (field, limit), filters
    with pytest.raises(InvalidInput) as info:
        client.list_semantic("acme", kind="hunch")
    assert info.value.field == "kind"
    with pytest.raises(InvalidInput) as info:
        client.list_memories("bad tenant")
    assert info.value.field == "tenant_id"


def test_semantic_knowledge_lists_live_rows_by_default(client, db, store) -> None:  # type: ignore[no-untyped-def]
    rows = []
    for i, (kind, status) in enumerate(
        [("preference", "active"), ("convention", "needs_confirmation"), ("preference", "retired")]
    ):
        row_id = uuid.uuid4()
        db.execute(
            "INSERT INTO semantic_memories (id, tenant_id, content, confidence, source_ids, "
            "status, kind, created_at) VALUES (%s, 'acme', %s, 0.7, %s, %s, %s, %s)",
            (row_id, f"knowledge {i}", [store["m1"]], status, kind, T0 + timedelta(hours=i)),
        )
        rows.append(row_id)
    live = client.list_semantic("acme")
    assert [i.id for i in live.items] == [rows[1], rows[0]] and live.next_cursor is None
    assert live.items[1].source_ids == [store["m1"]]
    assert [i.id for i in client.list_semantic("acme", status="any").items] == rows[::-1]
    assert [i.id for i in client.list_semantic("acme", kind="preference").items] == [rows[0]]
    first = client.list_semantic("acme", status="any", limit=2)
    rest = client.list_semantic("acme", status="any", limit=2, cursor=first.next_cursor)
    assert [i.id for i in rest.items] == [rows[0]] and rest.next_cursor is None
    assert client.list_semantic("globex").items == []


def test_the_cli_lists_a_page_as_json(store, capsys) -> None:  # type: ignore[no-untyped-def]
    from memharness.cli import main

    assert main(["list", "--tenant", "acme", "--task", "t1", "--limit", "2", "--json"]) == 0
    page = json.loads(capsys.readouterr().out)
    assert [item["id"] for item in page["items"]] == [str(store["sum"]), str(store["m5"])]
    cursor = page["next_cursor"]
    assert main(["list", "--tenant", "acme", "--task", "t1", "--cursor", cursor, "--json"]) == 0
    rest = json.loads(capsys.readouterr().out)
    assert [item["id"] for item in rest["items"]] == [str(store["m3"]), str(store["m1"])]
    assert main(["list", "--tenant", "acme", "--limit", "0", "--json"]) == 2
    assert "limit" in capsys.readouterr().err
    assert main(["list-semantic", "--tenant", "acme", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"items": [], "next_cursor": None}


@pytest.mark.parametrize("stored_ts", ["10000-01-01 11:59:59+00", "infinity", "-infinity"])
def test_a_row_with_an_instant_no_datetime_holds_is_still_listed_got_and_exported(
    client, db, store, stored_ts: str
) -> None:  # type: ignore[no-untyped-def]
    # given a row whose timestamp PostgreSQL holds and a Python datetime cannot
    db.execute("UPDATE memories SET ts = %s::timestamptz WHERE id = %s", (stored_ts, store["m3"]))

    # when the tenant is listed (tombstones too), the row is got and the tenant exported
    listed = client.list_memories("acme", status="any", limit=500)
    got = client.get(store["m3"], tenant_id="acme")
    exported = [json.loads(line) for chunk in client.export_chunks("acme")
                for line in chunk.splitlines() if line]  # fmt: skip

    # then each answers, the row at the nearest instant a datetime holds, its siblings intact
    edge = datetime.max if not stored_ts.startswith("-") else datetime.min
    assert got is not None and got.timestamp == edge.replace(tzinfo=UTC)
    assert store["m3"] in {item.id for item in listed.items}
    assert len(listed.items) == 10  # every acme row of the fixture
    memories = [line for line in exported if line["kind"] == "memory"]
    assert str(store["m3"]) in {line["id"] for line in memories} and len(memories) == 10
    assert exported[-1]["kind"] == "end"
