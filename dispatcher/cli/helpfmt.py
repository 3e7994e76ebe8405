"""How ``--help`` names things: arguments in capitals as usage lines do (``reactq run [OPTIONS]
QUERY``, ``[PLAN]`` when optional), flags without a type (``--json``, not ``--json <bool>``).
Typer's own help names a required argument ``{query}`` and types every flag ``<bool>``; these
two of its methods are replaced once, when the command line is built."""

from __future__ import annotations

from typing import Any

from typer.core import TyperArgument, TyperOption

_option_type = TyperOption.display_type_rich


def _name(param: Any) -> str:
    return str(param.metavar or param.name or "").upper()


def _usage_name(self: Any) -> str:
    name = _name(self)
    if not self.required:
        name = f"[{name}]"
    return name + ("..." if self.nargs != 1 else "")


def _panel_name(self: Any) -> str:
    return _name(self) + ("..." if self.metavar is None and self.nargs != 1 else "")


def _option_type_unless_flag(self: Any, ctx: Any) -> str | None:
    return None if self.is_flag else _option_type(self, ctx)


def install() -> None:
    replaced: tuple[tuple[type, str, Any], ...] = (
        (TyperArgument, "_usage_display_name", _usage_name),
        (TyperArgument, "_rich_display_name", _panel_name),
        (TyperArgument, "display_name_raw", property(_panel_name)),
        (TyperOption, "display_type_rich", _option_type_unless_flag),
    )
    for cls, name, value in replaced:
        setattr(cls, name, value)
