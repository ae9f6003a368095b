"""A simulated two-week software project, as an agent would record it.

Deterministic: day ``d`` (0-13) has two sessions of a few turns each — decisions with their
reasons, status changes, outcomes, preferences that recur, a convention, a
mistake, chatter — plus a causal chain (the auth module's delay blocks the mobile release, which
holds up the billing migration) for the link traversal.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

TENANT = "acme"
TASK = "auth-rewrite"
USER = "dana"

_OUTCOMES = [
    "Ran the integration suite on branch feature/oauth-{d}: {n} tests passed, 2 were flaky "
    "in tests/test_tokens.py.",
    "Profiled the login endpoint: p95 latency went from {m} ms to {k} ms after caching JWKS.",
    "Reviewed pull request #{p} with Priya; she asked for smaller commits and more tests.",
    "Migrated {n} user rows to the new sessions table without errors.",
]
_DECISIONS = [
    "We decided to use PKCE for the mobile client because the app cannot keep a secret.",
    "We chose Redis for session storage because it gives us expiry for free.",
    "Decided to rotate signing keys every 30 days because SEC-7 requires it.",
    "We will keep the legacy /v1/login endpoint until 2027-03-01 because partners still call it.",
]
_CHATTER = ["Thanks, that helps!", "Great, sounds good.", "Cool, talk tomorrow."]


def history(start: datetime, days: int = 14) -> list[dict[str, Any]]:
    """``record`` keyword arguments in time order, starting at ``start`` (aware)."""
    items: list[dict[str, Any]] = []
    for d in range(days):
        for s in range(2):
            ts = start + timedelta(days=d, hours=9 + 5 * s)
            session = f"day{d:02d}-s{s}"
            if s == 1 and d % 2 == 1:
                # A session of decisions and status changes only: kept verbatim, it compresses
                # by dropping the chatter and passes its quality check at the first try.
                turns = [
                    f"Agent: {_DECISIONS[(d * 2 + s) % 4]}",
                    f"Agent: Status: ticket AUTH-{d} moved to done.",
                    f"Dana: {_CHATTER[(d + s) % 3]}",
                ]
            else:
                turns = [
                    f"Dana: {_OUTCOMES[(d + s) % 4]}".format(
                        d=d, n=100 + d * 7 + s, m=300 + d, k=120 + d, p=400 + d * 2 + s
                    ),
                    f"Agent: {_DECISIONS[(d * 2 + s) % 4]}",
                    f"Dana: {_CHATTER[(d + s) % 3]}",
                ]
            if s == 0 and d % 3 == 0:
                turns.append("Dana: I prefer brief answers with the commands first.")
            if s == 1 and d == 4:
                turns.append("Agent: Lesson learned: never deploy on Friday, it broke login.")
            if s == 1 and d == 6:
                turns.append("Agent: In this project we always use snake_case for column names.")
            if s == 0 and d == 9:
                turns.append(
                    "Agent: Status: the auth module is delayed to 2027-01-15 because of SEC-12."
                )
            if s == 1 and d == 9:
                turns.append("Agent: The mobile release is blocked by the auth module delay.")
            if s == 0 and d == 10:
                turns.append("Agent: The billing migration is waiting on the mobile release.")
            for i, content in enumerate(turns):
                items.append(
                    {
                        "content": content,
                        "tenant_id": TENANT,
                        "task_id": TASK,
                        "session_id": session,
                        "user_id": USER,
                        "timestamp": ts + timedelta(minutes=2 * i),
                    }
                )
    return items
