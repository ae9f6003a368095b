"""A small conversation in LoCoMo's format, generated for the benchmark smoke tests.

The real LoCoMo data is evaluation-only and stays in shared/; tests write this instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SESSIONS = [
    (
        "10:00 am on 3 March, 2026",
        [
            ("Ana", "We decided to move the ledger to PostgreSQL 15 because we need transactions."),
            ("Ben", "Makes sense. I will write the migration script scripts/migrate_ledger.py."),
            ("Ana", "I prefer short status updates, detailed only for architecture."),
            ("Ben", "Noted. The staging deploy took 14 minutes today."),
        ],
    ),
    (
        "4:30 pm on 10 March, 2026",
        [
            ("Ben", "Status: ATL-104, the auth module, is blocked on the security review."),
            ("Ana", "Then the release slips to 24 March because auth is on the critical path."),
            ("Ben", "I adopted a cat named Miso last weekend."),
            ("Ana", "Lovely! Remember the API must answer within 200 ms at p99."),
        ],
    ),
]
QA = [
    {"question": "Which database did they move the ledger to?", "answer": "PostgreSQL 15",
     "evidence": ["D1:1"], "category": 4},
    {"question": "What is blocking the auth module?", "answer": "the security review",
     "evidence": ["D2:1"], "category": 4},
    {"question": "When does the release slip to?", "answer": "24 March",
     "evidence": ["D2:2"], "category": 2},
    {"question": "Why did the release slip?", "answer": "auth is on the critical path",
     "evidence": ["D2:1; D2:2"], "category": 1},
    {"question": "What is the name of Ben's cat?", "answer": "Miso", "evidence": ["D2:3"],
     "category": 4},
    {"question": "What did Ben have for breakfast?", "adversarial_answer": "toast",
     "evidence": ["D9:99"], "category": 5},
]  # fmt: skip


def write_locomo(path: Path) -> Path:
    conversation: dict[str, Any] = {"speaker_a": "Ana", "speaker_b": "Ben"}
    for index, (when, turns) in enumerate(SESSIONS, start=1):
        conversation[f"session_{index}_date_time"] = when
        conversation[f"session_{index}"] = [
            {"speaker": speaker, "dia_id": f"D{index}:{turn}", "text": text}
            for turn, (speaker, text) in enumerate(turns, start=1)
        ]
    path.write_text(json.dumps([{"sample_id": "synth-1", "conversation": conversation, "qa": QA}]))
    return path
