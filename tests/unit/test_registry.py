"""ModelRegistry (SPEC S95/S97, T-N1) and registry loading from TOML / the environment."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reactq.shared.errors import ConfigError
from reactq.shared.llm import base as llm_base
from reactq.shared.llm.openai import OpenAILLM
from reactq.shared.llm.registry import (
    DEFAULT_ROLES,
    ModelRegistry,
    ModelSpec,
    load_model_specs,
    load_registry,
)
from reactq.shared.llm.testing import ScriptedLLM
from reactq.shared.models import ChatMessage
from reactq.shared.settings import Settings
from tests.scripted_server import ScriptedServer, SequenceHandler, reply_text

SECRET = "sk-registry-secret-987"


@pytest.fixture(autouse=True)
def _no_real_llm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llm_base, "ALLOW_REAL_LLM", False)


def fake(name: str) -> ScriptedLLM:
    return ScriptedLLM([], name=name)


# --------------------------------------------------------------------------- S95 / T-N1


def test_get_by_role_first_registered() -> None:
    reg = ModelRegistry()
    alpha, beta = fake("alpha"), fake("beta")
    reg.register("alpha", alpha, roles=["fast"])
    reg.register("beta", beta, roles=["fast"])
    assert reg.get_by_role("fast") is alpha
    with pytest.raises(KeyError, match="No model registered for role 'slow'"):
        reg.get_by_role("slow")


def test_default_is_first_general() -> None:
    reg = ModelRegistry()
    fast, general = fake("fast-model"), fake("general-model")
    reg.register("fast-model", fast, roles=["fast"])
    reg.register("general-model", general, roles=["general"])
    assert reg.get_default() is general


def test_default_without_general_is_first_registered() -> None:
    reg = ModelRegistry()
    a, b = fake("a"), fake("b")
    reg.register("a", a, roles=["fast"])
    reg.register("b", b)
    assert reg.get_default() is a


def test_empty_registry() -> None:
    reg = ModelRegistry()
    with pytest.raises(ConfigError, match="empty"):
        reg.get_default()
    with pytest.raises(ConfigError, match="empty"):
        reg.resolve("fast")
    assert len(reg) == 0 and reg.list_models() == []


def test_register_get_list_len_contains() -> None:
    reg = ModelRegistry()
    m1, m2, m3 = fake("m1"), fake("m2"), fake("m3")
    reg.register("zeta", m1, roles=["general"])
    reg.register("alpha", m2)
    reg.register("mid", m3, roles=("fast", "reasoning"))
    with pytest.raises(ConfigError, match="zeta"):
        reg.register("zeta", fake("again"))
    assert reg.get("alpha") is m2
    with pytest.raises(KeyError):
        reg.get("nope")
    assert reg.list_models() == ["zeta", "alpha", "mid"]  # insertion order, not sorted
    assert len(reg) == 3
    assert "mid" in reg and "nope" not in reg
    assert reg.roles_of("mid") == ["fast", "reasoning"]
    assert reg.roles_of("alpha") == []
    with pytest.raises(KeyError):
        reg.roles_of("nope")


def test_resolve_falls_back_to_default() -> None:
    reg = ModelRegistry()
    general, fast = fake("general"), fake("fast")
    reg.register("general", general, roles=["general"])
    reg.register("fast", fast, roles=["fast"])
    assert reg.resolve("fast") is fast
    assert reg.resolve(None) is general
    assert reg.resolve("") is general
    assert reg.resolve("reasoning") is general  # role missing ⇒ default


def test_specs_built_from_llm() -> None:
    reg = ModelRegistry()
    reg.register("x", OpenAILLM("gpt-x", base_url="http://127.0.0.1:1/v1", api_key=SECRET,
                                abilities={"tool_call": True}, context_size=8000), ["general"])
    (spec,) = reg.specs()
    assert spec == ModelSpec(name="x", model="gpt-x", base_url="http://127.0.0.1:1/v1",
                             roles=["general"], abilities={"tool_call": True}, context_size=8000)
    assert SECRET not in repr(reg) + str(reg) + repr(spec) + spec.model_dump_json()


# --------------------------------------------------------------------------- loading


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    for var in ("REACTQ_MODELS", "REACTQ_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    yield monkeypatch


def test_env_default_registry(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("REACTQ_MODEL", "my-model")
    clean_env.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9999/v1")
    clean_env.setenv("OPENAI_API_KEY", SECRET)
    reg = load_registry(Settings())
    assert reg.list_models() == ["my-model"]
    assert reg.roles_of("my-model") == list(DEFAULT_ROLES) == ["general", "fast", "reasoning", "smart"]
    llm = reg.get("my-model")
    assert isinstance(llm, OpenAILLM)
    assert llm.model == "my-model" and llm.base_url == "http://127.0.0.1:9999/v1"
    assert llm.abilities == {"tool_call": True, "json_mode": True}
    for role in ("general", "fast", "reasoning", "smart"):
        assert reg.get_by_role(role) is llm
    assert SECRET not in repr(reg) + repr(llm) + repr(reg.specs())


GOOD_TOML = """
[models.general]
base_url = "{base_url}"
model = "gpt-4o-mini"
api_key_env = "MY_TEST_KEY"
roles = ["general", "smart"]
abilities = {{ tool_call = true, json_mode = true }}
context_size = 128000
max_tokens = 512
temperature = 0.2

