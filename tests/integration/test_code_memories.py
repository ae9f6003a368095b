"""Code memories through a real owner worker: written with a code vector of their own, found
by a question in code's terms through recall() and context(), and gone with every vector
when forgotten.

The write worker owns the embedded store (qdrant-edge) and uses the hashing embedder, which
reads ``fetch_user_by_id`` and ``fetchUserById`` as two unrelated words: only the code
vector (identifiers split into words) lets a question naming one find code naming the other.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from pipelines.index.vectors import CODE_VECTOR
from workers.adapters.vector_edge import EdgeIndex

pytestmark = pytest.mark.integration

TENANT = "shop"
TASK = "api"
SNIPPET = """def fetch_user_by_id(user_id: int) -> User:
    row = db.execute("SELECT * FROM users WHERE id = %s", (user_id,)).fetchone()
    return User.from_row(row)"""
CODE = [
    SNIPPET,
    """func NewRedisCache(addr string, ttl time.Duration) *RedisCache {
	return &RedisCache{client: redis.NewClient(&redis.Options{Addr: addr}), ttl: ttl}
}""",
    "export const MAX_UPLOAD_BYTES = 10 * 1024 * 1024;",
]
CHATTER = [
    "Where is the user profile page implemented? It fetches the user twice on load.",
    "We implemented the lookup of orders by id last sprint, and it is fast now.",
    "Bob asked where the cache is implemented and who reviews it.",
    "The profile page should show the user's avatar and their last orders.",
]
QUESTION = "Where is fetchUserById implemented?"


def _record_all(client) -> dict[str, uuid.UUID]:  # type: ignore[no-untyped-def]
    start = datetime.now(UTC) - timedelta(hours=1)
    ids: dict[str, uuid.UUID] = {}
    for index, (text, modality) in enumerate(
        [(text, "code") for text in CODE] + [(text, "text") for text in CHATTER]
    ):
        receipt = client.record(
            text,
            tenant_id=TENANT,
            task_id=TASK,
            session_id="s-1",
            timestamp=start + timedelta(minutes=index),
            modality=modality,
            type="observation" if modality == "code" else None,
        )
        assert receipt.status == "accepted"
        ids[text] = receipt.memory_id
    settled = client.wait_until_settled(ids.values())
    assert settled.get("stored") == len(ids), settled
    return ids


def test_a_code_memory_is_found_by_a_code_question_and_forgotten_whole(  # type: ignore[no-untyped-def]
    client, workers, db, qdrant_path
):
    # given code memories among chatter, stored by the owner with the default code embedder
    owner = workers("write")
    ids = _record_all(client)
    snippet = str(ids[SNIPPET])

    # when a question naming the function the other way round is asked through recall()
    hits = client.recall(QUESTION, tenant_id=TENANT, task_id=TASK, limit=5)

    # then the snippet comes first
    assert hits[0]["id"] == snippet, [h["content"][:40] for h in hits]

    # and through context(): it leads the retrieval, found through its code vector
    context = client.context(TASK, QUESTION, 8_000, tenant_id=TENANT)
    assert context.retrieval is not None
    first = context.retrieval.candidates[0]
    assert first.memory.id == snippet
    assert "code:literal" in first.sources
    assert "fetch_user_by_id" in context.text

    # and a question in plain words does not reach the code side
    plain = client.context(TASK, "Who reviews the cache?", 8_000, tenant_id=TENANT)
    assert plain.retrieval is not None
    assert all("code:literal" not in c.sources for c in plain.retrieval.candidates)

    # when the owner stops and the store is opened: code memories carry a code vector
    owner.stop(timeout_s=10)
    store = EdgeIndex(qdrant_path)
    try:
        alias = f"{client.settings.collection_prefix}_episodic"
        points = {p.id: p for p in store.retrieve(alias, list(ids.values()))}
        assert all(points[ids[text]].code is not None for text in CODE)
        assert all(points[ids[text]].code is None for text in CHATTER)
        code_vector = points[ids[SNIPPET]].code
        assert code_vector is not None
        nearest = store.search(alias, code_vector, tenant_id=TENANT, limit=1, using=CODE_VECTOR)
        assert nearest[0].id == ids[SNIPPET]
    finally:
        store.close()

    # when the snippet is forgotten (a new owner serves the request)
    workers("write")
    receipt = client.forget(tenant_id=TENANT, memory_id=ids[SNIPPET], reason="test")
    assert client.wait_until_forgotten(receipt, tenant_id=TENANT).status == "done"

    # then no read finds it, by code or by content
    assert snippet not in {h["id"] for h in client.recall(QUESTION, tenant_id=TENANT, limit=10)}
    again = client.context(TASK, QUESTION, 8_000, tenant_id=TENANT)
    assert again.retrieval is not None
    assert snippet not in {c.memory.id for c in again.retrieval.candidates}
    assert "fetch_user_by_id" not in again.text


def test_with_code_vectors_off_the_text_path_alone_misses_the_snippet(client, workers, db):  # type: ignore[no-untyped-def]
    # given the same memories stored by an owner whose code vectors are off
    workers("write", env={"MEMHARNESS_CODE_EMBEDDER": "off"})
    ids = _record_all(client)

    # when the same question is asked through recall()
    hits = client.recall(QUESTION, tenant_id=TENANT, task_id=TASK, limit=5)

    # then the content vectors alone rank the chatter that shares the question's words first
    assert hits
    assert hits[0]["id"] != str(ids[SNIPPET])


def test_code_vectors_are_made_again_by_a_re_embed_run(client, workers, db, settings):  # type: ignore[no-untyped-def]
    # given code memories among chatter, stored by an owner
    owner = workers("owner", ("write", "embed", "recall"))
    ids = _record_all(client)
    owner.stop(timeout_s=10)

    # when the owner restarts with another embedder (96-d) and a write starts the re-embed run
    owner = workers(
        "owner-96",
        ("write", "embed", "recall"),
        env={"MEMHARNESS_EMBED_DIM": "96", "MEMHARNESS_INDEX_BATCH_SIZE": "10"},
    )
    late = client.record(
        "def cache_key(user_id: int) -> str:\n    return f'user:{user_id}'",
        tenant_id=TENANT,
        task_id=TASK,
        session_id="s-2",
        modality="code",
    )
    client.wait_until_settled([late.memory_id], timeout_s=60)
    deadline = time.monotonic() + 90
    finished = None
    while time.monotonic() < deadline:
        finished = db.execute(
            "SELECT finished_at IS NOT NULL FROM cognition_runs WHERE kind = 'reembed'"
        ).fetchone()
        if finished is not None and finished[0]:
            break
        time.sleep(0.2)
    assert finished is not None and finished[0]

    # then a code question still finds the snippet first, from the new generation
    hits = client.recall(QUESTION, tenant_id=TENANT, task_id=TASK, limit=5)
    assert hits[0]["id"] == str(ids[SNIPPET])
    owner.stop(timeout_s=10)

    # and every code memory there has a 96-d code vector, the chatter none
    alias = f"{settings.collection_prefix}_episodic"
    store = EdgeIndex(settings.qdrant_path)
    try:
        assert store.embedding_version(alias) == "hashing-v2/96"
        points = {p.id: p for p in store.retrieve(alias, [*ids.values(), late.memory_id])}
        for memory_id in [*(ids[text] for text in CODE), late.memory_id]:
            code = points[memory_id].code
            assert code is not None and len(code) == 96
        assert all(points[ids[text]].code is None for text in CHATTER)
    finally:
        store.close()
