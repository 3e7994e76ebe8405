"""The CLI's help is complete (every argument and option says what it is), the exit-code
table is in ``reactq --help`` and docs/cli.md, and ``--version`` prints the version."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path
from typing import Any

import typer
from typer.testing import CliRunner

from reactq.dispatcher.cli import VERBS, app, resolve
from reactq.dispatcher.cli.common import EXIT_CODES

ROOT = Path(__file__).resolve().parents[2]


def _commands() -> dict[str, Any]:
    """Every command a user can type, the verbs of ``dag`` and ``batch`` included."""
    group = typer.main.get_command(app)
    assert hasattr(group, "commands")
    found = {name: cmd for name, cmd in group.commands.items() if name not in VERBS}
    for name, verbs in VERBS.items():
        for verb, spec in verbs.items():
            sub = typer.Typer()
            sub.command()(resolve(spec))
            found[f"{name} {verb}" if verb else name] = typer.main.get_command(sub)
    return found


def test_every_argument_and_option_has_help_text():
    missing = []
    for name, cmd in _commands().items():
        assert cmd.help, f"reactq {name} has no help"
        for param in cmd.params:
            if param.name in ("help", "ctx") or getattr(param, "hidden", False):
                continue
            if not getattr(param, "help", None):
                missing.append(f"reactq {name}: {param.name}")
    assert not missing, missing


def test_the_exit_code_table_is_in_the_help_and_the_docs():
    res = CliRunner().invoke(app, ["--help"], terminal_width=200)
    assert res.exit_code == 0
    help_text = " ".join(res.output.split())
    docs = (ROOT / "docs" / "cli.md").read_text()
    for code, short, long in EXIT_CODES:
        assert f"{code} {short}" in help_text
        assert f"| {code} | {short} | {long} |" in docs


def test_version_prints_the_installed_version():
    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output.strip() == f"reactq {version('reactq')}"


def test_the_older_batch_cancel_name_still_works_but_is_not_listed():
    res = CliRunner().invoke(app, ["--help"], terminal_width=200)
    assert "batch-cancel" not in res.output
    res = CliRunner().invoke(app, ["batch-cancel", "--help"])
    assert res.exit_code == 0 and "BATCH_ID" in res.output.upper()


def test_the_cli_reference_in_the_docs_is_generated_from_the_commands():
    from reactq.dispatcher.cli.reference import rewrite

    page = (ROOT / "docs" / "cli.md").read_text()
    assert rewrite(page) == page, "docs/cli.md is stale: python -m reactq.dispatcher.cli.reference --write"
    for name in ("runs", "dag status", "dag watch", "dag cancel", "batch status", "batch cancel"):
        assert f"### `reactq {name}`" in page
