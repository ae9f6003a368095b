"""Progress of long jobs for a person at a terminal, and nothing for anyone else.

``with progress("re-embedding", total=n) as bar: bar.advance(k)`` draws a ``rich`` bar on
stderr only when stderr is a terminal and ``CI`` is unset (and the caller did not ask for
quiet, as ``--json`` does). Otherwise every call is a no-op, except :meth:`Progress.note`,
which prints its line to stderr as before: logs and CI output keep their step lines.

stdout is never touched (``redirect_stdout=False``), so a benchmark's last stdout line stays
its JSON object; the bar is transient and is erased when the block ends.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.progress import Progress as RichProgress
    from rich.progress import TaskID

ProgressFn = Callable[[int, int | None], None]
"""``(done, total)``: the callback shape of ``MemoryClient.export`` / ``import_file``."""


def progress_enabled(quiet: bool = False) -> bool:
    """Progress is for a person at a terminal: never in CI, with --json or when piped."""
    return not quiet and not os.environ.get("CI") and sys.stderr.isatty()


class Progress:
    """One job's progress: a bar when ``total`` is known, a spinner and a status otherwise."""

    def __init__(self, bar: RichProgress | None = None, task: TaskID | None = None) -> None:
        self._bar = bar
        self._task = task

    @property
    def enabled(self) -> bool:
        return self._bar is not None

    def advance(self, n: int = 1) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.advance(self._task, n)

    def update(
        self, text: str | None = None, *, completed: int | None = None, total: int | None = None
    ) -> None:
        """Change the status line, the count done or the total (``None`` leaves it)."""
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, description=text, completed=completed, total=total)

    def note(self, text: str) -> None:
        """A step's line: the status on a terminal, a plain stderr line everywhere else."""
        if self._bar is None:
            print(text, file=sys.stderr, flush=True)
        else:
            self.update(text)

    def callback(self) -> ProgressFn | None:
        """The ``(done, total)`` callback for the client's export/import, or None when off."""
        if self._bar is None:
            return None

        def report(done: int, total: int | None) -> None:
            self.update(completed=done, total=total)

        return report


@contextlib.contextmanager
def progress(label: str, total: int | None = None, *, quiet: bool = False) -> Iterator[Progress]:
    """A transient bar on stderr for the block, or a no-op when nobody is watching."""
    if not progress_enabled(quiet):
        yield Progress()
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )
    from rich.progress import Progress as RichProgress

    columns = [SpinnerColumn(), TextColumn("{task.description}")]
    if total is not None:
        columns += [BarColumn(), MofNCompleteColumn()]
    bar = RichProgress(
        *columns,
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
        redirect_stdout=False,
    )
    with bar:
        yield Progress(bar, bar.add_task(label, total=total))
