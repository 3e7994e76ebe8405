"""Every code example of the README and the docs is run by a test, or says why not.

* ``python title="F"`` / ``python run`` blocks (any language) are run by the page's own test, a
  test module that names the page;
* ``bash quickstart`` blocks of the README are run by tests/integration/test_readme_quickstart.py;
* ``toml registry`` blocks are model-registry examples: validated here against the registry's schema;
* a block marked ``skip`` is not run (the set-up commands, an install, a minutes-long benchmark,
  an outline with elisions), and there are few of them;
* ``console`` and ``text`` blocks are transcripts (what a command printed), not code.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```(\w*)([^\n]*)\n(.*?)^```\s*$", re.M | re.S)
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def runner_of(page: str) -> Path | None:
    """The test that runs a page's examples as written: a test module that names the page."""
    for test in sorted((ROOT / "tests").rglob("test_*.py")):
        if test.name != Path(__file__).name and page in test.read_text(errors="replace"):
            return test
    return None


TRANSCRIPTS = {"console", "text", ""}
MAX_SKIPPED = 8


def blocks() -> list[tuple[str, str, str, str]]:
    out = []
    for page in PAGES:
        rel = page.relative_to(ROOT).as_posix()
        out += [(rel, m.group(1), m.group(2).strip(), m.group(3)) for m in FENCE.finditer(page.read_text())]
    return out


def test_every_code_block_is_run_checked_or_marked_skip() -> None:
    unaccounted = []
    for page, lang, info, _ in blocks():
        if lang in TRANSCRIPTS or "skip" in info.split() or (lang == "toml" and info == "registry"):
            continue
        if (lang == "bash" and info == "quickstart") or info == "run" or info.startswith("title="):
            assert runner_of(page), f"{page}: a `{lang} {info}` block, but no test runs this page's examples"
            continue
        unaccounted.append(f"{page}: ```{lang} {info}")
    assert not unaccounted, "blocks no test runs (run them, or mark them `skip`):\n" + "\n".join(unaccounted)


def test_few_blocks_are_skipped() -> None:
    skipped = [(p, lang) for p, lang, info, _ in blocks() if "skip" in info.split()]
    assert len(skipped) <= MAX_SKIPPED, skipped


@pytest.mark.parametrize("code", [c for _, lang, info, c in blocks() if lang == "toml" and info == "registry"])
def test_registry_examples_are_valid_registry_files(code: str) -> None:
    from reactq.shared.llm.registry import ModelEntry

    models = tomllib.loads(code)["models"]
    assert models
    for name, entry in models.items():
        assert ModelEntry.model_validate(entry).model, name


def test_the_registry_reference_example_is_a_valid_registry_file() -> None:
    from docs.gen.ref_registry import EXAMPLE

    test_registry_examples_are_valid_registry_files(EXAMPLE)
