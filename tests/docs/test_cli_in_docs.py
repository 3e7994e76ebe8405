"""Every ``reactq`` command and flag the pages mention exists in the command line.

The pages (docs/ and the README) are read for ``reactq …`` in inline code and at the start of
command lines in code blocks (``$ reactq …`` too); each command path (``reactq schedules
create``, ``reactq dag status``) must resolve, and each ``--flag`` / ``-f`` after it must be an
option of that command. ``reactq worker`` and ``reactq scheduler`` pass unknown flags on to
Celery: only their command is checked.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import typer

from reactq.dispatcher.cli import VERBS, app, resolve

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
INLINE = re.compile(r"`(reactq [^`]+)`")
LINE = re.compile(r"^\s*(?:\$ )?(reactq(?: [^\n]*)?)$", re.M)
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
FLAG = re.compile(r"^\[?(--?[A-Za-z][\w-]*)")
STOP = {"|", "||", "&&", ";", "&", ">", "2>", "#", "…"}
PASS_THROUGH = {"worker", "scheduler"}


def _mentions() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        text = page.read_text()
        for m in INLINE.finditer(text):
            found.append((page.name, m.group(1)))
        for block in FENCE.finditer(text):
            found.extend((page.name, m.group(1)) for m in LINE.finditer(block.group(1)))
    return found


def _click(command: Any) -> Any:
    return command if hasattr(command, "params") else typer.main.get_command(command)


def _options(command: Any) -> set[str]:
    opts = {"--help"}
    for p in _click(command).params:
        opts.update(getattr(p, "opts", []))
        opts.update(getattr(p, "secondary_opts", []))
    return {o for o in opts if o.startswith("-")}


def _verb_command(name: str, verb: str | None) -> Any:
    sub = typer.Typer()
    sub.command()(resolve(VERBS[name][verb]))
    return typer.main.get_command(sub)


def _resolve(tokens: list[str]) -> tuple[list[tuple[str, Any]], list[str]]:
    """(each command path with its click command, the flags after it)."""
    root = typer.main.get_command(app)
    if not tokens or tokens[0].startswith("-"):
        return [("reactq", root)], tokens
    name, rest = tokens[0], tokens[1:]
    if not re.fullmatch(r"[a-z][a-z-]*", name):
        return [], []  # a diagram's label ("reactq CLI / HTTP gateway"), not a command line
    assert name in root.commands, f"no command 'reactq {name}'"
    if name in VERBS:
        verbs = rest[0].split("|") if rest and all(v in VERBS[name] for v in rest[0].split("|")) else [None]
        rest = rest[1:] if verbs != [None] else rest
        return [(f"reactq {name} {v or ''}".strip(), _verb_command(name, v)) for v in verbs], rest
    command = root.commands[name]
    if hasattr(command, "commands") and rest and not rest[0].startswith("-"):
        subs = list(command.commands) if rest[0] == "…" else rest[0].split("|")
        for sub in subs:
            assert sub in command.commands, f"no command 'reactq {name} {sub}'"
        return [(f"reactq {name} {s}", command.commands[s]) for s in subs], rest[1:]
    return [(f"reactq {name}", command)], rest


def _flags(rest: list[str]) -> list[str]:
    """The flags among ``rest``, up to a pipe, a comment or the like; quoted text is skipped."""
    flags, quote = [], ""
    for token in rest:
        if quote:
            quote = "" if token.rstrip(")").endswith(quote) else quote
            continue
        if token[:1] in "\"'" or token.startswith('"$('):
            opened = token[0]
            quote = "" if len(token) > 1 and token.rstrip(")").endswith(opened) else opened
            continue
        if token in STOP or token.startswith("#"):
            break
        if m := FLAG.match(token.split("=", 1)[0]):
            flags.append(m.group(1).rstrip(","))
    return flags


MENTIONS = _mentions()


def test_the_pages_mention_commands() -> None:
    assert len(MENTIONS) > 50, "the scan finds the pages' commands"


@pytest.mark.parametrize(("page", "snippet"), MENTIONS, ids=[f"{p}:{s[:50]}" for p, s in MENTIONS])
def test_each_command_and_flag_a_page_mentions_exists(page: str, snippet: str) -> None:
    tokens = [t for t in snippet.replace("\\|", "|").split()[1:] if t]
    commands, rest = _resolve(tokens)
    if tokens and tokens[0] in PASS_THROUGH:
        return
    flags = _flags(rest)
    if tokens[1:2] == ["…"]:  # "reactq schedules … --tenant": every subcommand that takes it
        assert any(set(flags) <= _options(c) for _, c in commands), f"{page}: `{snippet}`"
        return
    for path, command in commands:
        missing = [f for f in flags if f not in _options(command)]
        assert not missing, f"{page}: `{snippet}`: {path} has no {missing} (it has {sorted(_options(command))})"
