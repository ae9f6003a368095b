"""History put together: versions in order, the current one, one timeline."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from pipelines.own.history import HistoryEvent, MemoryVersion, build_history

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def version(n: int, status: str) -> MemoryVersion:
    return MemoryVersion(
        id=uuid.uuid5(uuid.NAMESPACE_URL, str(n)),
        version=n,
        status=status,
        content=f"v{n}" if status != "forgotten" else "",
        timestamp=T0 + timedelta(days=n),
        level=0,
    )


def test_the_current_version_is_the_newest_live_one_and_events_are_in_time_order() -> None:
    v1, v2, v3 = version(1, "corrected"), version(2, "corrected"), version(3, "stored")
    late = HistoryEvent(at=T0 + timedelta(days=9), event="superseded", memory_id=v2.id)
    early = HistoryEvent(at=T0 + timedelta(days=2), event="superseded", memory_id=v1.id)

    history = build_history(v1.id, [v3, v1, v2], [late, early])

    assert [v.version for v in history.versions] == [1, 2, 3]
    assert history.current_id == v3.id
    assert [e.memory_id for e in history.events] == [v1.id, v2.id]


def test_a_history_whose_every_version_is_gone_has_no_current_one() -> None:
    history = build_history(uuid.uuid4(), [version(1, "forgotten")], [])
    assert history.current_id is None and history.versions[0].content == ""
