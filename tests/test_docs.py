"""The README and the docs site: a short front door, every page reachable, no private references.

``make docs`` builds the site with ``mkdocs build --strict`` (broken links and
anchors fail there); these checks need no build: the README stays a front door,
every page under ``docs/`` is in ``mkdocs.yml``'s navigation, no page shows a
path of one machine, and no tracked file cites the project's private brief by
section number (a reader cannot follow such a citation: the fact itself belongs
in the comment or in ``docs/``).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

PROJECT = Path(__file__).resolve().parents[1]
DOCS = PROJECT / "docs"
README_MAX_LINES = 250
MACHINE_PATHS = ("/work/", "/tmp/", "/root/")
BRIEF_CITATION = re.compile(r"SPEC\s+\d")


def nav_pages(entries: Any) -> list[str]:
    """Every page file named in an mkdocs ``nav`` (nested sections included)."""
    if isinstance(entries, str):
        return [entries]
    if isinstance(entries, list):
        return [page for entry in entries for page in nav_pages(entry)]
    if isinstance(entries, dict):
        return [page for value in entries.values() for page in nav_pages(value)]
    return []


def docs_pages() -> list[Path]:
    """The Markdown pages of the site."""
    return sorted(DOCS.glob("*.md"))


def test_the_readme_is_a_front_door_of_under_250_lines() -> None:
    lines = (PROJECT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < README_MAX_LINES, f"README.md has {len(lines)} lines"


def test_every_docs_page_is_in_the_mkdocs_nav_and_every_nav_entry_exists() -> None:
    config = yaml.safe_load((PROJECT / "mkdocs.yml").read_text(encoding="utf-8"))
    in_nav = nav_pages(config["nav"])
    assert len(in_nav) == len(set(in_nav)), f"a page is listed twice: {in_nav}"
    on_disk = {page.name for page in docs_pages()}
    assert on_disk - set(in_nav) == set(), "pages missing from mkdocs.yml nav"
    assert set(in_nav) - on_disk == set(), "nav entries with no page"


def test_the_readme_links_only_to_docs_pages_that_exist() -> None:
    readme = (PROJECT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\((docs/[^)#\s]+)", readme)
    assert targets, "the README links to no docs page"
    missing = [target for target in targets if not (PROJECT / target).is_file()]
    assert missing == []


@pytest.mark.parametrize("page", docs_pages(), ids=lambda page: page.name)
def test_no_docs_page_shows_a_path_of_one_machine(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    found = [
        f"line {number}: {line.strip()}"
        for number, line in enumerate(text.splitlines(), start=1)
        if any(path in line for path in MACHINE_PATHS)
    ]
    assert found == [], f"{page.name} shows a machine path"


def test_the_readme_shows_no_path_of_one_machine() -> None:
    text = (PROJECT / "README.md").read_text(encoding="utf-8")
    assert [path for path in MACHINE_PATHS if path in text] == []


def tracked_text_files() -> list[Path]:
    """Every file git tracks outside ``.ci/`` that reads as UTF-8 text."""
    listing = subprocess.run(
        ["git", "ls-files", "-z"], cwd=PROJECT, capture_output=True, check=True
    ).stdout.decode()
    files = []
    for name in filter(None, listing.split("\0")):
        path = PROJECT / name
        if name.startswith(".ci/") or not path.is_file():
            continue
        try:
            path.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # images and other binary files
            continue
        files.append(path)
    return files


def test_no_tracked_file_cites_the_brief_by_section() -> None:
    files = tracked_text_files()
    assert len(files) > 50, "git ls-files found too few files to be this repository"
    citing = sorted(
        str(path.relative_to(PROJECT))
        for path in files
        if BRIEF_CITATION.search(path.read_text(encoding="utf-8"))
    )
    assert citing == [], "these files cite 'SPEC <section>'; state the fact itself"
