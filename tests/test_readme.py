"""The README and the configuration page stay true: every setting with its env var and
default (docs/configuration.md), the two commands, and a first example that matches the
client's real signatures."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

from pydantic import SecretStr

from config.settings import Settings
from memharness import MemoryClient

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
CONFIGURATION = (ROOT / "docs" / "configuration.md").read_text()
GETTING_STARTED = (ROOT / "docs" / "getting-started.md").read_text()


def _shown(default: object) -> str:
    if isinstance(default, SecretStr):
        default = default.get_secret_value()
    if default is None:
        return "(unset)"
    if default == "":
        return '""'
    return str(default)


def test_every_setting_is_documented_with_its_default() -> None:
    missing = []
    for name, field in Settings.model_fields.items():
        row = re.search(rf"^\| `MEMHARNESS_{name.upper()}` \| `([^`]*)` \|", CONFIGURATION, re.M)
        if row is None:
            missing.append(f"MEMHARNESS_{name.upper()} (no row)")
        elif row.group(1) != _shown(field.default):
            missing.append(f"MEMHARNESS_{name.upper()}: docs {row.group(1)!r}")
    assert missing == []


def test_no_documented_setting_is_stale() -> None:
    documented = set(re.findall(r"^\| `MEMHARNESS_([A-Z0-9_]+)` \|", CONFIGURATION, re.M))
    assert documented == {name.upper() for name in Settings.model_fields}


def test_the_quick_start_is_two_commands() -> None:
    assert "make demo" in README
    assert "make test" in README
    assert "make docs" in README


def _first_python_block(text: str) -> str:
    block = re.search(r"^```python\n(.*?)^```", text, re.M | re.S)
    assert block is not None
    return block.group(1)


def test_the_first_example_is_the_same_in_the_readme_and_getting_started() -> None:
    assert _first_python_block(README) == _first_python_block(GETTING_STARTED)


def test_the_first_example_calls_the_client_as_it_is() -> None:
    # given the README's first example, parsed (running it needs a store owner: it was run
    # against one when written, and its output is in docs/getting-started.md)
    tree = ast.parse(_first_python_block(README))
    # then every import resolves and every client call binds to the real signature
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = importlib.import_module(node.module or "")
            for alias in node.names:
                assert hasattr(module, alias.name), f"{node.module}.{alias.name}"
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "memory"
    ]
    assert {call.func.attr for call in calls if isinstance(call.func, ast.Attribute)} >= {
        "record",
        "recall",
        "context",
    }
    for call in calls:
        assert isinstance(call.func, ast.Attribute)
        method = getattr(MemoryClient, call.func.attr)
        keywords = {kw.arg: None for kw in call.keywords if kw.arg is not None}
        inspect.signature(method).bind(object(), *[None] * len(call.args), **keywords)
    made = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "MemoryClient"
    ]
    assert made, "the example makes a MemoryClient"
    for call in made:
        inspect.signature(MemoryClient).bind(*[None] * len(call.args))
