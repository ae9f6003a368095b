"""mkdocs hooks (mkdocs.yml `hooks:`): the pages read the same on the site as on GitHub.

GitHub's tables need a pipe inside a code span escaped (`a\\|b`) and show it as `a|b`;
Python-Markdown leaves code spans alone when it splits a row, so it would show the
backslash. The hook drops it, in table rows outside fenced blocks only.
"""

from __future__ import annotations

import re
from typing import Any

CODE_SPAN = re.compile(r"`[^`\n]+`")


def _unescape_pipes(span: re.Match[str]) -> str:
    return span.group(0).replace("\\|", "|")


def on_page_markdown(markdown: str, **_: Any) -> str:
    lines, fenced = [], False
    for line in markdown.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("|"):
            line = CODE_SPAN.sub(_unescape_pipes, line)
        lines.append(line)
    return "\n".join(lines)
