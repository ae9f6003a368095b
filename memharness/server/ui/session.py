"""Who is looking: the inspector's sign-in. A browser cannot be made to send an
``Authorization`` header, so ``/ui/login`` takes the API key once and keeps it in a cookie
(HttpOnly: no script reads it; SameSite=Strict: no other site's page sends it; Path=/ui: the
API never sees it). Every page resolves that key with the API's own ``KeyResolver`` and rate
limiter, so a revoked key, a scope and a tenant mean exactly what they mean on ``/v1/``.

Actions are POST forms carrying a CSRF token derived from the key (an HMAC of a fixed label
under the key's text): the same in every server process with nothing stored, and unknowable
to a page that cannot read the cookie.
"""

from __future__ import annotations

import hashlib
import hmac

from fastapi import Request

from memharness.server.access import runtime_of
from memharness.server.keys import KeyRecord, Scope

COOKIE = "memharness_ui"
COOKIE_PATH = "/ui"
# A working day: long enough not to sign in again mid-investigation, short enough that a
# forgotten browser does not hold a key for a week. Revoking the key ends it at once.
COOKIE_MAX_AGE_S = 8 * 3600
CSRF_LABEL = b"memharness-ui-csrf-v1"


class UiRefusal(Exception):
    """A page or action refused: its status and the sentence the page shows."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(message)


class SignedIn:
    """The resolved key of a request and the CSRF token its forms carry."""

    def __init__(self, record: KeyRecord, key_text: str) -> None:
        self.record = record
        self.csrf = csrf_token(key_text)

    @property
    def tenant_id(self) -> str:
        return self.record.tenant_id

    @property
    def can_act(self) -> bool:
        return self.record.allows(Scope.WRITE)

    def actor(self) -> str:
        """Who the event log says acted: the key's public prefix, as the API records it."""
        return f"ui:{self.record.prefix}"


def csrf_token(key_text: str) -> str:
    return hmac.new(key_text.encode(), CSRF_LABEL, hashlib.sha256).hexdigest()


async def resolve_key(request: Request, text: str) -> KeyRecord | None:
    """The live key ``text`` is, through the API's resolver; its rate is the API's too."""
    runtime = runtime_of(request)
    record = await runtime.resolver.resolve(text)
    if record is None:
        return None
    verdict = await runtime.limiter.take(str(record.id))
    if not verdict.allowed:
        raise UiRefusal(429, f"this key is over its rate; retry after {verdict.retry_after_s} s")
    return record


async def signed_in(request: Request) -> SignedIn | None:
    """The request's key, or None: no cookie, or a key no longer live."""
    text = request.cookies.get(COOKIE)
    if not text:
        return None
    record = await resolve_key(request, text)
    return None if record is None else SignedIn(record, text)


def check_action(who: SignedIn, form: dict[str, str]) -> None:
    """An action needs the write scope (admin holds it) and this session's CSRF token."""
    if not hmac.compare_digest(form.get("csrf", ""), who.csrf):
        raise UiRefusal(403, "the form's CSRF token does not match this session: reload the page")
    if not who.can_act:
        raise UiRefusal(403, "this key lacks the write scope: it can look, not act")
