"""memory-harness: memory and resumable task state for long-running LLM agents."""

from memharness.client import MemoryClient, WriteReceipt
from pipelines.errors import InvalidInput
from pipelines.records import MemoryType, Modality

__all__ = ["InvalidInput", "MemoryClient", "MemoryType", "Modality", "WriteReceipt"]
