"""The CLI reference, from the Typer app."""

from __future__ import annotations

from typing import Any

from docs.gen.fields import cell


def _params(command: Any) -> list[str]:
    args = [p for p in command.params if p.param_type_name == "argument"]
    opts = [p for p in command.params if p.param_type_name == "option" and p.name != "help"]
    usage = " ".join(f"{a.name.upper()}" for a in args)
    lines = []
    if args or opts:
        lines += ["| Argument / option | Default | Meaning |", "|---|---|---|"]
    for a in args:
        lines.append(f"| `{a.name.upper()}` | {'' if a.required else '(optional)'} | {cell(getattr(a, 'help', '') or '')} |")
    for o in opts:
        names = ", ".join(f"`{n}`" for n in o.opts + o.secondary_opts)
        value = getattr(o.default, "value", o.default)  # an Enum's value, as typed on the command line
        default = "" if value in (None, False, ()) else f"`{value}`"
        lines.append(f"| {names} | {cell(default)} | {cell(o.help or '')} |")
    return [usage] + lines


def _section(prog: str, command: Any) -> list[str]:
    params = _params(command)
    usage, table = params[0], params[1:]
    passes = command.context_settings.get("ignore_unknown_options")
    lines = [f"## `{prog}`", "", (command.help or "").strip(), "",
             "```text", f"{prog} [OPTIONS]{' ' + usage if usage else ''}", "```", ""]
    if passes and not table:
        lines += ["Further options are passed on as they are (`--help` lists them).", ""]
    return lines + table + [""]


def render() -> str:
    import typer.main

    from reactq.dispatcher.cli import app, dags

    group = typer.main.get_command(app)
    lines = ["# Command line", "",
             "`reactq` is installed with the package. Exit codes: 0 the run succeeded (or the command did "
             "what it was asked), 1 the run failed or was cancelled, 2 bad usage (including a request "
             "refused at the door, an unknown run id or a configuration error), 130 interrupted. "
             "Generated from the command's own definitions (`reactq COMMAND --help` says the same).", ""]
    lines += _section("reactq", group)
    for name, command in group.commands.items():
        if name == "dag":
            sub = typer.Typer()
            sub.command()(dags.dag)
            command = typer.main.get_command(sub)
            command.help = command.help or (dags.dag.__doc__ or "")
        lines += _section(f"reactq {name}", command)
    return "\n".join(lines)
