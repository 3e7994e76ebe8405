"""The configuration reference: every field of every settings class, and every environment
variable that shipped code reads directly (found by reading the source)."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, SecretStr
from pydantic_settings import BaseSettings

from docs.gen.fields import annotation, cell, constraints, field_docs

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("reactq", "shared", "workers", "dispatcher")

#: Environment variables read outside the settings classes, and what they mean. A name the
#: source reads that is missing here fails the docs build (and tests/unit/test_docs_reference.py).
OTHER: dict[str, tuple[str, str, str]] = {
    "REACTQ_SSE_KEEPALIVE": ("float", "15", "Seconds between keep-alive comments on an idle SSE stream."),
    "REACTQ_FLOWER_URL": ("str", "unset", "Where the viewer's links to Flower point."),
    "OTEL_EXPORTER_OTLP_ENDPOINT": ("str", "unset", "Send OpenTelemetry traces there (needs the `otel` extra)."),
    "OTEL_SERVICE_NAME": ("str", "reactq-worker", "The service name on the traces."),
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": (
        "bool", "false", "Put prompts and completions on the traces' spans."),
    "OPENAI_API_KEY": ("str", "unset", "Also scrubbed from every error message and event."),
    "XDG_DATA_HOME": ("str", "~/.local/share", "The per-user data folder; `REACTQ_DATA_DIR` defaults to `reactq` in it."),
    "REACTQ_FAULT_POINTS": ("str", "unset", "Testing only: comma-separated fault points (`point` or `point:task`: "
                            "`before_lease`, `in_lease`, `after_commit`) where a worker stops, raises or dies."),
    "REACTQ_FAULT_FILE": ("str", "unset", "Testing only: created by the first process that reaches a point; each "
                          "point fires once per file."),
    "REACTQ_FAULT_SKIP": ("int", "0", "Testing only: arrivals at a point to let pass first, per process."),
    "REACTQ_FAULT_ACTION": ("str", "stop", "Testing only: `stop` (SIGSTOP, for the test to kill), `raise`, or "
                            "`kill` (every arrival, a poison pill)."),
    "REACTQ_FAULT_KEY": ("str", "unset", "Testing only: with `kill`, only this run id dies."),
}

#: Reads whose variable name comes from configuration, documented where that configuration is.
DYNAMIC = {
    "shared/settings.py": "`env_value`: a registry entry's `api_key_env` (see the model-registry reference) and "
                          "an MCP server's `headers_from_env` (see the tools guide) name the variable to read",
}


@dataclass(frozen=True)
class Row:
    names: list[str]
    type: str
    default: str
    meaning: str
    deprecated: list[str]


def settings_classes() -> list[type[BaseSettings]]:
    """Every pydantic-settings class defined in reactq (imports every module to find them)."""
    # The entry points first: some modules are only importable after the one that uses them.
    for entry in ("reactq", "reactq.dispatcher.http.app", "reactq.dispatcher.cli", "reactq.workers.app"):
        importlib.import_module(entry)
    for sub in SHIPPED[1:]:  # reactq.shared, … live in their own folders (see setup.py)
        package = importlib.import_module(f"reactq.{sub}")
        for info in pkgutil.walk_packages(package.__path__, f"reactq.{sub}."):
            if not info.name.endswith(".__main__"):  # running a command is not defining a class
                importlib.import_module(info.name)
    found: list[type[BaseSettings]] = []
    todo = list(BaseSettings.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if cls.__module__.startswith("reactq.") and cls.model_fields and cls not in found:
            found.append(cls)
    return sorted(found, key=lambda c: (c.__module__, c.__name__))


def env_names(cls: type[BaseSettings], name: str) -> tuple[list[str], list[str]]:
    """(current names, deprecated names) of one field."""
    alias = cls.model_fields[name].validation_alias or cls.model_fields[name].alias
    if alias is None:
        return [f"{cls.model_config.get('env_prefix', '')}{name}".upper()], []
    if isinstance(alias, AliasChoices):
        names = [c for c in alias.choices if isinstance(c, str)]
        return names[:1], names[1:]
    return [str(alias)], []


def _default(field: Any) -> str:
    if field.default_factory is not None:
        return "computed"
    value = field.default
    if value is None:
        return "unset"
    if isinstance(value, SecretStr):
        return "(secret)"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str) and not value:
        return '""'
    return str(value)


def rows(cls: type[BaseSettings]) -> list[Row]:
    docs = field_docs(cls)
    out = []
    for name, field in cls.model_fields.items():
        current, old = env_names(cls, name)
        limits = constraints(field.metadata)
        meaning = docs.get(name, "")
        if not meaning:
            raise ValueError(f"{cls.__module__}.{cls.__name__}.{name} has no docstring: say what it means")
        out.append(Row(current, annotation(cls, name) + (f" ({limits})" if limits else ""),
                       _default(field), meaning, old))
    return out


def _constant(tree: ast.Module, name: str) -> list[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            value = node.value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                return [value.value]
            if isinstance(value, (ast.Tuple, ast.List)):
                return [e.value for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def _is_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ")


def _read_arg(node: ast.AST) -> ast.AST | None:
    """The name argument of an environment read (``os.environ.get(X)``, ``os.getenv(X)``,
    ``os.environ[X]``), or None when ``node`` is not one."""
    if isinstance(node, ast.Call) and node.args:
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "get" and _is_environ(f.value):
            return node.args[0]
        if isinstance(f, ast.Attribute) and f.attr == "getenv":
            return node.args[0]
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_environ(node.value):
        return node.slice
    return None


def environment_reads() -> tuple[dict[str, list[str]], list[str]]:
    """(variable → files that read it, files whose reads name no fixed variable)."""
    found: dict[str, list[str]] = {}
    dynamic: list[str] = []
    for top in SHIPPED:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            tree = ast.parse(path.read_text())
            loops = {n.target.id: n.iter for n in ast.walk(tree)
                     if isinstance(n, ast.comprehension) and isinstance(n.target, ast.Name)}
            for node in ast.walk(tree):
                arg = _read_arg(node)
                if arg is None:
                    continue
                names: list[str] = []
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    names = [arg.value]
                elif isinstance(arg, ast.Name):
                    names = _constant(tree, arg.id)
                    source = loops.get(arg.id)
                    if not names and isinstance(source, ast.Name):
                        names = _constant(tree, source.id)
                if not names:
                    dynamic.append(rel)
                for name in names:
                    found.setdefault(name, []).append(rel)
    return found, sorted(set(dynamic))


def render() -> str:
    lines = ["# Configuration", "",
             "Every setting is an environment variable. This page is generated from the settings "
             "classes and from the source: a setting that is not here does not exist.", "",
             "Names under `REACTQ_` are current. A few settings had older names; they still work "
             "but log a `DeprecationWarning` (shown as *formerly*).", ""]
    documented: set[str] = set()
    for cls in settings_classes():
        doc = (cls.__doc__ or "").strip().splitlines()[0]
        lines += [f"## {cls.__name__}", "", f"{doc} (`{cls.__module__}`)", "",
                  "| Variable | Type | Default | Meaning |", "|---|---|---|---|"]
        for row in rows(cls):
            documented.update(row.names + row.deprecated)
            name = "<br>".join(f"`{n}`" for n in row.names)
            if row.deprecated:
                name += "<br>formerly " + ", ".join(f"`{n}`" for n in row.deprecated)
            lines.append(f"| {name} | `{cell(row.type)}` | `{cell(row.default)}` | {cell(row.meaning)} |")
        lines.append("")
    reads, dynamic = environment_reads()
    missing = sorted(n for n in reads if n not in documented and n not in OTHER)
    if missing:
        raise ValueError(f"environment variables read but not documented in docs/gen/ref_config.py: {missing}")
    unexplained = [f for f in dynamic if f not in DYNAMIC]
    if unexplained:
        raise ValueError(f"environment reads with a computed name, unexplained in docs/gen/ref_config.py: {unexplained}")
    lines += ["## Other environment variables", "",
              "Read directly by the code named (not through a settings class).", "",
              "| Variable | Type | Default | Meaning | Read in |", "|---|---|---|---|---|"]
    for name in sorted(n for n in reads if n in OTHER or n not in documented):
        typ, default, meaning = OTHER[name]
        where = ", ".join(f"`{f}`" for f in sorted(set(reads[name])))
        lines.append(f"| `{name}` | `{typ}` | `{default}` | {cell(meaning)} | {where} |")
    lines += ["", "Variables named by configuration:", ""]
    lines += [f"* {why} (`{path}`)" for path, why in sorted(DYNAMIC.items())]
    return "\n".join(lines) + "\n"