[models.fast]
base_url = "http://127.0.0.1:1/v1"
model = "small"
roles = ["fast"]
abilities = {{ tool_call = false }}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "models.toml"
    path.write_text(text)
    return path


def test_toml_registry(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, GOOD_TOML.format(base_url="http://127.0.0.1:2/v1"))
    clean_env.setenv("MY_TEST_KEY", SECRET)
    reg = load_registry(Settings(models=path))
    assert reg.list_models() == ["general", "fast"]
    assert reg.roles_of("general") == ["general", "smart"]
    general = reg.get("general")
    assert isinstance(general, OpenAILLM)
    assert general.name == "general" and general.model == "gpt-4o-mini"
    assert general.abilities == {"tool_call": True, "json_mode": True}
    assert general.context_size == 128000
    assert reg.get_default() is general
    assert reg.get_by_role("smart") is general
    assert reg.resolve("fast") is reg.get("fast")
    assert reg.resolve("reasoning") is general
    assert reg.get("fast").abilities == {"tool_call": False}
    text = repr(reg) + str(reg) + repr(general) + str(general) + repr(reg.specs())
    text += "".join(s.model_dump_json() for s in reg.specs())
    assert SECRET not in text
    specs = load_model_specs(path)  # no key needed to describe the file
    assert [s.name for s in specs] == ["general", "fast"]
    assert specs[0].api_key_env == "MY_TEST_KEY"


async def test_toml_model_sends_key_and_defaults(tmp_path: Path,
                                                 clean_env: pytest.MonkeyPatch) -> None:
    with ScriptedServer(SequenceHandler([reply_text("hi there")])) as srv:
        path = write(tmp_path, GOOD_TOML.format(base_url=srv.base_url))
        clean_env.setenv("MY_TEST_KEY", SECRET)
        llm = load_registry(Settings(models=path)).get_default()
        result = await llm.chat([ChatMessage(role="user", content="hello")])
        assert result.message.content == "hi there"
        (rec,) = srv.requests
        assert rec.headers["authorization"] == f"Bearer {SECRET}"
        assert rec.body["model"] == "gpt-4o-mini"
        assert rec.body["max_tokens"] == 512 and rec.body["temperature"] == 0.2


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match="nope.toml"):
        load_registry(Settings(models=missing))


@pytest.mark.parametrize(("body", "expected"), [
    ('[models.general]\nmodel = "m"\nabilities = { tool_call = "yes" }\n',
     "[models.general] abilities.tool_call: Input should be a valid boolean"),
    ('[models.general]\nbase_url = "http://x"\n',
     "[models.general] model: Field required"),
    ('[models.general]\nmodel = "m"\nrole = ["general"]\n',
     "[models.general] role: Extra inputs are not permitted"),
    ('[models.general]\nmodel = "m"\nabilities = { tool_calls = true }\n',
     "[models.general] abilities.tool_calls: Extra inputs are not permitted"),
    ('[models.fast]\nmodel = "m"\ncontext_size = 0\n',
     "[models.fast] context_size: Input should be greater than 0"),
    ('[models.general]\nmodel = "m"\nroles = "general"\n',
     "[models.general] roles: Input should be a valid list"),
    ("[models]\n", "models: Dictionary should have at least 1 item"),
    ("", "models: Field required"),
    ('[models.general\nmodel = "m"\n', "invalid TOML"),
])
def test_invalid_file_names_entry_and_field(tmp_path: Path, body: str, expected: str) -> None:
    path = write(tmp_path, body)
    with pytest.raises(ConfigError) as info:
        load_registry(Settings(models=path))
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    assert expected in message, message
    with pytest.raises(ConfigError):
        load_model_specs(path)


def test_unset_key_env_is_config_error(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, GOOD_TOML.format(base_url="http://127.0.0.1:2/v1"))
    clean_env.delenv("MY_TEST_KEY", raising=False)
    with pytest.raises(ConfigError, match=r"\[models.general\] api_key_env: .*MY_TEST_KEY"):
        load_registry(Settings(models=path))
    # an explicit environment mapping works too
    reg = load_registry(Settings(models=path), environ={"MY_TEST_KEY": SECRET})
    assert SECRET not in repr(reg.get("general"))
