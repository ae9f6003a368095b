"""The listing's arguments as the OpenAPI declares them: a level is ASCII 0-4 or L0-L4, a
cursor unpadded URL-safe base64; a well-formed cursor no page gave out is UnknownCursor."""

from __future__ import annotations

import re

import pytest

from pipelines.errors import InvalidInput, UnknownCursor
from pipelines.own.listing import (
    CURSOR_PATTERN,
    LEVEL_PATTERN,
    check_level,
    check_memory_listing,
    decode_cursor,
)


@pytest.mark.parametrize("level", ["0", "4", "L2", "l3", 1])
def test_a_level_the_schema_allows_is_taken(level: object) -> None:
    assert check_level(level) in range(5)
    if isinstance(level, str):
        assert re.fullmatch(LEVEL_PATTERN, level)


@pytest.mark.parametrize("level", ["³", "L³", "٣", "5", " 2", "L", "", "02"])
def test_a_level_the_schema_refuses_is_an_invalid_input_naming_level(level: str) -> None:
    # "³".isdigit() is True and int("³") raises a bare ValueError: it was an HTTP 500
    assert not re.fullmatch(LEVEL_PATTERN, level)
    with pytest.raises(InvalidInput) as info:
        check_level(level)
    assert info.value.field == "level" and info.value.limit == "0-4"


@pytest.mark.parametrize("cursor", ["0", "abc", "A" * 400])
def test_a_well_formed_cursor_no_page_gave_out_is_an_unknown_cursor(cursor: str) -> None:
    assert re.fullmatch(CURSOR_PATTERN, cursor)
    with pytest.raises(UnknownCursor) as info:
        decode_cursor(cursor, "fingerprint")
    assert info.value.field == "cursor"


@pytest.mark.parametrize("cursor", ["", "a=b", "a/b", "é", "A" * 401, "abc\n"])
def test_a_malformed_cursor_is_a_plain_invalid_input(cursor: str) -> None:
    with pytest.raises(InvalidInput) as info:
        decode_cursor(cursor, "fingerprint")
    assert type(info.value) is InvalidInput and info.value.field == "cursor"


def test_another_listings_cursor_is_an_unknown_cursor() -> None:
    from datetime import UTC, datetime
    from uuid import uuid4

    from pipelines.own.listing import Position, encode_cursor

    listing = check_memory_listing("acme")
    cursor = encode_cursor(Position(at=datetime.now(UTC), id=uuid4()), "other-fingerprint")
    with pytest.raises(UnknownCursor):
        decode_cursor(cursor, listing.fingerprint())
