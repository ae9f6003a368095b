"""The exact contract of every route: a request carries only what the route declares.

``StrictRoute`` is the route class of every router. Before FastAPI reads anything it refuses
(422, ``InvalidInput``, the one error shape):

- a query parameter the route does not declare (``?tenant_id=other`` used to be ignored and
  answered with the key's own data, as if it had been honoured);
- a body that is not strict JSON: invalid UTF-8, nesting past the parser's reach, ``NaN`` or
  ``Infinity``, or an object holding a key twice (``json.loads`` keeps the last silently, so
  what the client meant is unknown). FastAPI used to answer these ``400 {"detail": ...}``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any

from fastapi import Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from pipelines.errors import InvalidInput

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise InvalidInput("body", f"holds the key {key[:60]!r} twice in one object")
        seen[key] = value
    return seen


def _no_constant(name: str) -> Any:
    raise InvalidInput("body", f"holds {name}, which is not JSON")


def check_json_body(data: bytes) -> Any:
    """``data`` as strict JSON, or :class:`InvalidInput` on ``body`` saying why not."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput("body", f"is not valid UTF-8 (bad byte at offset {exc.start})") from None
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except RecursionError:
        raise InvalidInput("body", "nests too deeply to be parsed") from None
    except json.JSONDecodeError as exc:
        raise InvalidInput("body", f"is not valid JSON: {exc.msg} at offset {exc.pos}") from None
    except ValueError as exc:  # an integer past Python's digit limit, and the like
        raise InvalidInput("body", f"is not valid JSON: {exc}") from None


def check_query(params: Iterable[str], declared: frozenset[str]) -> None:
    for name in params:
        if name not in declared:
            takes = ", ".join(sorted(declared)) or "none"
            raise InvalidInput(
                name[:60] or "query",
                f"is not a query parameter of this route (it takes: {takes})",
            )


class StrictRoute(APIRoute):
    def get_route_handler(self) -> Handler:
        handler = super().get_route_handler()
        declared = declared_query(self.dependant)

        async def strict(request: Request) -> Response:
            check_query(_names(request.query_params), declared)
            data = await request.body()  # cached: the route reads the same bytes
            # The parsed body, for a route that parses it into its request model itself.
            request.state.json_body = check_json_body(data) if data else None
            return await handler(request)

        return strict


def _names(params: Mapping[str, str]) -> Iterable[str]:
    return params.keys()


def declared_query(dependant: Dependant) -> frozenset[str]:
    """The query parameters a route reads, its dependencies' included."""
    names: set[str] = set()
    stack = [dependant]
    while stack:
        current = stack.pop()
        names.update(field.alias for field in current.query_params)
        stack.extend(current.dependencies)
    return frozenset(names)
