"""The checkpoint service as the client package names it; it lives with the state path in
``workers.state.service``."""

from workers.state.service import (
    CheckpointNotFound,
    CheckpointService,
    Fallback,
    NoUsableCheckpoint,
    ResumeResult,
    VerifyReport,
)

__all__ = [
    "CheckpointNotFound",
    "CheckpointService",
    "Fallback",
    "NoUsableCheckpoint",
    "ResumeResult",
    "VerifyReport",
]
