"""The README a newcomer reads: short, the two set-up commands first, no internal history,
every relative link resolving; and the docs free of internal references too."""

from __future__ import annotations

import datetime
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
FENCE = re.compile(r"^```(\w*)([^\n]*)\n(.*?)^```\s*$", re.M | re.S)
# Words that belong to the project's own history, not to a user's page.
INTERNAL = re.compile(r"DESIGN\.md|SPEC\.md|\bseed/|\bseed's\b|\bS\d{1,3}[a-z]?\b|\bissue \d+|"
                      r"\brooms?\b|\bP\d{1,2}\b.*\bbefore\b", re.I)
# A dated measurement is history; example dates (a cron across a DST change) are set ahead of
# every date the project's own history has, so they are told apart without a clock.
DATE = re.compile(r"\b(20\d\d)-(\d\d)-(\d\d)\b")
HISTORY_BEFORE = datetime.date(2027, 1, 1)
DOC_PAGES = sorted(p for p in (ROOT / "docs").rglob("*.md"))
# Pages outside docs/ that ship in the repository and carry measured figures.
FIGURE_PAGES = [ROOT / "bench" / "README.md", ROOT / "deploy" / "README.md"]


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


@pytest.mark.parametrize("page", [ROOT / "README.md", *FIGURE_PAGES, *DOC_PAGES],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_no_internal_history_or_outside_files(page: Path) -> None:
    text = page.read_text()
    found = [m.group(0) for m in INTERNAL.finditer(text)]
    found += [m.group(0) for m in DATE.finditer(text)
              if datetime.date(*map(int, m.groups())) < HISTORY_BEFORE]
    assert not found, f"{page.relative_to(ROOT)}: {found[:10]}"


def test_every_relative_link_of_the_readme_resolves() -> None:
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    relative = [link for link in links if not re.match(r"^[a-z]+:", link)]
    assert relative
    missing = [link for link in relative if not (ROOT / link).exists()]
    assert not missing


SHIPPED = ["shared", "workers", "dispatcher", "reactq", "deploy"]
SHIPPED_FILES = ["Makefile", "pyproject.toml", "setup.py", "Procfile", ".ci/run", "mkdocs.yml"]
CODE_INTERNAL = re.compile(r"DESIGN(\.md)?\b|SPEC(\.md)?\b|\bseed/|\bseed's\b|(?<!noqa: )\bS\d{1,3}[a-z]?\b|"
                           r"\b[Ii]ssue \d+|§|README \"")


def _shipped() -> list[Path]:
    files = [ROOT / f for f in SHIPPED_FILES]
    for top in SHIPPED:
        files += [p for p in (ROOT / top).rglob("*") if p.is_file() and "__pycache__" not in p.parts
                  and p.suffix in (".py", ".js", ".html", ".css", ".md", ".yaml", ".yml", ".toml", ".jsonl", "")]
    return files


def test_shipped_files_name_no_design_documents_spec_numbers_or_issues() -> None:
    found = []
    for path in _shipped():
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if CODE_INTERNAL.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
    assert not found, "\n".join(found[:30])


def test_the_benchmarks_code_names_no_issues_or_dated_history() -> None:
    """bench/ ships in the repository; its result files carry their dates, its code does not."""
    found = []
    for path in sorted((ROOT / "bench").rglob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            dates = [m for m in DATE.finditer(line) if datetime.date(*map(int, m.groups())) < HISTORY_BEFORE]
            if re.search(r"\b[Ii]ssue \d+", line) or dates:
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
    assert not found, "\n".join(found[:30])
