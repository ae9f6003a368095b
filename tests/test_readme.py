"""README.md stays true: every setting with its env var and default, the two commands."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import SecretStr

from config.settings import Settings

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


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
        row = re.search(rf"^\| `MEMHARNESS_{name.upper()}` \| `([^`]*)` \|", README, re.M)
        if row is None:
            missing.append(f"MEMHARNESS_{name.upper()} (no row)")
        elif row.group(1) != _shown(field.default):
            missing.append(f"MEMHARNESS_{name.upper()}: README {row.group(1)!r}")
    assert missing == []


def test_no_documented_setting_is_stale() -> None:
    documented = set(re.findall(r"^\| `MEMHARNESS_([A-Z0-9_]+)` \|", README, re.M))
    assert documented == {name.upper() for name in Settings.model_fields}


def test_the_quick_start_is_two_commands() -> None:
    assert "make demo" in README
    assert "make test" in README
