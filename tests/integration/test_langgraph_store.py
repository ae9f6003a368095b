"""``MemharnessStore`` against the real PostgreSQL, and a real worker for semantic search.

LangGraph ships no installable conformance suite for stores; these tests re-state, in our own
code, the behaviours its published store tests check (libs/checkpoint/tests/test_store.py,
libs/checkpoint-postgres/tests/test_store.py and test_async_store.py): batch order and
results, get/put/update/delete, search by prefix (segment boundaries, empty prefix, labels
with LIKE metacharacters or newlines), filters with operators, pagination, namespace
listing (prefix, suffix, wildcards, max_depth, limit/offset), namespace validation, TTL
(refresh, omit_expired, pagination before the limit), and vector search (ranking, update,
index=False, per-put fields, filters, pagination, edge-case queries, non-ASCII).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

pytestmark = pytest.mark.integration

pytest.importorskip("langgraph.store.base")

INDEX = {"fields": ["text"]}


@pytest.fixture
def make_store(client, db) -> Iterator[Any]:  # type: ignore[no-untyped-def]
    from memharness.integrations.langgraph_store import MemharnessStore

    opened: list[Any] = []

    def make(tenant_id: str = "acme", **kwargs: Any) -> Any:
        store = MemharnessStore(client, tenant_id=tenant_id, **kwargs)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


def _namespaces(store: Any, prefix: tuple[str, ...]) -> set[tuple[str, ...]]:
    return {item.namespace for item in store.search(prefix, limit=100)}


def test_get_put_update_delete_and_batch_order(make_store) -> None:  # type: ignore[no-untyped-def]
    from langgraph.store.base import GetOp, Item, ListNamespacesOp, PutOp, SearchOp

    store = make_store()
    namespace = ("test", "documents")
    store.put(namespace, "doc1", {"title": "Test Document", "content": "Hello, World!"})
    item = store.get(namespace, "doc1")
    assert item is not None
    assert (item.namespace, item.key) == (namespace, "doc1")
    assert item.value == {"title": "Test Document", "content": "Hello, World!"}

    store.put(namespace, "doc1", {"title": "Updated Document", "content": "Hello, Updated!"})
    updated = store.get(namespace, "doc1")
    assert updated is not None
    assert updated.value == {"title": "Updated Document", "content": "Hello, Updated!"}
    assert updated.updated_at > item.updated_at
    assert updated.created_at == item.created_at
    assert store.get(("test", "other_documents"), "doc1") is None
    store.delete(namespace, "doc1")
    assert store.get(namespace, "doc1") is None
    store.delete(namespace, "never-there")  # deleting nothing is not an error

    # a batch answers in the order of its ops
    store.put(("test", "foo"), "key1", {"data": "value1"})
    store.put(("test", "bar"), "key2", {"data": "value2"})
    results = store.batch(
        [
            GetOp(("test", "foo"), "key1"),
            PutOp(("test", "bar"), "key2", {"data": "value2"}),
            SearchOp(("test",), filter={"data": "value1"}, limit=10, offset=0),
            ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
            GetOp(("test",), "key3"),
        ]
    )
    assert isinstance(results[0], Item) and results[0].value == {"data": "value1"}
    assert results[1] is None
    assert [i.key for i in results[2]] == ["key1"]
    assert set(results[3]) == {("test", "foo"), ("test", "bar")}
    assert results[4] is None
    # puts, a delete by a None value, and gets in one batch, applied in order
    results = store.batch(
        [
            PutOp(("test",), "key1", {"data": "value1"}),
            PutOp(("test",), "key2", {"data": "value2"}),
            PutOp(("test",), "key2", None),
            GetOp(("test",), "key1"),
            GetOp(("test",), "key2"),
        ]
    )
    assert results[:3] == [None, None, None]
    assert results[3].value == {"data": "value1"}
    assert results[4] is None


def test_search_by_prefix_filter_and_page(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store()
    for namespace, key, value in [
        (("test", "docs"), "doc1", {"title": "First", "author": "Alice", "score": 4.5}),
        (("test", "docs"), "doc2", {"title": "Second", "author": "Bob", "score": 3.0}),
        (("test", "images"), "img1", {"title": "Image", "author": "Alice", "tags": ["a", "b"]}),
    ]:
        store.put(namespace, key, value)

    assert len(store.search(("test",))) == 3
    docs = store.search(("test", "docs"))
    assert {i.key for i in docs} == {"doc1", "doc2"}
    assert all(i.score is None for i in docs)
    assert {i.key for i in store.search(("test",), filter={"author": "Alice"})} == {"doc1", "img1"}
    assert len(store.search(("test",), limit=2)) == 2
    assert len(store.search(("test",), offset=2)) == 1
    # newest first
    assert [i.key for i in store.search(("test",))] == ["img1", "doc2", "doc1"]
    # operators, several conditions, lists compared whole
    assert [i.key for i in store.search(("test",), filter={"score": {"$gt": 3.2}})] == ["doc1"]
    assert [i.key for i in store.search(("test",), filter={"score": {"$lte": 3.0}})] == ["doc2"]
    assert {i.key for i in store.search(("test",), filter={"author": {"$ne": "Bob"}})} == {
        "doc1",
        "img1",
    }
    both = {"score": {"$gte": 3.0}, "author": "Alice"}
    assert [i.key for i in store.search(("test",), filter=both)] == ["doc1"]
    assert [i.key for i in store.search(("test",), filter={"tags": ["a", "b"]})] == ["img1"]
    assert store.search(("test",), filter={"tags": ["a"]}) == []

    # prefixes stop at label boundaries; an empty prefix is the whole tenant
    for namespace in [("foo",), ("foo", "child"), ("foobar",), ("foo2",), ("user_1",), ("a%b",)]:
        store.put(namespace, "k", {"v": 1})
    store.put(("userX1",), "k", {"v": 1})
    store.put(("axxb",), "k", {"v": 1})
    assert _namespaces(store, ("foo",)) == {("foo",), ("foo", "child")}
    assert _namespaces(store, ("foobar",)) == {("foobar",)}
    assert _namespaces(store, ("fo",)) == set()
    assert _namespaces(store, ("user_1",)) == {("user_1",)}
    assert _namespaces(store, ("a%b",)) == {("a%b",)}
    assert len(_namespaces(store, ())) == 10


def test_list_namespaces(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store()
    assert store.list_namespaces() == []
    namespaces = [
        ("a", "b", "c"),
        ("a", "b", "d", "e"),
        ("a", "b", "d", "i"),
        ("a", "b", "f"),
        ("a", "c", "f"),
        ("b", "a", "f"),
        ("users", "123"),
        ("users", "456", "settings"),
        ("admin", "users", "789"),
        ("uid", "users", "alice"),
        ("uid", "users", "malice"),
        ("users", "alice\n"),
    ]
    for index, namespace in enumerate(namespaces):
        store.put(namespace, f"id_{index}", {"data": index})

    assert len(store.list_namespaces()) == len(namespaces)
    assert store.list_namespaces(prefix=("a", "b")) == [
        ("a", "b", "c"),
        ("a", "b", "d", "e"),
        ("a", "b", "d", "i"),
        ("a", "b", "f"),
    ]
    assert store.list_namespaces(suffix=("f",)) == [
        ("a", "b", "f"),
        ("a", "c", "f"),
        ("b", "a", "f"),
    ]
    assert store.list_namespaces(prefix=("a",), suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f")]
    assert store.list_namespaces(prefix=("a", "b"), max_depth=3) == [
        ("a", "b", "c"),
        ("a", "b", "d"),
        ("a", "b", "f"),
    ]
    assert store.list_namespaces(prefix=("a", "b"), limit=2) == [
        ("a", "b", "c"),
        ("a", "b", "d", "e"),
    ]
    assert store.list_namespaces(prefix=("a", "b"), offset=2) == [
        ("a", "b", "d", "i"),
        ("a", "b", "f"),
    ]
    assert store.list_namespaces(prefix=("a", "*", "f")) == [("a", "b", "f"), ("a", "c", "f")]
    assert store.list_namespaces(suffix=("*", "f")) == [
        ("a", "b", "f"),
        ("a", "c", "f"),
        ("b", "a", "f"),
    ]
    assert store.list_namespaces(prefix=("nonexistent",)) == []
    assert store.list_namespaces(prefix=("users", "123")) == [("users", "123")]
    assert store.list_namespaces(prefix=("*", "users"), suffix=("*", "settings")) == []
    assert store.list_namespaces(suffix=("alice",)) == [("uid", "users", "alice")]
    assert store.list_namespaces(prefix=("uid", "*", "alice")) == [("uid", "users", "alice")]
    assert ("a", "b") in store.list_namespaces(max_depth=2)
    assert all(len(ns) <= 2 for ns in store.list_namespaces(max_depth=2))
    for index in range(20):
        store.put(("namespace", f"sub_{index:02d}"), "k", {"v": index})
    page = store.list_namespaces(prefix=("namespace",), limit=5, offset=15)
    assert page == [("namespace", f"sub_{i:02d}") for i in range(15, 20)]


def test_namespaces_and_bad_input_are_refused_with_the_field(make_store) -> None:  # type: ignore[no-untyped-def]
    from langgraph.store.base import InvalidNamespaceError, PutOp

    from pipelines.errors import InvalidInput

    store = make_store()
    doc = {"foo": "bar"}
    for bad in [(), ("the", "thing.about"), ("some", "fun", ""), ("langgraph", "foo")]:
        with pytest.raises(InvalidNamespaceError):
            store.put(bad, "foo", doc)
        with pytest.raises(InvalidNamespaceError):
            asyncio.run(store.aput(bad, "foo", doc))
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(("a.b",), "k", doc)])
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp((), "k", doc)])
    # "langgraph" is refused as the root of a put, not inside, nor past the public API
    store.put(("foo", "langgraph", "foo"), "bar", doc)
    assert store.get(("foo", "langgraph", "foo"), "bar").value == doc
    store.batch([PutOp(("langgraph", "foo"), "bar", doc)])
    assert store.search(("langgraph", "foo"))[0].value == doc

    cases: list[tuple[str, Any]] = [
        ("key", lambda: store.put(("ns",), "k" * 2000, doc)),
        ("key", lambda: store.put(("ns",), "", doc)),
        ("value", lambda: store.batch([PutOp(("ns",), "k", ["not", "a", "dict"])])),  # type: ignore[arg-type]
        ("value", lambda: store.put(("ns",), "k", {"when": object()})),
        ("value", lambda: store.put(("ns",), "k", {"nul": "a\x00b"})),
        ("value", lambda: store.put(("ns",), "k", {"nan": float("nan")})),
        ("ttl", lambda: store.put(("ns",), "k", doc, ttl=-1)),
        # PostgreSQL's interval cannot hold these: the INSERT used to fail
        ("ttl", lambda: store.put(("ns",), "k", doc, ttl=float("inf"))),
        ("ttl", lambda: store.put(("ns",), "k", doc, ttl=1e12)),
        ("limit", lambda: store.search(("ns",), limit=-1)),
        ("filter", lambda: store.search(("ns",), filter={"a": {"$regex": "x"}})),
        ("max_depth", lambda: store.list_namespaces(max_depth=0)),
    ]
    for field, call in cases:
        with pytest.raises(InvalidInput) as caught:
            call()
        assert caught.value.field == field
    assert store.get(("ns",), "k") is None  # nothing half-written


def test_ttl_refresh_omit_expired_and_sweep(make_store, db) -> None:  # type: ignore[no-untyped-def]
    store = make_store(ttl={"omit_expired": True, "refresh_on_read": True})

    def expire_now(namespace: tuple[str, ...], key: str) -> None:
        db.execute(
            "UPDATE langgraph_items SET expires_at = now() - interval '1 minute' "
            "WHERE namespace = %s AND key = %s",
            (list(namespace), key),
        )

    def expires_at(namespace: tuple[str, ...], key: str) -> Any:
        return db.execute(
            "SELECT expires_at FROM langgraph_items WHERE namespace = %s AND key = %s",
            (list(namespace), key),
        ).fetchone()[0]

    store.put(("omit", "expired"), "e", {"data": "gone"}, ttl=10)
    store.put(("omit", "control"), "c", {"data": "keep"}, ttl=None)
    expire_now(("omit", "expired"), "e")
    assert store.get(("omit", "expired"), "e") is None
    assert store.get(("omit", "control"), "c") is not None
    assert store.search(("omit", "expired")) == []
    assert ("omit", "expired") not in store.list_namespaces(prefix=("omit",))
    assert ("omit", "control") in store.list_namespaces(prefix=("omit",))

    # refresh extends live items only, on get and on search
    for key in ("expired", "live_get", "live_search"):
        store.put(("refresh",), key, {"k": key}, ttl=10)
    expire_now(("refresh",), "expired")
    before = {key: expires_at(("refresh",), key) for key in ("expired", "live_get", "live_search")}
    assert store.get(("refresh",), "expired", refresh_ttl=True) is None
    assert store.get(("refresh",), "live_get", refresh_ttl=True) is not None
    store.search(("refresh",), filter={"k": "live_search"}, refresh_ttl=True)
    assert expires_at(("refresh",), "expired") == before["expired"]
    assert expires_at(("refresh",), "live_get") > before["live_get"]
    assert expires_at(("refresh",), "live_search") > before["live_search"]
    unrefreshed = expires_at(("refresh",), "live_get")
    store.get(("refresh",), "live_get", refresh_ttl=False)
    assert expires_at(("refresh",), "live_get") == unrefreshed

    # expired rows are left out before the page is cut
    for key, seconds_ago in {"a": 1, "x": 2, "b": 3, "c": 4}.items():
        store.put(("page",), key, {"k": key}, ttl=10)
        db.execute(
            "UPDATE langgraph_items SET updated_at = now() - %s * interval '1 second' "
            "WHERE namespace = %s AND key = %s",
            (seconds_ago, ["page"], key),
        )
    expire_now(("page",), "x")
    assert [i.key for i in store.search(("page",), limit=2)] == ["a", "b"]
    assert [i.key for i in store.search(("page",), limit=2, offset=2)] == ["c"]

    # without omit_expired an unswept row is still read; the sweep deletes it
    keeping = make_store()
    assert keeping.get(("page",), "x", refresh_ttl=False) is not None
    assert store.sweep_ttl() == 3
    assert keeping.get(("page",), "x") is None
    assert keeping.get(("omit", "control"), "c") is not None


def test_async_twins_and_tenant_isolation(make_store) -> None:  # type: ignore[no-untyped-def]
    from langgraph.store.base import GetOp, PutOp, SearchOp

    acme = make_store("acme")
    globex = make_store("globex")

    async def agent() -> list[Any]:
        await acme.aput(("users", "alice"), "prefs", {"theme": "dark"})
        await globex.aput(("users", "alice"), "prefs", {"theme": "light"})
        got = await acme.aget(("users", "alice"), "prefs")
        found = await acme.asearch(("users",))
        listed = await acme.alist_namespaces(prefix=("users",))
        batch = await acme.abatch(
            [
                PutOp(("users", "bob"), "prefs", {"theme": "blue"}),
                GetOp(("users", "bob"), "prefs"),
                SearchOp(("users",), filter={"theme": "light"}),
            ]
        )
        await acme.adelete(("users", "alice"), "prefs")
        gone = await acme.aget(("users", "alice"), "prefs")
        return [got, found, listed, batch, gone]

    got, found, listed, batch, gone = asyncio.run(agent())
    assert got.value == {"theme": "dark"}
    assert [i.value for i in found] == [{"theme": "dark"}]
    assert listed == [("users", "alice")]
    assert batch[1].value == {"theme": "blue"}
    assert batch[2] == []  # globex's item is not acme's
    assert gone is None
    # the other tenant's item survived acme's delete, and sees nothing of acme
    assert globex.get(("users", "alice"), "prefs").value == {"theme": "light"}
    assert globex.get(("users", "bob"), "prefs") is None
    assert globex.list_namespaces() == [("users", "alice")]


def _settle(client, db) -> None:  # type: ignore[no-untyped-def]
    ids = [
        row[0]
        for row in db.execute("SELECT memory_id FROM langgraph_items WHERE memory_id IS NOT NULL")
    ]
    client.wait_until_settled(ids, timeout_s=60)


def test_semantic_search_runs_through_our_recall(make_store, client, workers, db) -> None:  # type: ignore[no-untyped-def]
    # given: the store owner (a real worker) and a store that embeds the "text" field
    workers("write")
    store = make_store(index=INDEX)
    docs = {
        "doc1": {
            "text": "The red apple orchard harvest starts in September",
            "color": "red",
            "score": 4.5,
        },
        "doc2": {"text": "The red sports car needs new brake pads", "color": "red", "score": 3.0},
        "doc3": {
            "text": "The green apple orchard needs more irrigation",
            "color": "green",
            "score": 4.0,
        },
        "doc4": {
            "text": "The blue delivery car was parked behind the depot",
            "color": "blue",
            "score": 3.5,
        },
    }
    for key, value in docs.items():
        store.put(("test",), key, value)
    store.put(("test",), "plain", {"text": "apple orchard harvest car brake"}, index=False)
    _settle(client, db)

    # then: each indexed item is one memory of the namespace's task, naming its item
    rows = db.execute(
        "SELECT m.task_id, m.metadata->'langgraph_store'->>'key', m.status "
        "FROM langgraph_items i JOIN memories m ON m.id = i.memory_id ORDER BY 2"
    ).fetchall()
    assert rows == [("lg/test", f"doc{n}", "stored") for n in range(1, 5)]

    # when searching: the recall's ranking, scored, within the filter
    apples = store.search(("test",), query="apple orchard harvest", filter={"color": "red"})
    assert [i.key for i in apples] == ["doc1", "doc2"]
    assert apples[0].score is not None
    cars = store.search(("test",), query="car brake pads", filter={"color": "red"})
    assert cars[0].key == "doc2"
    priced = store.search(("test",), query="delivery car depot", filter={"score": {"$gt": 3.2}})
    assert [i.key for i in priced][:1] == ["doc4"]
    assert {i.key for i in priced} == {"doc1", "doc3", "doc4"}
    both = store.search(("test",), query="apple", filter={"score": {"$gte": 4.0}, "color": "green"})
    assert [i.key for i in both] == ["doc3"]
    # the unindexed item comes after the scored ones, unscored
    everything = store.search(("test",), query="apple orchard harvest", limit=10)
    assert everything[-1].key == "plain" and everything[-1].score is None
    assert len(everything) == 5
    page1 = store.search(("test",), query="orchard", limit=2)
    page2 = store.search(("test",), query="orchard", limit=2, offset=2)
    assert len(page1) == 2 and len(page2) == 2
    assert not {i.key for i in page1} & {i.key for i in page2}
    # edge-case queries still answer
    assert len(store.search(("test",), query="")) == 5
    assert len(store.search(("test",), query="test " * 100)) == 5
    assert len(store.search(("test",), query="test!@#$%^&*()")) == 5

    # when an item changes, its memory is corrected: the old version is never recalled again
    before = store.search(("test",), query="September harvest", limit=1)
    assert before[0].key == "doc1"
    (old_memory,) = db.execute(
        "SELECT memory_id FROM langgraph_items WHERE key = 'doc1'"
    ).fetchone()
    store.put(
        ("test",), "doc1", {"text": "Quarterly invoice for the ledger migration", "color": "red"}
    )
    _settle(client, db)
    (new_memory,) = db.execute(
        "SELECT memory_id FROM langgraph_items WHERE key = 'doc1'"
    ).fetchone()
    assert db.execute(
        "SELECT status, corrected_by FROM memories WHERE id = %s", (old_memory,)
    ).fetchone() == ("corrected", new_memory)
    after = store.search(("test",), query="September harvest")
    assert after[0].key != "doc1"
    assert all(i.score is None or i.score < before[0].score for i in after if i.key == "doc1")
    assert store.search(("test",), query="quarterly invoice ledger")[0].key == "doc1"
    # and a deleted item's memory is erased (a tombstone without its text)
    (deleted_memory,) = db.execute(
        "SELECT memory_id FROM langgraph_items WHERE key = 'doc3'"
    ).fetchone()
    store.delete(("test",), "doc3")
    assert (
        db.execute(
            "SELECT status, content FROM memories WHERE id = %s", (deleted_memory,)
        ).fetchone()[0]
        == "forgotten"
    )
    assert "doc3" not in {i.key for i in store.search(("test",), query="green apple irrigation")}
    # put back with the same text, it gets a new memory (the erased one stays erased)
    store.put(("test",), "doc3", docs["doc3"])
    (back_memory,) = db.execute(
        "SELECT memory_id FROM langgraph_items WHERE key = 'doc3'"
    ).fetchone()
    assert back_memory != deleted_memory

    # per-put fields, non-ASCII text, and the tenant-wide recall past 8 namespaces
    assert store.search(("test",), query="green apple irrigation")[0].key == "doc3"
    zebra_text = "The zebra played the xylophone at the zoo concert on Friday"
    plain_text = "Shipping labels are printed by the warehouse team every morning"
    store.put(("fields",), "doc5", {"key0": zebra_text, "key1": plain_text}, index=["key0"])
    store.put(("fields",), "doc6", {"key0": plain_text, "key1": zebra_text}, index=["key0"])
    intl = [
        "这是一个关于数据库迁移计划的中文句子，下周开始执行",
        "これはデータベース移行計画についての日本語の文です",
        "Это русский текст о плане миграции базы данных на следующей неделе",
    ]
    for index, text in enumerate(intl):
        store.put(("intl",), str(index), {"text": text})
    for index in range(9):
        store.put(("many", f"n{index}"), "k", {"text": f"note number {index} about topic{index}"})
    _settle(client, db)
    zebra = store.search(("fields",), query="zebra xylophone zoo concert")
    assert zebra[0].key == "doc5" and zebra[0].score is not None
    assert zebra[1].score is None or zebra[1].score < zebra[0].score
    statuses = db.execute(
        "SELECT i.key, m.status FROM langgraph_items i JOIN memories m ON m.id = i.memory_id "
        "WHERE i.namespace = '{intl}'"
    ).fetchall()
    for index, text in enumerate(intl):
        assert store.search(("intl",), query=text)[0].key == str(index), statuses
    hit = store.search(("many",), query="topic7", limit=1)
    assert hit[0].namespace == ("many", "n7") and hit[0].score is not None
