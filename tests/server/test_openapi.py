"""The OpenAPI document is generated from the request models: every value a request may
carry, in a body or a parameter, has a type (no ``{}``, no ``Any``), and unknown body fields
are refused."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from config import Settings
from memharness.server.app import create_app

COMBINATORS = ("anyOf", "oneOf", "allOf")


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    return create_app(Settings()).openapi()


def resolve(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        return dict(spec["components"]["schemas"][name])
    return schema


def untyped(spec: dict[str, Any], schema: Any, where: str, seen: set[str]) -> Iterator[str]:
    """Every place under ``schema`` that is a schema without a type."""
    if isinstance(schema, bool):
        return  # additionalProperties: true/false, a property of its parent object's type
    assert isinstance(schema, dict), where
    ref = schema.get("$ref")
    if isinstance(ref, str):
        if ref in seen:
            return
        seen = seen | {ref}
    schema = resolve(spec, schema)
    members = [m for key in COMBINATORS for m in schema.get(key, ())]
    if "type" not in schema and "enum" not in schema and "const" not in schema and not members:
        yield where
    for index, member in enumerate(members):
        yield from untyped(spec, member, f"{where}|{index}", seen)
    for name, prop in schema.get("properties", {}).items():
        yield from untyped(spec, prop, f"{where}.{name}", seen)
    if "items" in schema:
        yield from untyped(spec, schema["items"], f"{where}[]", seen)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        yield from untyped(spec, extra, f"{where}{{}}", seen)


def request_schemas(spec: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            name = f"{method.upper()} {path}"
            for parameter in operation.get("parameters", ()):
                yield f"{name} ?{parameter['name']}", parameter.get("schema", {})
            body = operation.get("requestBody", {}).get("content", {})
            for media, content in body.items():
                if "schema" in content:
                    yield f"{name} body({media})", content["schema"]


def test_every_request_value_has_a_type(spec: dict[str, Any]) -> None:
    found = [
        place
        for name, schema in request_schemas(spec)
        for place in untyped(spec, schema, name, set())
    ]
    assert found == []


def test_request_bodies_refuse_unknown_fields(spec: dict[str, Any]) -> None:
    open_bodies = []
    for name, schema in request_schemas(spec):
        if "body(" not in name:
            continue
        top = resolve(spec, schema)
        if top.get("type") == "object" and top.get("additionalProperties") is not False:
            open_bodies.append(name)
    assert open_bodies == []


def test_the_walk_finds_an_untyped_field() -> None:
    spec = {"components": {"schemas": {}}}
    schema = {"type": "object", "properties": {"query": {"description": "anything"}}}
    assert list(untyped(spec, schema, "body", set())) == ["body.query"]
