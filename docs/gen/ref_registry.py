"""The model-registry reference: every key of a ``[models.NAME]`` table, from the registry's
pydantic models."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from docs.gen.fields import annotation, cell, constraints, field_docs

EXAMPLE = '''\
[models.main]
model = "gpt-4o-mini"
api_key_env = "OPENAI_API_KEY"
roles = ["general", "fast"]
context_size = 128000
rpm = 500
tpm = 200000
abilities = { tool_call = true, json_mode = true, streaming = true }

[models.planner]
model = "gpt-4o"
api_key_env = "OPENAI_API_KEY"
roles = ["smart", "reasoning"]
'''


def _default(field: Any) -> str:
    if field.default_factory is not None:
        return "empty"
    if field.default is PydanticUndefined:
        return "required"
    if field.default is None:
        return "unset"
    return str(field.default).lower() if isinstance(field.default, bool) else str(field.default)


def table(model: type[BaseModel]) -> list[str]:
    docs = field_docs(model)
    out = ["| Key | Type | Default | Meaning |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        if not docs.get(name):
            raise ValueError(f"{model.__module__}.{model.__name__}.{name} has no docstring: say what it means")
        limits = constraints(field.metadata)
        typ = annotation(model, name) + (f" ({limits})" if limits else "")
        out.append(f"| `{name}` | `{cell(typ)}` | `{cell(_default(field))}` | {cell(docs[name])} |")
    return out


def render() -> str:
    from reactq.shared.llm.registry import Abilities, ModelEntry

    lines = ["# Model registry", "",
             "`REACTQ_MODELS` names a TOML file of models. Each `[models.NAME]` table is one model; "
             "runs and DAG steps ask for a model by name or by role. Without a file, one model "
             "(`REACTQ_MODEL`, with `OPENAI_API_KEY` and `OPENAI_BASE_URL`) serves every role. "
             "Unknown keys are errors, so a typo cannot silently drop a setting. "
             "This page is generated from the registry's schema.", "",
             "```toml", EXAMPLE.rstrip(), "```", "", "## `[models.NAME]`", ""]
    lines += table(ModelEntry)
    lines += ["", "## `abilities`", "", "A table (`abilities = { … }`) of what the model can do.", ""]
    lines += table(Abilities)
    return "\n".join(lines) + "\n"
