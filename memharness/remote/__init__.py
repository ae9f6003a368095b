"""The remote clients: ``MemoryClient``'s methods over the HTTP API of ``memharness serve``,
for an agent that has a URL and an API key and no way to PostgreSQL or Redis."""

from memharness.remote.aio import AsyncRemoteMemoryClient
from memharness.remote.client import RemoteMemoryClient
from memharness.remote.errors import AuthError, RateLimited, RemoteError, Unavailable

__all__ = [
    "AsyncRemoteMemoryClient",
    "AuthError",
    "RateLimited",
    "RemoteError",
    "RemoteMemoryClient",
    "Unavailable",
]
