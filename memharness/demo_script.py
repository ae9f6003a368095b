"""The scripted agent of ``make demo``: a software-project-tracking conversation.

A team migrates a billing service ("Atlas") over ten working days. The script mixes what an
agent must remember (decisions with their reasons, constraints, status changes, preferences)
with what it should not keep (acknowledgements, small talk), deterministically from a seed,
so every run writes the same conversation.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

TICKETS = {
    "ATL-101": "payment webhooks",
    "ATL-102": "invoice PDF rendering",
    "ATL-103": "currency rounding",
    "ATL-104": "auth module",
    "ATL-105": "ledger export",
    "ATL-106": "retry queue for card declines",
    "ATL-107": "tax rules for EU customers",
    "ATL-108": "dunning e-mails",
}
STATES = ["in progress", "in review", "blocked", "done", "reopened", "deployed to staging"]
PEOPLE = ["Priya", "Marco", "Lena", "Tomás", "Aiko"]

DECISIONS = [
    ("use PostgreSQL 15 for the ledger", "we need transactional writes across invoices and payments"),
    ("keep money as integer cents in `amount_cents`", "floats lost a cent in currency rounding"),
    ("run webhooks through a Redis-backed retry queue", "Stripe retries for only 3 days"),
    ("render invoice PDFs with WeasyPrint", "it handles the EU VAT layout without a headless browser"),
    ("ship behind the feature flag `billing_v2`", "we must roll back within minutes if totals differ"),
    ("set the API timeout to 800 ms", "the checkout page gives up after one second"),
    ("split the ledger export into nightly batches of 10,000 rows", "the warehouse loader times out on larger files"),
    ("store tax rules in config/tax_rules.yaml", "finance edits them without a deploy"),
    ("pin Python 3.11 in the Dockerfile", "the PDF library has no 3.12 wheels yet"),
    ("page the on-call only for failed payments above 500 EUR", "small failures retry on their own"),
]  # fmt: skip
CONSTRAINTS = [
    "The public API must answer within 200 ms at p99.",
    "No customer data may leave the eu-west-1 region.",
    "The migration must finish before the 31 March invoicing run.",
    "Every money column is BIGINT cents; no NUMERIC or float columns.",
    "Webhook handlers must be idempotent: Stripe delivers at least once.",
    "The old billing service stays read-only for 90 days after cut-over.",
]
PREFERENCES = [
    "I prefer short status updates; be detailed only for architecture decisions.",
    "Please always link the ticket id when you mention a task.",
    "I'd rather see a diff than a description of a change.",
    "Never push to main directly; open a pull request even for one-line fixes.",
    "Write commit messages that say why, not what.",
]
OBSERVATIONS = [
    "The staging deploy took {n} minutes today.",
    "Load test: checkout p99 was {n} ms with 200 concurrent users.",
    "{p} reports that {n} invoices in the sample had rounding differences.",
    "The ledger table has {n} thousand rows in production.",
    "CI ran {n} tests in 6 minutes; two were flaky in tests/test_webhooks.py.",
]
ACTIONS = [
    "I ran the migration script scripts/migrate_ledger.py against staging.",
    "I opened pull request #{n} for {t}.",
    "I updated config/tax_rules.yaml with the new German VAT rate.",
    "I added an index on payments(created_at) to speed up the export.",
    "I refactored billing/webhooks.py to verify signatures before parsing.",
]
CHATTER = [
    "ok", "thanks", "got it", "好的", "收到", "继续", "sounds good", "hi", "good morning",
    "one sec", "let me think", "lol", "cool",
]  # fmt: skip


@dataclass(frozen=True)
class Turn:
    day: int
    text: str
    kind: str
    timestamp: datetime


def script(interactions: int = 200, *, seed: int = 7, days: int = 10) -> list[Turn]:
    rng = random.Random(seed)
    start = datetime.now(UTC).replace(hour=9, minute=0, second=0, microsecond=0)
    start -= timedelta(days=days)
    turns: list[Turn] = []
    decisions = list(DECISIONS)
    rng.shuffle(decisions)
    constraints = list(CONSTRAINTS)
    rng.shuffle(constraints)
    for index in range(interactions):
        day = index * days // max(1, interactions)
        when = start + timedelta(days=day, minutes=3 * index)
        roll = rng.random()
        ticket, topic = rng.choice(list(TICKETS.items()))
        person = rng.choice(PEOPLE)
        if roll < 0.16 and decisions:
            what, why = decisions.pop()
            text = f"{person}: We decided to {what} because {why}."
            kind = "decision"
        elif roll < 0.26 and constraints:
            text = f"Constraint from {person}: {constraints.pop()}"
            kind = "constraint"
        elif roll < 0.46:
            state = rng.choice(STATES)
            text = f"Status: {ticket} ({topic}) is now {state}."
            if state == "blocked":
                text += f" Waiting on {rng.choice(PEOPLE)} for the {rng.choice(list(TICKETS.values()))} review."
            kind = "status_change"
        elif roll < 0.53:
            text = rng.choice(PREFERENCES)
            kind = "preference"
        elif roll < 0.65:
            text = rng.choice(OBSERVATIONS).format(n=rng.randint(3, 900), p=person)
            kind = "observation"
        elif roll < 0.75:
            text = rng.choice(ACTIONS).format(n=rng.randint(100, 999), t=ticket)
            kind = "action"
        else:
            text = rng.choice(CHATTER)
            kind = "chatter"
        turns.append(Turn(day=day, text=text, kind=kind, timestamp=when))
    return turns


RECALL_QUERIES = [
    "Which database did we choose for the ledger and why?",
    "How should money amounts be stored?",
    "How does the user want status updates?",
    "What is the latency constraint on the public API?",
    "What is the status of ATL-101 payment webhooks?",
]
