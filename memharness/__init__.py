"""memory-harness: memory and resumable task state for long-running LLM agents."""

from memharness.client import MemoryClient, WriteReceipt
from memharness.remote import (
    AsyncRemoteMemoryClient,
    AuthError,
    RemoteMemoryClient,
    Unavailable,
)
from pipelines.errors import Conflict, InvalidInput, NotFound
from pipelines.records import MemoryType, Modality

__all__ = [
    "AsyncRemoteMemoryClient",
    "AuthError",
    "Conflict",
    "InvalidInput",
    "MemoryClient",
    "MemoryType",
    "Modality",
    "NotFound",
    "RemoteMemoryClient",
    "Unavailable",
    "WriteReceipt",
]
