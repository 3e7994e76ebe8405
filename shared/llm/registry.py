"""The model registry: named LLMs with roles, loaded from TOML or the environment.

Roles in use: ``general`` (the default), ``fast``, ``reasoning``, ``smart`` (DAG planner,
analyzer and synthesis). Any other role string is accepted and simply looked up by name.

What callers may rely on:

* ``resolve(hint)`` looks a role or a model name up, falling back to the default model.
* ``load_registry(settings)`` reads ``settings.models`` (a TOML file, see the model-registry
  reference in the docs) or, without a file, registers one model named ``settings.model`` under
  every role. Every problem in the file raises ``ConfigError`` naming the file, the
  ``[models.<name>]`` entry and the field.
* API keys are read from the environment variable named by ``api_key_env`` when the file is
  loaded (an unset variable is a ``ConfigError``); they never appear in ``repr()``/``str()``
  of the registry, a spec or an LLM, nor in ``ModelSpec`` (which the ``reactq models`` CLI
  prints).
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

from reactq.shared.errors import ConfigError
from reactq.shared.llm.base import LLM
from reactq.shared.llm.openai import OpenAILLM
from reactq.shared.llm.pricing import Price
from reactq.shared.settings import Settings, environment

__all__ = ["ModelRegistry", "ModelSpec", "ModelEntry", "Abilities", "DEFAULT_ROLES",
           "load_model_specs", "load_registry"]

#: Roles the env-only registry gives its single model.
DEFAULT_ROLES: tuple[str, ...] = ("general", "fast", "reasoning", "smart")


class Abilities(BaseModel):
    """A model's abilities as written in the registry file. Unset keys stay absent from
    ``as_dict()`` (missing ⇒ False for the engine, except ``tool_choice`` ⇒ True)."""

    model_config = ConfigDict(extra="forbid")

    tool_call: StrictBool | None = None
    """The model calls tools natively (OpenAI ``tools``); otherwise actions are asked for as JSON."""
    json_mode: StrictBool | None = None
    """The server honours ``response_format: json_object``."""
    vision: StrictBool | None = None
    """The model reads images. Shown by ``reactq models`` and ``GET /v1/models``; reactq does not
    read it (runs send text only)."""
    streaming: StrictBool | None = None
    """The server streams replies. Shown, not read: the answer is always asked for as a stream
    (every OpenAI-compatible server reactq was tried with streams)."""
    thinking: StrictBool | None = None
    """The model returns its reasoning separately. Shown, not read: a reply's
    ``reasoning_content`` is kept whenever the server sends one."""
    tool_choice: StrictBool | None = None
    """The server honours ``tool_choice`` (assumed true when unset)."""
    # The server constrains a reply to a JSON schema given with the request (llama.cpp's
    # grammars, vLLM): JSON-mode turns then send the action's schema (engine/action_schema.py).
    json_schema: StrictBool | None = None
    """The server constrains a reply to a JSON schema sent with the request (llama.cpp grammars, vLLM)."""

    def as_dict(self) -> dict[str, bool]:
        return {k: v for k, v in self.model_dump().items() if v is not None}


class ModelEntry(BaseModel):
    """One ``[models.<name>]`` table of the registry file (unknown keys are errors: a typo
    must not silently drop a setting)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1)
    """The provider's model name, sent as ``model`` in every request."""
    base_url: str | None = None
    """Base URL of the OpenAI-compatible API (default: the provider's, or ``OPENAI_BASE_URL``)."""
    api_key_env: str | None = Field(None, min_length=1)
    """Name of the environment variable holding the API key (read when the file is loaded; unset is an error)."""
    roles: list[str] = Field(default_factory=list)
    """Roles this model serves: ``general`` (the default), ``fast``, ``reasoning``, ``smart`` (DAG planner, analyzer, synthesis), or any other name."""
    abilities: Abilities = Field(default_factory=Abilities)
    """What the model can do (the ``abilities`` table below); missing means no, except ``tool_choice``."""
    context_size: int | None = Field(None, gt=0)
    """The model's context window in tokens; the context guard compacts older turns to stay within it."""
    max_tokens: int | None = Field(None, gt=0)
    """Default ``max_tokens`` of a completion."""
    temperature: float | None = Field(None, ge=0, le=2)
    """Default sampling temperature."""
    max_retries: int = Field(2, ge=0, le=20)
    """Retries of a failed provider call (connection errors, 429, 5xx) before the error is the run's."""
    timeout: float = Field(60.0, gt=0)
    """Seconds one provider call may take."""
    extra_headers: dict[str, str] = Field(default_factory=dict)
    """HTTP headers added to every request to this model."""
    # "user": send tool results as user messages, for chat templates that drop `tool`
    # messages (llama.cpp's chatml-function-calling; see shared/llm/shapes.py).
    tool_results_as: Literal["tool", "user"] = "tool"
    """``user``: tool results go as user messages, for chat templates that drop ``tool`` messages."""
    # How a JSON schema for the reply is sent (abilities.json_schema): OpenAI's
    # {"type": "json_schema", ...}, or {"type": "json_object", "schema": ...} (llama-cpp-python).
    json_schema_as: Literal["json_schema", "json_object"] = "json_schema"
    """How a reply schema is sent: OpenAI's ``json_schema`` form, or ``json_object`` with a ``schema`` (llama-cpp-python)."""
    # Fields added to every chat request as they are: server-specific sampling options such
    # as llama.cpp's repeat_penalty. The request's own fields win.
    extra_body: dict[str, Any] = Field(default_factory=dict)
    """Fields added to every chat request as they are (e.g. llama.cpp's ``repeat_penalty``); the request's own fields win."""
    # For small models (the bundled SmolLM2, see the local-model guide): after this many turns with
    # tool calls the model may only answer (JSON schema / tool_choice "none"), and without
    # answer synthesis the loop's answer is the run's answer.
    max_tool_turns: int | None = Field(None, ge=1)
    """For small models: after this many turns with tool calls the model may only answer."""
    answer_synthesis: StrictBool = True
    """Stream a separate synthesis of the answer; false: the loop's own answer is the run's answer."""
    # Flow control, cluster-wide (reactq.shared.flow): requests / tokens per minute, calls in flight.
    rpm: int | None = Field(None, gt=0)
    """Requests per minute to this model, across the whole cluster (flow control)."""
    tpm: int | None = Field(None, gt=0)
    """Tokens per minute to this model, across the whole cluster (prompt + reserved completion)."""
    max_concurrency: int | None = Field(None, gt=0)
    """Calls to this model in flight at once, across the whole cluster."""
    price: Price | None = None
    """USD per million tokens: every call is priced from the usage the provider reports."""


