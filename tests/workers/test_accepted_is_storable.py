"""Whatever the write checks accept, every later step can hold: random schema-valid writes go
through record → the drain → list, get, export and the context task's body (JSON in, JSON
out, as the store owner runs it), and nothing fails, stays pending or goes missing.

The audit's case was one such value: ``"9999-12-31T23:59:59-12:00"`` was accepted, stored as
year 10000, and broke the drain, the listing, get and export of its tenant."""

from __future__ import annotations

import itertools
import json
import string
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from config import Settings
from memharness.client import MemoryClient
from pipelines.errors import InvalidInput
from pipelines.records import MemoryType
from workers.clients import Clients
from workers.read.context import context_answer
from workers.read.request import check_context_call, layout_of
from workers.write.drain import drain_writes

# Text a caller may send: any Unicode scalar but NUL (which the checks refuse) and lone
# surrogates (which are not Unicode).
TEXT = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=120
)
CONTENT = TEXT.filter(str.strip)
OFFSETS = st.timedeltas(min_value=-timedelta(hours=23, minutes=59),
                        max_value=timedelta(hours=23, minutes=59)).map(timezone)  # fmt: skip
INSTANTS = st.one_of(
    st.datetimes(timezones=OFFSETS),
    # the edges, where a zone moves the UTC instant out of a datetime's range
    st.sampled_from([datetime.max, datetime.min]).flatmap(
        lambda edge: OFFSETS.map(lambda zone: edge.replace(tzinfo=zone))
    ),
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)  # fmt: skip
IDS = st.text(string.ascii_letters + string.digits + "._:@/+-", min_size=1, max_size=20).filter(
    lambda s: s[0].isalnum()
)
WRITE = st.fixed_dictionaries(
    {"content": CONTENT},
    optional={
        "timestamp": INSTANTS,
        "type": st.sampled_from([*MemoryType, None]),
        "modality": st.sampled_from(["text", "code"]),
        "metadata": st.dictionaries(TEXT, JSON, max_size=3),
        "user_id": IDS,
        "agent_id": IDS,
        "idempotency_key": CONTENT.filter(lambda s: len(s) <= 200),
    },
)
_tenants = itertools.count()


@pytest.fixture
def ctx(db, redis_client, qdrant_path, settings: Settings) -> Iterator[Clients]:  # type: ignore[no-untyped-def]
    context = Clients(settings)
    yield context
    context.close()


@pytest.fixture
def client(db, redis_client, settings: Settings) -> Iterator[MemoryClient]:  # type: ignore[no-untyped-def]
    with MemoryClient(settings) as memory_client:
        yield memory_client


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(writes=st.lists(WRITE, min_size=1, max_size=4))
def test_every_accepted_write_is_drained_listed_exported_and_recalled(
    ctx: Clients, client: MemoryClient, db: Any, writes: list[dict[str, Any]]
) -> None:
    tenant = f"prop-{next(_tenants)}"
    scope = {"tenant_id": tenant, "task_id": "t", "session_id": "s"}
    accepted = []
    for write in writes:
        try:
            accepted.append(client.record(**{**scope, **write}))
        except InvalidInput as exc:
            # refused up front is fine; what is refused names a field of the request
            assert exc.field.split(".")[0].split("[")[0] in {*write, "content"}, exc
    kept = {str(r.memory_id) for r in accepted if r.status == "accepted"}

    # the drain finishes every job: none pending, none held running
    while drain_writes(ctx).more:
        pass
    rows = db.execute(
        "SELECT m.id::text, m.status, j.status FROM memories m LEFT JOIN jobs j "
        "ON j.memory_id = m.id WHERE m.tenant_id = %s",
        (tenant,),
    ).fetchall()
    assert {row[0] for row in rows} == kept
    assert all(row[1] != "pending" and row[2] in (None, "done", "dead") for row in rows), rows

    # every read of the tenant answers, and holds every row
    listed = client.list_memories(tenant, status="any", limit=500)
    assert {str(item.id) for item in listed.items} == kept
    for memory_id in kept:
        assert client.get(memory_id, tenant_id=tenant) is not None
    # JSON Lines end at "\n" only: a U+0085 or U+2028 inside a string is part of its line
    text = "".join(client.export_chunks(tenant))
    lines = [json.loads(line) for line in text.split("\n") if line]
    assert lines[-1]["kind"] == "end"
    assert {line["id"] for line in lines if line["kind"] == "memory"} == kept
    call = check_context_call(
        tenant_id=tenant, task_id="t", query=writes[0]["content"], budget_tokens=4000,
        counter=ctx.counter, layout=layout_of(ctx.settings),
        content_max_bytes=ctx.settings.content_max_bytes,
    )  # fmt: skip
    answer = context_answer(ctx, call.to_json(), lambda *_: None)
    assert "error" not in answer and json.dumps(answer, allow_nan=False)
