"""The README a newcomer reads: short, the two set-up commands first, no internal history,
every relative link resolving; and the docs free of internal references too."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
FENCE = re.compile(r"^```(\w*)([^\n]*)\n(.*?)^```\s*$", re.M | re.S)
# Words that belong to the project's own history, not to a user's page.
INTERNAL = re.compile(r"DESIGN\.md|SPEC\.md|\bseed/|\bseed's\b|\bS\d{1,3}[a-z]?\b|\bissue \d+|"
                      r"\b20\d\d-\d\d-\d\d\b|\brooms?\b|\bP\d{1,2}\b.*\bbefore\b", re.I)
DOC_PAGES = sorted(p for p in (ROOT / "docs").rglob("*.md"))


def test_the_readme_is_at_most_250_lines() -> None:
    assert len(README.splitlines()) <= 250


def test_the_first_code_block_is_the_two_set_up_commands() -> None:
    first = FENCE.search(README)
    assert first is not None
    commands = [line.split("#")[0].strip() for line in first.group(3).splitlines() if line.strip()]
    assert commands == ["make demo", "make test"]


def test_the_makefile_has_both_targets() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)


@pytest.mark.parametrize("page", [ROOT / "README.md", *DOC_PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_internal_history_or_outside_files(page: Path) -> None:
    text = page.read_text()
    found = [m.group(0) for m in INTERNAL.finditer(text)]
    assert not found, f"{page.relative_to(ROOT)}: {found[:10]}"


def test_every_relative_link_of_the_readme_resolves() -> None:
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    relative = [link for link in links if not re.match(r"^[a-z]+:", link)]
    assert relative
    missing = [link for link in relative if not (ROOT / link).exists()]
    assert not missing