class _RegistryFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    models: dict[str, ModelEntry] = Field(min_length=1)


class ModelSpec(BaseModel):
    """The public description of a registered model (no secrets): what ``reactq models``
    lists."""

    name: str
    model: str
    base_url: str | None = None
    roles: list[str] = Field(default_factory=list)
    abilities: dict[str, bool] = Field(default_factory=dict)
    context_size: int | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    api_key_env: str | None = None
    rpm: int | None = None
    tpm: int | None = None
    max_concurrency: int | None = None
    price: Price | None = None


class ModelRegistry:
    """Named LLMs with roles, in registration order."""

    def __init__(self) -> None:
        self._models: dict[str, LLM] = {}
        self._roles: dict[str, list[str]] = {}
        self._specs: dict[str, ModelSpec] = {}

    def register(self, name: str, llm: LLM, roles: Iterable[str] | None = None, *,
                 spec: ModelSpec | None = None) -> None:
        """Add a model. A name already registered ⇒ ``ValueError``."""
        if name in self._models:
            raise ConfigError(f"Model '{name}' is already registered")
        self._models[name] = llm
        self._roles[name] = list(roles or [])
        if spec is not None:
            self._specs[name] = spec

    def get(self, name: str) -> LLM:
        """The model called ``name``; unknown ⇒ ``KeyError``."""
        try:
            return self._models[name]
        except KeyError:
            raise KeyError(f"No model registered with name '{name}'") from None

    def get_by_role(self, role: str) -> LLM:
        """The first model registered with ``role``; none ⇒ ``KeyError``."""
        for name, roles in self._roles.items():
            if role in roles:
                return self._models[name]
        raise KeyError(f"No model registered for role '{role}'")

    def get_default(self) -> LLM:
        """The first ``general`` model, else the first registered; empty ⇒ ``RuntimeError``."""
        if not self._models:
            raise ConfigError("Model registry is empty: add a [models.NAME] entry to REACTQ_MODELS or set REACTQ_MODEL")
        try:
            return self.get_by_role("general")
        except KeyError:
            return next(iter(self._models.values()))

    def resolve(self, hint: str | None) -> LLM:
        """The model for a role hint (``None`` ⇒ ``general``), falling back to the default
        when no model has that role. Empty registry ⇒ ``RuntimeError``."""
        try:
            return self.get_by_role(hint or "general")
        except KeyError:
            return self.get_default()

    def list_models(self) -> list[str]:
        """Model names in registration order."""
        return list(self._models)

    def roles_of(self, name: str) -> list[str]:
        """The roles ``name`` was registered with; unknown ⇒ ``KeyError``."""
        self.get(name)
        return list(self._roles[name])

    def spec_of(self, name: str) -> ModelSpec:
        """The public description of ``name`` (built from the LLM when none was given)."""
        llm = self.get(name)
        spec = self._specs.get(name)
        if spec is not None:
            return spec
        return ModelSpec(name=name, model=str(getattr(llm, "model", llm.name)),
                         base_url=getattr(llm, "base_url", None), roles=self.roles_of(name),
                         abilities=dict(llm.abilities), context_size=llm.context_size)

    def specs(self) -> list[ModelSpec]:
        """``spec_of`` for every model, in registration order."""
        return [self.spec_of(n) for n in self._models]

    def __len__(self) -> int:
        return len(self._models)

    def __contains__(self, name: object) -> bool:
        return name in self._models

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}{self._roles[n]}" for n in self._models)
        return f"ModelRegistry({inner})"

    __str__ = __repr__


