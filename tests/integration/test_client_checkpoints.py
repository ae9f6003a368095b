"""Checkpoints through MemoryClient, the API agents hold."""

from __future__ import annotations

import pytest

from memharness.bench.checkpoint import sample_state

pytestmark = pytest.mark.integration


def test_checkpoint_resume_and_rollback_through_the_client(client) -> None:  # type: ignore[no-untyped-def]
    # given nothing saved yet, resume says so
    assert client.resume("acme", "billing") is None

    # when the agent checkpoints three iterations
    base = sample_state()
    states = [base.with_changes(iteration=base.iteration + n) for n in range(3)]
    ids = [client.checkpoint("acme", "billing", state) for state in states]

    # then resume returns the newest exactly, and another tenant sees nothing
    resumed = client.resume("acme", "billing")
    assert resumed is not None
    assert resumed.checkpoint.checkpoint_id == ids[-1]
    assert resumed.checkpoint.state == states[-1]
    assert client.resume("other-tenant", "billing") is None

    # when the agent rolls back to the first checkpoint
    new_head = client.rollback("acme", "billing", ids[0])

    # then the first state is the newest again, and the later ones still exist
    again = client.resume("acme", "billing")
    assert again is not None
    assert again.checkpoint.checkpoint_id == new_head
    assert again.checkpoint.state == states[0]
    listed = {row.id for row in client.checkpoints.list("acme", "billing")}
    assert set(ids) <= listed
