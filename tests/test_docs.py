"""The docs site builds strictly: no broken link or anchor, no page outside the navigation,
nothing fetched from a CDN, and the README's links land on real pages and headings."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# The only INFO lines of a clean build; mkdocs reports a page left out of nav, or a link it
# does not recognise, at INFO when its validation level is info: any other line fails.
CLEAN_BUILD_LINES = ("INFO    -  Cleaning site directory", "INFO    -  Building documentation")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    log = built.stdout + built.stderr
    assert built.returncode == 0, log
    return out, log


def _nav_pages(nav: list[Any]) -> list[str]:
    pages: list[str] = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


def _config() -> dict[str, Any]:
    # mkdocs.yml holds no custom tags, so the safe loader reads it
    config: dict[str, Any] = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    return config


def test_the_site_builds_strictly_with_no_warning_or_notice(site: tuple[Path, str]) -> None:
    _, log = site
    lines = [line for line in log.splitlines() if line.strip()]
    unexpected = [
        line
        for line in lines
        if not line.startswith(CLEAN_BUILD_LINES)
        and not re.match(r"INFO    -  Documentation built in [0-9.]+ seconds$", line)
    ]
    assert unexpected == []


def test_strict_validation_stays_on() -> None:
    config = _config()
    assert config["strict"] is True
    levels = config["validation"]
    for key in ("omitted_files", "not_found", "absolute_links"):
        assert levels["nav"][key] == "warn", key
    for key in ("not_found", "anchors", "absolute_links", "unrecognized_links"):
        assert levels["links"][key] == "warn", key


def test_every_page_is_in_the_nav_once() -> None:
    nav = _nav_pages(_config()["nav"])
    pages = sorted(str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md"))
    assert sorted(nav) == pages
    assert len(nav) == len(set(nav))


def test_the_site_fetches_nothing_from_a_cdn(site: tuple[Path, str]) -> None:
    out, _ = site
    for page in out.rglob("*.html"):
        html = page.read_text()
        assert "fonts.googleapis.com" not in html, page
        assert not re.search(r"""(src|href)=["']https?://[^"']*\.(js|css)["']""", html), page


def test_table_cells_show_pipes_as_github_does(site: tuple[Path, str]) -> None:
    # given a cell such as `--embedder hashing\|minilm\|e5`, escaped for GitHub's tables
    out, _ = site
    commands = (out / "commands.html").read_text()
    assert "hashing|minilm|e5" in commands
    for page in out.rglob("*.html"):
        assert "\\|" not in page.read_text(), page


def test_the_readme_links_land_on_pages_and_headings(site: tuple[Path, str]) -> None:
    out, _ = site
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\((docs/[^)#\s]+)(?:#([^)\s]+))?\)", readme)
    assert len(links) >= 10
    for target, anchor in links:
        assert (ROOT / target).is_file(), target
        if target.endswith(".md") and anchor:
            html = (out / Path(target).relative_to("docs").with_suffix(".html")).read_text()
            assert f'id="{anchor}"' in html, f"{target}#{anchor}"


def test_the_images_the_pages_show_exist() -> None:
    for page in DOCS.rglob("*.md"):
        for image in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", page.read_text()):
            assert (page.parent / image).is_file(), f"{page.name}: {image}"
