from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pipelines.write.summary import extractive_summary, needs_summary


def test_short_text_is_its_own_summary() -> None:
    assert extractive_summary("We chose Redis.", 60) == "We chose Redis."
    assert not needs_summary("We chose Redis.")


def test_summary_keeps_decisions_and_identifiers_within_budget() -> None:
    text = (
        "Morning everyone. The weather was nice on the way in. "
        "We decided to move the ledger to PostgreSQL 15 because it gives us transactions. "
        "Somebody brought cake to the office and it was lovely. "
        "Status: ATL-104 is now blocked on the security review. "
        "Lunch was at the usual place and took a while."
    )
    summary = extractive_summary(text, 30)
    assert "PostgreSQL 15" in summary
    assert "ATL-104" in summary
    assert len(summary.split()) <= 30


@given(st.text(min_size=1, max_size=2000), st.integers(min_value=1, max_value=120))
def test_summary_never_exceeds_the_budget_by_more_than_an_ellipsis(text: str, budget: int) -> None:
    summary = extractive_summary(text, budget)
    assert len(summary.split()) <= budget + 1
