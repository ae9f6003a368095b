"""The server's access log never holds a credential: a query parameter that names one
(``?api_key=mh_...``, refused by the gate) is written with its value blanked.

uvicorn writes each access line from the arguments ``(client, method, path with query,
http version, status)``; the filter rewrites the path before any handler formats it.
"""

from __future__ import annotations

import logging
from urllib.parse import parse_qsl, urlencode

from memharness.server.gate import SECRET_PARAMS

ACCESS_LOGGER = "uvicorn.access"
BLANK = "REDACTED"


def redact_path(path: str) -> str:
    """``path`` with the value of every credential parameter of its query blanked."""
    base, mark, query = path.partition("?")
    if not mark:
        return path
    pairs = parse_qsl(query, keep_blank_values=True)
    if not any(name.lower() in SECRET_PARAMS for name, _ in pairs):
        return path
    blanked = [(n, BLANK if n.lower() in SECRET_PARAMS else v) for n, v in pairs]
    return f"{base}?{urlencode(blanked)}"


class RedactSecrets(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            record.args = (*args[:2], redact_path(args[2]), *args[3:])
        return True


def redact_access_log() -> None:
    """Add the filter to uvicorn's access logger once (the app's lifespan calls it, after
    uvicorn configured its logging)."""
    logger = logging.getLogger(ACCESS_LOGGER)
    if not any(isinstance(f, RedactSecrets) for f in logger.filters):
        logger.addFilter(RedactSecrets())
