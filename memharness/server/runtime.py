"""What one server process holds, built once in the app's lifespan: the clients (one
``MemoryClient`` for the calls that run in threads, one ``AsyncMemoryClient`` for ``record``
on the event loop), the key resolver, the rate limiters (per key, and per address for
requests without a live key), the store owner's probe and, with ``api_metrics_port``, the
metrics endpoint."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from config import Settings

if TYPE_CHECKING:
    from memharness.aio import AsyncMemoryClient
    from memharness.client import MemoryClient
    from memharness.server.auth import KeyResolver
    from memharness.server.ratelimit import RateLimiter
    from memharness.server.ready import OwnerProbe


@dataclass
class Runtime:
    settings: Settings
    client: MemoryClient = field(init=False)
    aclient: AsyncMemoryClient = field(init=False)
    resolver: KeyResolver = field(init=False)
    limiter: RateLimiter = field(init=False)
    address_limiter: RateLimiter = field(init=False)
    owner_probe: OwnerProbe = field(init=False)
    key_pool: Any = field(init=False)
    redis: Any = field(init=False)
    toucher: asyncio.Task[None] | None = None
    metrics_endpoint: Any = None
