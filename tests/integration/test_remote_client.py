"""What only the remote client meets, against a real ``memharness serve``: refused keys,
another tenant, a server that is not there; and the LangGraph store over it."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from memharness import AuthError, RemoteMemoryClient, Unavailable
from tests.integration.test_clients import SCOPE, TENANT, api_server, remote_key  # noqa: F401
from tests.integration.test_http_api import Server, spare_port

pytestmark = pytest.mark.integration


def test_refused_keys_and_other_tenants_raise_auth_errors(
    api_server: Server,  # noqa: F811
    db: Any,
    redis_client: Any,
) -> None:
    with (
        RemoteMemoryClient(api_server.url, "mh_not_a_key") as stranger,
        pytest.raises(AuthError) as unknown,
    ):
        stranger.record("We bill in cents.", **SCOPE)
    assert (unknown.value.status, unknown.value.field) == (401, "authorization")
    with RemoteMemoryClient(api_server.url, remote_key(db, scopes="read")) as reader:
        with pytest.raises(AuthError) as lacking:
            reader.record("We bill in cents.", **SCOPE)
        assert (lacking.value.status, lacking.value.field) == (403, "scope")
        assert reader.tenant_id == TENANT
    with RemoteMemoryClient(api_server.url, remote_key(db, scopes="read,write")) as writer:
        # a body naming another tenant is the server's refusal; a read's is the client's
        with pytest.raises(AuthError) as posted:
            writer.record("We bill in cents.", **{**SCOPE, "tenant_id": "globex"})
        with pytest.raises(AuthError) as read:
            writer.history(uuid.uuid4(), tenant_id="globex")
        assert {posted.value.field, read.value.field} == {"tenant_id"}
        with pytest.raises(AuthError) as everything:
            writer.forget(tenant_id=TENANT, reason="bye", whole_tenant=True)
        assert everything.value.field == "scope"


def test_a_server_that_is_not_there_is_unavailable() -> None:
    with (
        RemoteMemoryClient(f"http://127.0.0.1:{spare_port()}", "mh_any") as memory,
        pytest.raises(Unavailable) as down,
    ):
        memory.record("We bill in cents.", **SCOPE)
    assert down.value.retry_after_s is None


def test_a_langgraph_store_over_the_remote_client_puts_and_searches(
    api_server: Server,  # noqa: F811
    db: Any,
    redis_client: Any,
    workers: Any,
    settings: Any,
) -> None:
    from memharness.integrations.langgraph_store import MemharnessStore

    workers("write")
    with (
        RemoteMemoryClient(api_server.url, remote_key(db, scopes="read,write")) as remote,
        MemharnessStore(
            remote, tenant_id=TENANT, index={"fields": ["text"]}, settings=settings
        ) as store,
    ):
        store.put(("docs",), "apples", {"text": "The red apple orchard harvest starts in May"})
        store.put(("docs",), "cars", {"text": "The blue delivery car needs new brake pads"})
        store.put(("docs",), "apples", {"text": "The red apple orchard harvest starts in June"})
        found = store.search(("docs",), query="apple orchard harvest")
        assert [item.key for item in found][:1] == ["apples"] and found[0].score is not None
        assert found[0].value["text"].endswith("June")
        assert store.get(("docs",), "cars") is not None
        store.delete(("docs",), "cars")
        assert [item.key for item in store.search(("docs",), query="brake pads")] == ["apples"]
    # the memories went through the API: the key's prefix is the correction's actor
    actors = db.execute(
        "SELECT actor FROM memory_events WHERE event IN ('corrected', 'superseded')"
    ).fetchall()
    assert actors and all(actor.startswith("api:") for (actor,) in actors)


def test_the_docs_remote_example_runs(
    api_server: Server,  # noqa: F811
    db: Any,
    redis_client: Any,
    workers: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "python-client.md").read_text()
    section = page.split("**From Python, with a URL and a key.**", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    workers("write")
    key = remote_key(db, scopes="read,write")
    exec(  # the documented example, pointed at this test's server and key
        code.replace("http://127.0.0.1:8080", api_server.url).replace("mh_...", key), {}
    )
    printed = capsys.readouterr().out
    assert "cents" in printed and printed.rstrip().endswith("limit 100")


def test_the_async_remote_client_has_the_sync_ones_calls(
    api_server: Server,  # noqa: F811
    db: Any,
    redis_client: Any,
    workers: Any,
) -> None:
    from memharness import AsyncRemoteMemoryClient
    from pipelines.errors import NotFound
    from pipelines.state.models import TaskState

    workers("write")
    key = remote_key(db)

    async def agent() -> None:
        async with AsyncRemoteMemoryClient(api_server.url, key) as memory:
            made = await memory.record_many(
                [{**SCOPE, "content": "Preference: reports go out as PDF.", "type": "preference"},
                 {**SCOPE, "content": "We decided to bill in cents because floats lose money."}]
            )  # fmt: skip
            ids = [r.memory_id for r in made]
            assert await memory.wait_until_settled(ids, timeout_s=60) == {"stored": 2}
            got = await memory.get(ids[1], tenant_id=TENANT)
            assert got is not None and "cents" in got.content
            hits = await memory.recall("bill in cents", tenant_id=TENANT)
            assert str(ids[1]) in {hit["id"] for hit in hits}
            context = await memory.context("billing", "How do we bill?", 4000, tenant_id=TENANT)
            assert "cents" in context.text
            assert await memory.explain(context, tenant_id=TENANT)
            fixed = await memory.correct(ids[0], "Preference: HTML.", tenant_id=TENANT, reason="r")
            history = await memory.history(ids[0], tenant_id=TENANT)
            assert history.current_id == fixed.memory_id
            receipt = await memory.forget(tenant_id=TENANT, reason="asked", memory_id=ids[1])
            assert (await memory.forget_status(receipt.request_id, tenant_id=TENANT)).request_id
            page = await memory.list_memories(TENANT, status="any")
            assert len(page.items) == 3
            assert (await memory.stats(TENANT))["memories_stored"] >= 1
            state = TaskState.model_validate({"phase": "execution", "iteration": 2})
            saved = await memory.checkpoint(TENANT, "parser", state)
            resumed = await memory.resume(TENANT, "parser")
            assert resumed is not None and resumed.checkpoint.checkpoint_id == saved
            assert await memory.resume(TENANT, "never") is None
            with pytest.raises(NotFound):
                await memory.history(uuid.uuid4(), tenant_id=TENANT)
            with pytest.raises(AuthError):
                await memory.get(ids[0], tenant_id="globex")

    asyncio.run(agent())