def _format_errors(path: Path, exc: ValidationError) -> str:
    lines = []
    for err in exc.errors(include_url=False):
        loc = [str(p) for p in err["loc"]]
        if len(loc) >= 2 and loc[0] == "models":
            where = f"[models.{loc[1]}]"
            field = ".".join(loc[2:])
            lines.append(f"{where} {field}: {err['msg']}" if field else f"{where}: {err['msg']}")
        else:
            lines.append(f"{'.'.join(loc) or '<top level>'}: {err['msg']}")
    return f"{path}: " + "; ".join(lines)


def _read_file(path: Path) -> _RegistryFile:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"model registry file not found: {path}") from None
    except OSError as exc:
        raise ConfigError(f"model registry file {path} cannot be read: {exc}") from exc
    try:
        data: dict[str, Any] = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from exc
    try:
        return _RegistryFile.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(path, exc)) from None


def _spec(name: str, entry: ModelEntry) -> ModelSpec:
    return ModelSpec(name=name, model=entry.model, base_url=entry.base_url, roles=entry.roles,
                     abilities=entry.abilities.as_dict(), context_size=entry.context_size,
                     max_tokens=entry.max_tokens, temperature=entry.temperature,
                     api_key_env=entry.api_key_env, rpm=entry.rpm, tpm=entry.tpm,
                     max_concurrency=entry.max_concurrency, price=entry.price)


def load_model_specs(path: str | Path) -> list[ModelSpec]:
    """Validate a registry file and describe its models, without reading any key."""
    path = Path(path)
    return [_spec(name, entry) for name, entry in _read_file(path).models.items()]


def load_registry(settings: Settings, environ: Mapping[str, str] | None = None) -> ModelRegistry:
    """Build the registry from ``settings`` (``REACTQ_MODELS`` file, else the env default).

    ``environ`` (default ``os.environ``) is where ``api_key_env`` variables are read.
    """
    env = environment() if environ is None else environ
    registry = ModelRegistry()
    if settings.models is None:
        roles = list(DEFAULT_ROLES)
        abilities = {"tool_call": True, "json_mode": True}
        llm = OpenAILLM(settings.model, base_url=settings.openai_base_url,
                        api_key=_secret(settings.openai_api_key), abilities=abilities)
        registry.register(settings.model, llm, roles, spec=ModelSpec(
            name=settings.model, model=settings.model, base_url=settings.openai_base_url,
            roles=roles, abilities=abilities, api_key_env="OPENAI_API_KEY"))
        return registry

    path = Path(settings.models)
    for name, entry in _read_file(path).models.items():
        api_key: str | None = None
        if entry.api_key_env:
            api_key = env.get(entry.api_key_env)
            if not api_key:
                # The file asks for a key: failing now beats a 401 on the first run.
                raise ConfigError(f"{path}: [models.{name}] api_key_env: environment variable "
                                  f"{entry.api_key_env} is not set")
        llm = OpenAILLM(entry.model, base_url=entry.base_url, api_key=api_key,
                        abilities=entry.abilities.as_dict(), context_size=entry.context_size,
                        max_retries=entry.max_retries, timeout=entry.timeout, name=name,
                        extra_headers=entry.extra_headers or None, max_tokens=entry.max_tokens,
                        temperature=entry.temperature, tool_results_as=entry.tool_results_as,
                        json_schema_as=entry.json_schema_as, extra_body=entry.extra_body or None,
                        max_tool_turns=entry.max_tool_turns, answer_synthesis=entry.answer_synthesis,
                        price=entry.price)
        registry.register(name, llm, entry.roles, spec=_spec(name, entry))
    return registry


def _secret(value: Any) -> str | None:
    """The plain value of a ``SecretStr`` setting (secrets stay wrapped everywhere else)."""
    if value is None:
        return None
    return value.get_secret_value() if hasattr(value, "get_secret_value") else str(value)
