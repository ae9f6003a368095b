"""Headless Chromium renders a page as a person would see it, and takes its screenshot.

Used by ``make demo`` (a screenshot of Flower) and by the browser tests of Flower and of the
inspector. Chromium is
driven over the DevTools protocol on a pair of pipes (``--remote-debugging-pipe``: commands
in on fd 3, answers out on fd 4, each message NUL-terminated), so there is no debugging port
to find or to collide with, and nothing beyond the standard library and Debian's
``chromium``. Basic auth goes in an ``Authorization`` header on every request the page makes
(the document and its XHRs alike), the way a browser resends credentials once typed.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# A desktop window: Flower's tables lay out in full, without the mobile menu.
WINDOW = (1480, 900)


class BrowserError(RuntimeError):
    """Chromium could not be started, or did not answer within the time given."""


@dataclass(frozen=True)
class RenderedPage:
    url: str
    status: int | None  # the HTTP status of the document, as the browser received it
    error: str | None  # the browser's error for the navigation (net::ERR_...), if any
    text: str  # document.body.innerText once the page showed what was waited for
    title: str
    screenshot: Path | None

    def shows(self, words: str) -> bool:
        """Whether ``words`` are on the page. innerText breaks a line between inline-block
        spans that read as one word (Flower splits a long worker name in two for its
        ellipsis), so the check ignores line breaks and tabs."""
        return _unbroken(words) in _unbroken(self.text)


def _unbroken(text: str) -> str:
    return re.sub(r"[\n\t]+", "", text)


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class _DevTools:
    """One DevTools session over the pipes: commands by id, events kept until asked for."""

    def __init__(self, write_fd: int, read_fd: int) -> None:
        self._write_fd = write_fd
        self._read_fd = read_fd
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrowserError("chromium did not answer in time")
            ready, _, _ = select.select([self._read_fd], [], [], remaining)
            if ready:
                chunk = os.read(self._read_fd, 1 << 20)
                if not chunk:
                    raise BrowserError("chromium closed its DevTools pipe")
                self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        decoded: dict[str, Any] = json.loads(message)
        return decoded

    def send(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        session: str | None = None,
        timeout_s: float = 15.0,
    ) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._write_fd, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout_s
        while True:
            answer = self._read(deadline)
            if answer.get("id") != self._next_id:
                self.events.append(answer)
                continue
            if "error" in answer:
                raise BrowserError(f"{method}: {answer['error'].get('message')}")
            result: dict[str, Any] = answer.get("result", {})
            return result

    def wait_event(self, method: str, *, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            for event in self.events:
                if event.get("method") == method:
                    self.events.remove(event)
                    return event
            self.events.append(self._read(deadline))


def _high_pipe() -> tuple[int, int]:
    """A pipe on fds above 9, so that moving its ends to fds 3 and 4 never closes them."""
    low = os.pipe()
    high = tuple(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in low)
    for fd in low:
        os.close(fd)
    return high[0], high[1]


@contextlib.contextmanager
def _chromium(binary: str, log_path: Path | None) -> Iterator[_DevTools]:
    commands_r, commands_w = _high_pipe()
    answers_r, answers_w = _high_pipe()
    profile = tempfile.mkdtemp(prefix="memharness-chromium-")
    flags = [
        "--headless", "--remote-debugging-pipe", f"--user-data-dir={profile}",
        "--disable-gpu", "--no-first-run", "--no-default-browser-check", "--hide-scrollbars",
        "--disable-extensions", "--disable-background-networking", "--disable-sync",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
    ]  # fmt: skip
    if os.geteuid() == 0:  # Chromium refuses to run its sandbox as root (containers, CI)
        flags.append("--no-sandbox")
    # The pipes must be fds 3 and 4 in chromium: bash (dash takes only one-digit fds) moves
    # them there before exec.
    script = f'exec "$0" "$@" 3<&{commands_r} 4>&{answers_w} {commands_r}<&- {answers_w}>&-'
    log = log_path.open("ab") if log_path else subprocess.DEVNULL
    try:
        proc = subprocess.Popen(
            ["/bin/bash", "-c", script, binary, *flags, "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            pass_fds=(commands_r, answers_w),
            start_new_session=True,
        )
    finally:
        os.close(commands_r)
        os.close(answers_w)
        if log_path and not isinstance(log, int):
            log.close()
    devtools = _DevTools(commands_w, answers_r)
    try:
        yield devtools
        with contextlib.suppress(BrowserError, OSError):
            devtools.send("Browser.close", timeout_s=5)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:  # its renderer and zygote share the process group
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
        os.close(commands_w)
        os.close(answers_r)
        shutil.rmtree(profile, ignore_errors=True)


def _page_text(devtools: _DevTools, session: str) -> tuple[str, str]:
    result = devtools.send(
        "Runtime.evaluate",
        {
            "expression": "JSON.stringify([document.title, document.body ? "
            "document.body.innerText : ''])",
            "returnByValue": True,
        },
        session=session,
    )
    title, text = json.loads(result["result"]["value"])
    return str(title), str(text)


def render(
    url: str,
    *,
    basic_auth: str | None = None,
    cookies: Mapping[str, str] | None = None,
    wait_for: Sequence[str] = (),
    screenshot: Path | None = None,
    timeout_s: float = 30.0,
    chromium: str | None = None,
    log_path: Path | None = None,
) -> RenderedPage:
    """Load ``url`` in headless Chromium, wait until every string of ``wait_for`` is on the
    rendered page (scripts and their XHRs included) or the time is up, and return what the
    page shows; ``screenshot`` saves a PNG of the window. ``cookies`` are set for ``url``'s
    site before it loads (HttpOnly, SameSite=Strict, as a sign-in form would have set them)."""
    binary = chromium or find_chromium()
    if binary is None:
        raise BrowserError("chromium is not installed (Debian: apt-get install chromium)")
    deadline = time.monotonic() + timeout_s
    with _chromium(binary, log_path) as devtools:
        target = devtools.send("Target.createTarget", {"url": "about:blank"})
        attached = devtools.send(
            "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}
        )
        session = attached["sessionId"]
        devtools.send("Network.enable", session=session)
        if basic_auth is not None:
            token = base64.b64encode(basic_auth.encode()).decode()
            devtools.send(
                "Network.setExtraHTTPHeaders",
                {"headers": {"Authorization": f"Basic {token}"}},
                session=session,
            )
        for name, value in (cookies or {}).items():
            devtools.send(
                "Network.setCookie",
                {"name": name, "value": value, "url": url, "path": "/", "httpOnly": True,
                 "sameSite": "Strict"},
                session=session,
            )  # fmt: skip
        devtools.send("Page.enable", session=session)
        devtools.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": WINDOW[0], "height": WINDOW[1], "deviceScaleFactor": 1, "mobile": False},
            session=session,
        )
        navigated = devtools.send("Page.navigate", {"url": url}, session=session)
        error = navigated.get("errorText") or None
        devtools.wait_event("Page.loadEventFired", timeout_s=max(1.0, deadline - time.monotonic()))
        status = _document_status(devtools, navigated.get("loaderId"))
        title, text = _page_text(devtools, session)
        while time.monotonic() < deadline and not all(
            _unbroken(words) in _unbroken(text) for words in wait_for
        ):
            time.sleep(0.25)  # Flower fills its tables from XHRs after the load event
            title, text = _page_text(devtools, session)
        saved = None
        if screenshot is not None:
            shot = devtools.send("Page.captureScreenshot", {"format": "png"}, session=session)
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            screenshot.write_bytes(base64.b64decode(shot["data"]))
            saved = screenshot
    return RenderedPage(
        url=url, status=status, error=error, text=text, title=title, screenshot=saved
    )


def _document_status(devtools: _DevTools, loader_id: str | None) -> int | None:
    for event in devtools.events:
        params = event.get("params", {})
        if (
            event.get("method") == "Network.responseReceived"
            and params.get("type") == "Document"
            and (loader_id is None or params.get("loaderId") == loader_id)
        ):
            return int(params["response"]["status"])
    return None
