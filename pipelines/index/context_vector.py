"""The context vector: the situation a memory was written in, embedded beside its content.

A memory's content vector answers "what is this about"; its context vector answers "when
in the work did it come up": the task phase, the focus and the trigger recorded in its
metadata at write time (else its type and task). At query time the caller's own phase and
focus are embedded the same way, and the two searches are fused with weights that depend on
the phase: a debugging step cares more about memories written while debugging than a
planning step cares about memories written while planning.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pipelines.records import TaskPhase

# Metadata keys that describe the situation of a write, in the order they are rendered.
CONTEXT_KEYS = ("phase", "focus", "trigger")
# A context string is a handful of words; a long free-text focus would drown the phase.
CONTEXT_MAX_CHARS = 300

# (content, context) weights of the fused search by the querying step's phase. Content always
# leads: the context vector re-orders among relevant memories, it must not pull in
# irrelevant ones that merely share a phase. Debugging and reflection lean most on context
# (the same failure mode, the same retrospective); execution least (the next step is about
# the content at hand).
PHASE_FUSION_WEIGHTS: dict[TaskPhase | None, tuple[float, float]] = {
    None: (0.8, 0.2),
    TaskPhase.PLANNING: (0.7, 0.3),
    TaskPhase.EXECUTION: (0.8, 0.2),
    TaskPhase.DEBUGGING: (0.6, 0.4),
    TaskPhase.REVIEW: (0.7, 0.3),
    TaskPhase.REFLECTION: (0.6, 0.4),
}


def _flatten(value: Any) -> str:
    if isinstance(value, str):
        return " ".join(value.split())
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        return ", ".join(_flatten(v) for v in value if v is not None)
    if isinstance(value, int | float | bool):
        return str(value)
    return ""


def context_text(
    metadata: Mapping[str, Any] | None, memory_type: str | None, task_id: str | None
) -> str:
    """The context string of a memory, e.g. ``phase: debugging; focus: errors; trigger:
    test failure``; without any of those keys in ``metadata``, ``type: decision; task: t-1``."""
    parts = []
    for key in CONTEXT_KEYS:
        text = _flatten((metadata or {}).get(key))
        if text:
            parts.append(f"{key}: {text}")
    if not parts:
        if memory_type:
            parts.append(f"type: {memory_type}")
        if task_id:
            parts.append(f"task: {task_id}")
    return "; ".join(parts)[:CONTEXT_MAX_CHARS] or "unspecified"


def query_context_text(
    phase: TaskPhase | None, focus: Sequence[str] = (), trigger: str | None = None
) -> str:
    """The context string of a query step, rendered as a write's would be."""
    metadata: dict[str, Any] = {}
    if phase is not None:
        metadata["phase"] = phase.value
    if focus:
        metadata["focus"] = list(focus)
    if trigger:
        metadata["trigger"] = trigger
    return context_text(metadata, None, None)


def fusion_weights(phase: TaskPhase | None) -> tuple[float, float]:
    """(content, context) weights of the fused search for a step in ``phase``."""
    return PHASE_FUSION_WEIGHTS[phase]
