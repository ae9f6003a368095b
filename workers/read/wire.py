"""The direct read path's wire format: one JSON request on a Redis list, one JSON reply on a
key of the caller's own. Both sides (``workers.read.ask`` in the caller, ``workers.read.reply``
in the store's owner) read and write it through this module only.

A request: ``{"task": name, "kwargs": {...}, "reply": "memharness:reply:<32 hex>",
"deadline": epoch seconds}``. A reply: ``{"trace": {...}, "result": ...}`` or
``{"trace": {...}, "failed": {"type": ..., "message": ...}}``. No pickle anywhere: a read
carries ids, texts and scalars.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from workers.queues import TaskName

# The list the owner's reply slot serves (BRPOP: first in, first served).
REQUESTS_KEY = "memharness:read:requests"
REPLY_PREFIX = "memharness:reply:"
# A reply key is this prefix and a uuid4's hex, nothing else: the owner writes only there, so a
# forged request cannot make it push into another key (a Celery queue, a tenant's window).
REPLY_KEY_RE = re.compile(r"memharness:reply:[0-9a-f]{32}")
# A reply nobody took (its caller timed out as it was pushed) is gone after this; a caller
# that waits takes it within milliseconds of the push.
REPLY_TTL_S = 60
# The request list lives at least this long after the last push: while the owner is down,
# requests pile up only for this long (each is dropped as expired when it comes back anyway).
REQUESTS_TTL_S = 300
# The reads that may come this way: the ``recall`` queue's answers a caller waits for.
DIRECT_READS = frozenset({TaskName.RECALL_CONTEXT.value, TaskName.RECALL_SEARCH.value})


def encode(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class DirectRequest:
    task: str
    kwargs: dict[str, Any]
    reply: str
    deadline: float

    def to_json(self) -> str:
        return encode(
            {"task": self.task, "kwargs": self.kwargs, "reply": self.reply,
             "deadline": self.deadline}
        )  # fmt: skip

    @classmethod
    def from_json(cls, raw: bytes | str) -> DirectRequest:
        """The request, or ValueError naming what is wrong with it."""
        try:
            data = json.loads(raw)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"not JSON ({exc})") from None
        if not isinstance(data, dict):
            raise ValueError(f"not a JSON object but {type(data).__name__}")
        task, kwargs = data.get("task"), data.get("kwargs")
        reply, deadline = data.get("reply"), data.get("deadline")
        if task not in DIRECT_READS:
            raise ValueError(f"task: {task!r} is not a direct read")
        if not isinstance(kwargs, dict):
            raise ValueError("kwargs: must be a JSON object")
        if not isinstance(reply, str) or REPLY_KEY_RE.fullmatch(reply) is None:
            raise ValueError(f"reply: {reply!r} is not a reply key ({REPLY_PREFIX}<32 hex>)")
        if isinstance(deadline, bool) or not isinstance(deadline, int | float):
            raise ValueError("deadline: must be a number (epoch seconds)")
        return cls(task=task, kwargs=kwargs, reply=reply, deadline=float(deadline))


def reply_json(trace: dict[str, float], encoded_body: str) -> str:
    """The reply around an already encoded ``{"result": ...}`` or ``{"failed": ...}`` body:
    the trace's last stamp is taken after the answer was encoded, so it goes in last."""
    return '{"trace":' + encode(trace) + "," + encoded_body[1:]
