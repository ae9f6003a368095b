"""Errors of the pure pipelines, typed so that they cross a process boundary as data.

``InvalidInput`` is what a caller sees for a bad argument wherever it was found: in the agent
process, or in the store owner that answered ``context()`` through the queue. It travels as
the JSON object of :meth:`InvalidInput.to_json`, never as a message to split apart.
"""

from __future__ import annotations

from typing import Any


class InvalidInput(ValueError):
    """A value the caller passed breaks a rule: ``field`` names it, ``message`` says what is
    wrong and ``limit`` the rule it broke, when there is one."""

    def __init__(self, field: str, message: str, limit: str | None = None) -> None:
        self.field = field
        self.message = message
        self.limit = limit
        super().__init__(f"{field}: {message}")

    def within(self, prefix: str) -> InvalidInput:
        """The same error about ``prefix.field`` (an item of a batch: ``items[3].content``)."""
        return InvalidInput(f"{prefix}.{self.field}", self.message, self.limit)

    def to_json(self) -> dict[str, str | None]:
        return {"field": self.field, "message": self.message, "limit": self.limit}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> InvalidInput:
        """The error ``to_json`` wrote; a malformed object is a ValueError of its own."""
        field, message, limit = data.get("field"), data.get("message"), data.get("limit")
        if not isinstance(field, str) or not isinstance(message, str):
            raise ValueError(f"not an InvalidInput object: {data!r}")
        return cls(field, message, limit if isinstance(limit, str) else None)


class UnknownCursor(InvalidInput):
    """A cursor of the right form that no page of this listing gave out: forged, cut short,
    or another tenant's or filter's. Still an invalid argument to a Python caller; over HTTP
    a 404, as an id that names nothing is (a malformed one stays a 422)."""


class NotFound(LookupError):
    """Nothing the caller may see has this id: it does not exist, or it belongs to another
    tenant (the two answers are the same, so an id's existence never leaks across tenants).
    ``field`` names the argument that held the id."""

    def __init__(self, field: str, value: str) -> None:
        self.field = field
        self.value = value
        super().__init__(f"{field}: no {field.removesuffix('_id')} {value!r} in this tenant")

    def to_json(self) -> dict[str, str]:
        return {"field": self.field, "message": str(self).split(": ", 1)[1], "error": "not_found"}


class Conflict(ValueError):
    """The call is well formed but the memory's state refuses it (correcting a forgotten
    memory, or a version that was already corrected): ``field`` names the argument."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")

    def to_json(self) -> dict[str, str]:
        return {"field": self.field, "message": self.message, "error": "conflict"}


class LLMError(Exception):
    """Base of the errors an LLM adapter raises."""


class TransientLLMError(LLMError):
    """Worth retrying later: a timeout, a rate limit, a 5xx, a dropped connection."""


class MalformedLLMOutput(LLMError):
    """The model answered, but not with JSON that fits the schema."""


class CheckpointFormatError(ValueError):
    """Bytes that are not a readable checkpoint. ``kind`` says which check refused them."""

    def __init__(self, kind: str, message: str) -> None:
        self.kind = kind
        super().__init__(message)
