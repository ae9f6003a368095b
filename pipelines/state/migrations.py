"""The versions of the checkpoint format this code reads, and the migrations that lift an
older layout to the current one, version by version.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from pipelines.errors import CheckpointFormatError

FORMAT_VERSION = 2
OLDEST_READABLE_VERSION = 1


Layout = dict[str, Any]
Migration = Callable[[Layout, bytes], tuple[Layout, bytes]]


class _V1(CheckpointFormatError):
    def __init__(self, message: str) -> None:
        super().__init__("migration", f"v1 layout: {message}")


def _field(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in obj:
        raise _V1(f"{where}.{key} is missing")
    value = obj[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    # bool is an int to isinstance, never to a checkpoint
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise _V1(f"{where}.{key} is a {type(value).__name__}, expected {kinds[0].__name__}")
    return value


def _optional(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if obj.get(key) is None:
        return None
    return _field(obj, key, kind, where)


def _epoch(value: Any, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _V1(f"{where} is not a finite number of seconds since the epoch")
    try:
        return datetime.fromtimestamp(value, UTC).isoformat()
    except (OverflowError, OSError, ValueError):
        raise _V1(f"{where} = {value} is outside the range of dates") from None


_V1_STATES = {"todo": "pending", "doing": "running", "done": "done", "blocked": "blocked"}


def _flatten_v1_tree(root: Any) -> list[dict[str, Any]]:
    # Iterative on purpose: a hostile frame may nest thousands of levels.
    if root is None:
        return []
    nodes: list[dict[str, Any]] = []
    stack: list[tuple[Any, str | None, str]] = [(root, None, "root")]
    while stack:
        node, parent, where = stack.pop()
        if not isinstance(node, dict):
            raise _V1(f"{where} is a {type(node).__name__}, not an object")
        state = _field(node, "state", str, where)
        if state not in _V1_STATES:
            raise _V1(f"{where}.state {state[:20]!r} is not one of {', '.join(_V1_STATES)}")
        node_id = _field(node, "id", str, where)
        why = _optional(node, "why", str, where)
        nodes.append(
            {
                "id": node_id,
                "title": _field(node, "title", str, where),
                "status": _V1_STATES[state],
                "parent_id": parent,
                # v1 kept a reason on unblocked nodes too; v2 keeps it only where it applies.
                "blocked_reason": why if state == "blocked" else None,
            }
        )
        children = _optional(node, "children", list, where) or []
        for index in range(len(children) - 1, -1, -1):
            stack.append((children[index], node_id, f"{where}.children.{index}"))
    return nodes


def migrate_v1_to_v2(layout: Layout, snapshot: bytes) -> tuple[Layout, bytes]:
    """v1 (2026-11) kept a nested tree with todo/doing states, epoch-second timestamps,
    terse names and a working memory of ``"role: text"`` lines; v2 is the flat pre-order
    tree with parent ids, ISO timestamps, ids on every tool call and action, and structured
    working-memory items."""
    where = "v1"
    tool_calls = []
    for index, call in enumerate(_field(layout, "tools", list, where)):
        at = f"{where}.tools.{index}"
        if not isinstance(call, dict):
            raise _V1(f"{at} is not an object")
        started = call.get("at")
        tool_calls.append(
            {
                "call_id": f"v1-{index}",
                "tool": _field(call, "name", str, at),
                "arguments": _optional(call, "args", dict, at) or {},
                "result": call.get("output"),
                "error": _optional(call, "error", str, at),
                "started_at": None if started is None else _epoch(started, f"{at}.at"),
            }
        )
    pending = []
    for index, action in enumerate(_field(layout, "pending", list, where)):
        at = f"{where}.pending.{index}"
        if not isinstance(action, dict):
            raise _V1(f"{at} is not an object")
        external = _field(action, "external", bool, at)
        pending.append(
            {
                "action_id": f"v1-{index}",
                "node_id": _field(action, "node", str, at),
                "tool": _field(action, "tool", str, at),
                "arguments": _optional(action, "args", dict, at) or {},
                # v1 had one flag for any outside contact; treat it as a write, so a resume
                # verifies rather than repeats something that may already have happened.
                "effect": "external_write" if external else "local",
            }
        )
    tokens = _field(layout, "tokens", dict, where)
    upgraded: Layout = {
        "checkpoint_id": _field(layout, "id", str, where),
        "tenant_id": _field(layout, "tenant", str, where),
        "task_id": _field(layout, "task", str, where),
        "created_at": _epoch(_field(layout, "saved_at", (int, float), where), "v1.saved_at"),
        "parent_id": _optional(layout, "parent", str, where),
        "state": {
            "phase": _optional(layout, "stage", str, where),
            "tree": _flatten_v1_tree(layout.get("root")),
            "current_node_id": _optional(layout, "cursor", str, where),
            "variables": _field(layout, "vars", dict, where),
            "last_tool_calls": tool_calls,
            "pending_actions": pending,
            "token_usage": {
                "prompt_tokens": _field(tokens, "in", int, "v1.tokens"),
                "completion_tokens": _field(tokens, "out", int, "v1.tokens"),
                "budget_tokens": _optional(tokens, "limit", int, "v1.tokens"),
            },
            "iteration": _field(layout, "iterations", int, where),
        },
    }
    lines = _parse_json_array(snapshot)
    items = []
    for index, line in enumerate(lines):
        if not isinstance(line, str):
            raise _V1(f"snapshot.{index} is a {type(line).__name__}, not a string")
        role, sep, text = line.partition(": ")
        if not sep or not role or " " in role:
            role, text = "note", line
        # v1 did not count tokens; four characters a token is the usual English estimate.
        items.append({"role": role, "content": text, "tokens": math.ceil(len(text) / 4)})
    return upgraded, json.dumps({"items": items}, ensure_ascii=False).encode("utf-8")


def _parse_json_array(raw: bytes) -> list[Any]:
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise _V1(f"the snapshot is not valid JSON: {exc}") from None
    if not isinstance(value, list):
        raise _V1(f"the snapshot is a JSON {type(value).__name__}, not a list of lines")
    return value


# version → the migration that lifts it to version + 1
MIGRATIONS: dict[int, Migration] = {1: migrate_v1_to_v2}


def upgrade_layout(version: int, layout: Layout, snapshot: bytes) -> tuple[Layout, bytes]:
    while version < FORMAT_VERSION:
        layout, snapshot = MIGRATIONS[version](layout, snapshot)
        version += 1
    return layout, snapshot
