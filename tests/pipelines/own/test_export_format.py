"""The export format: every line kind round-trips, a bad line is named by number and field,
and the reader refuses files out of order, cut short or with lines missing."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from pipelines.errors import InvalidInput
from pipelines.own.export_format import (
    SCHEMA,
    CheckpointLine,
    EndLine,
    EventLine,
    ExportReader,
    HeaderLine,
    LineCounts,
    LinkLine,
    MemoryLine,
    SemanticLine,
    dump_line,
    parse_line,
)

AT = datetime(2026, 11, 3, 9, 30, 1, 123456, tzinfo=UTC)
A, B = uuid.uuid4(), uuid.uuid4()


def header() -> HeaderLine:
    return HeaderLine(schema_id=SCHEMA, tenant_id="acme", exported_at=AT, embedding_version="h/64")


def memory(**changes: Any) -> MemoryLine:
    fields: dict[str, Any] = {
        "id": A,
        "task_id": "t1",
        "session_id": "s1",
        "ts": AT,
        "type": "decision",
        "content": "We chose PostgreSQL for the ledger.",
        "summary": "PostgreSQL for the ledger",
        "status": "stored",
        "metadata": {"ticket": "ACME-1"},
        "parent_ids": [B],
        "created_at": AT,
        "updated_at": AT,
    }
    return MemoryLine(**{**fields, **changes})


def file_of(*lines: Any, counts: dict[str, int] | None = None) -> list[str]:
    body = [dump_line(line) for line in lines]
    if counts is not None:
        body.append(dump_line(EndLine(counts=LineCounts(**counts))))
    return [dump_line(header()), *body]


def refused(lines: list[str]) -> InvalidInput:
    with pytest.raises(InvalidInput) as info:
        list(ExportReader(lines))
    return info.value


def test_every_line_kind_round_trips_through_its_text() -> None:
    body = b"\x00\x01checkpoint bytes\xff"
    lines = [
        header(),
        memory(),
        LinkLine(src_id=A, dst_id=B, link_kind="causal", weight=0.5, reason="x", created_at=AT),
        SemanticLine(
            id=B, content="Prefers tabs", confidence=0.8, status="active", source_ids=[A],
            knowledge_kind="preference", created_at=AT, updated_at=AT,
        ),
        EventLine(memory_id=A, event="corrected", version=2, related_id=B, reason="typo", at=AT),
        CheckpointLine(
            id=A, task_id="t1", created_at=AT, format_version=1, **CheckpointLine.encode_body(body)
        ),
        EndLine(counts=LineCounts(memory=1, link=1, semantic=1, event=1, checkpoint=1)),
    ]  # fmt: skip
    for number, line in enumerate(lines, start=1):
        text = dump_line(line)
        assert "\n" not in text
        assert parse_line(text, number) == line
    assert json.loads(dump_line(header()))["schema"] == SCHEMA
    checkpoint = parse_line(dump_line(lines[5]), 6)
    assert isinstance(checkpoint, CheckpointLine) and checkpoint.body() == body


def test_a_memory_line_holds_no_vector_hash_or_search_vector() -> None:
    fields = json.loads(dump_line(memory()))
    assert not {"content_hash", "search_tsv", "vector", "embedding_version"} & set(fields)
    assert {"version", "parent_ids", "superseded_by", "supersedes", "level", "status"} <= set(
        fields
    )


def test_a_malformed_line_is_named_by_its_number_and_field() -> None:
    good = json.loads(dump_line(memory()))
    cases = {
        "line 17: memory.ts": {**good, "ts": "2026-11-03T09:30:01"},  # naive
        # year 10000 in UTC: PostgreSQL would store it and no read could load it back
        "line 17: memory.created_at": {**good, "created_at": "9999-12-31T23:59:59-12:00"},
        "line 17: memory.importance": {**good, "importance": 1.5},
        "line 17: memory.task_id": {**good, "task_id": "has space"},
        "line 17: memory.surprise": {**good, "surprise": 1},
        "line 17: memory.status": {**good, "status": "lost"},
        "line 17: kind": {**good, "kind": "vector"},
    }
    for field, data in cases.items():
        with pytest.raises(InvalidInput) as info:
            parse_line(json.dumps(data), 17)
        assert info.value.field == field, (field, str(info.value))
    with pytest.raises(InvalidInput) as info:
        parse_line('{"kind": "memory", ', 4)
    assert info.value.field == "line 4" and "not JSON" in info.value.message


def test_unknown_fields_are_refused_in_every_kind() -> None:
    end = json.loads(dump_line(EndLine(counts=LineCounts())))
    end["counts"]["vectors"] = 3
    with pytest.raises(InvalidInput) as info:
        parse_line(json.dumps(end), 9)
    assert info.value.field == "line 9: end.counts.vectors"
    head = {**json.loads(dump_line(header())), "extra": 1}
    with pytest.raises(InvalidInput, match="unknown field"):
        parse_line(json.dumps(head), 1)


def test_a_tombstone_carries_no_content_and_a_live_memory_needs_some() -> None:
    gone = memory(content="", summary=None, metadata={}, status="forgotten", forgotten_at=AT)
    assert parse_line(dump_line(gone), 2) == gone
    with pytest.raises(ValueError, match="forgotten memory carries no content"):
        memory(status="forgotten", forgotten_at=AT)
    with pytest.raises(ValueError, match="only a forgotten memory"):
        memory(content="   ")
    with pytest.raises(ValueError, match="NUL"):
        memory(content="a\x00b")


def test_a_checkpoint_body_damaged_in_transit_is_refused() -> None:
    line = json.loads(
        dump_line(
            CheckpointLine(
                id=A, task_id="t", created_at=AT, format_version=1,
                **CheckpointLine.encode_body(b"original"),
            )
        )
    )  # fmt: skip
    line["body_b64"] = "b3JpZ2luYUw="  # "originaL"
    with pytest.raises(InvalidInput) as info:
        parse_line(json.dumps(line), 5)
    assert info.value.field == "line 5: checkpoint" and "body_sha256" in info.value.message


def test_an_unsupported_schema_is_refused_at_the_header() -> None:
    data = {**json.loads(dump_line(header())), "schema": "memharness.export/2"}
    with pytest.raises(InvalidInput) as info:
        parse_line(json.dumps(data), 1)
    assert info.value.field == "line 1: header.schema"
    assert "memharness.export/1" in info.value.message


def test_the_reader_yields_each_line_with_its_number() -> None:
    lines = file_of(memory(), memory(id=B), counts={"memory": 2})
    reader = ExportReader(line + "\n" for line in lines)
    seen = [(number, line.kind) for number, line in reader]
    assert seen == [(2, "memory"), (3, "memory"), (4, "end")]
    assert reader.header == header() and reader.counts.memory == 2


def test_the_reader_refuses_a_truncated_file() -> None:
    error = refused(file_of(memory(), memory(id=B)))
    assert error.field == "line 4: end" and "truncated" in error.message
    assert refused([]).field == "line 1"
    assert refused(file_of()).field == "line 2: end"


def test_the_reader_refuses_an_end_line_whose_counts_disagree() -> None:
    error = refused(file_of(memory(), counts={"memory": 2}))
    assert error.field == "line 3: end.counts.memory" and "missing" in error.message


def test_the_reader_refuses_sections_out_of_order_and_lines_after_the_end() -> None:
    link = LinkLine(src_id=A, dst_id=B, link_kind="entity", created_at=AT)
    error = refused(file_of(link, memory(), counts={"memory": 1, "link": 1}))
    assert error.field == "line 3: kind" and "'memory' after 'link'" in error.message
    assert refused([*file_of(counts={}), dump_line(memory())]).field == "line 3"
    assert refused(file_of(header(), counts={})).field == "line 2: kind"
    assert refused([dump_line(memory())]).field == "line 1: kind"
    assert refused([dump_line(header()), ""]).field == "line 2"
