"""The matching rules of LangGraph's store, pure: value filters and namespace conditions.

A filter maps a field to a value (equal, JSON-wise: lists element by element, objects field
by field) or to operators (``$eq $ne $gt $gte $lt $lte``), as LangGraph's stores read it.
``sql_filter`` lifts the plain scalar equalities into a jsonb containment that PostgreSQL
can answer with the item's row; the rest is checked here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.store.base import MatchCondition

from pipelines.errors import InvalidInput

OPERATORS = frozenset({"$eq", "$ne", "$gt", "$gte", "$lt", "$lte"})


def sql_filter(filter: Mapping[str, Any] | None) -> tuple[dict[str, Any], bool]:
    """The part of ``filter`` jsonb ``@>`` decides exactly, and whether that is all of it.

    Containment equals equality only for scalars: ``[1]`` is contained in ``[1, 2]``.
    """
    if not filter:
        return {}, True
    pushed: dict[str, Any] = {}
    exact = True
    for field, wanted in filter.items():
        if not isinstance(field, str):
            raise InvalidInput("filter", f"keys must be strings, got {type(field).__name__}")
        if isinstance(wanted, dict) and any(str(k).startswith("$") for k in wanted):
            unknown = [k for k in wanted if k not in OPERATORS]
            if unknown:
                raise InvalidInput(
                    "filter",
                    f"unknown operator {unknown[0]!r} on {field!r}",
                    "$eq $ne $gt $gte $lt $lte",
                )
            exact = False
        elif wanted is None or isinstance(wanted, dict | list | tuple):
            exact = False
        else:
            pushed[field] = wanted
    return pushed, exact


def matches(value: Mapping[str, Any], filter: Mapping[str, Any]) -> bool:
    return all(_compare(value.get(field), wanted) for field, wanted in filter.items())


def _compare(actual: Any, wanted: Any) -> bool:
    if isinstance(wanted, dict):
        if any(str(k).startswith("$") for k in wanted):
            return all(_apply(actual, op, operand) for op, operand in wanted.items())
        if not isinstance(actual, dict):
            return False
        return all(_compare(actual.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list | tuple):
        return (
            isinstance(actual, list | tuple)
            and len(actual) == len(wanted)
            and all(_compare(a, w) for a, w in zip(actual, wanted, strict=True))
        )
    return bool(actual == wanted)


def _apply(actual: Any, operator: str, operand: Any) -> bool:
    if operator == "$eq":
        return bool(actual == operand)
    if operator == "$ne":
        return bool(actual != operand)
    try:
        left, right = float(actual), float(operand)
    except (TypeError, ValueError):
        # A missing or non-numeric field is not in an ordered range.
        return False
    if operator == "$gt":
        return left > right
    if operator == "$gte":
        return left >= right
    if operator == "$lt":
        return left < right
    if operator == "$lte":
        return left <= right
    raise InvalidInput("filter", f"unknown operator {operator!r}", "$eq $ne $gt $gte $lt $lte")


def namespace_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """A prefix or suffix condition, ``*`` standing for exactly one label."""
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise InvalidInput(
            "match_conditions", f"unknown match type {condition.match_type!r}", "prefix, suffix"
        )
    return all(want == "*" or have == want for have, want in pairs)
