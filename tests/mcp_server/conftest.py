"""A real ``MemoryClient`` on the test database, and the MCP server built around it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest


@pytest.fixture
def memory(db, redis_client) -> Iterator[Any]:  # type: ignore[no-untyped-def]
    from config import Settings
    from memharness import MemoryClient

    with MemoryClient(Settings()) as client:
        yield client


@pytest.fixture
def server(memory):  # type: ignore[no-untyped-def]
    from config import Settings
    from memharness.mcp_server.server import build_for
    from memharness.mcp_server.tools import Binding

    binding = Binding.of("acme", "agent-7", None, datetime(2026, 12, 3, 21, 0, tzinfo=UTC))
    return build_for(Settings(), memory, binding)
