"""Every setting is named REACTQ_*; the older names still work, with a DeprecationWarning."""

from __future__ import annotations

import warnings

import pytest

from reactq.shared.dag.config import DagConfig
from reactq.shared.settings import EngineConfig, Settings, deprecated_names

OLD = [("REACT_MAX_ITERATIONS", "max_iterations", EngineConfig),
       ("REACT_TOOL_SELECTION_THRESHOLD", "tool_selection_threshold", EngineConfig),
       ("COMPACT_CATALOG_DESC_LENGTH", "compact_catalog_desc_length", EngineConfig),
       ("CONTEXT_GUARD_DEFAULT_BUDGET", "context_budget", EngineConfig),
       ("CONTEXT_GUARD_KEEP_RECENT", "keep_recent", EngineConfig),
       ("DAG_STEP_TIMEOUT", "step_timeout", DagConfig),
       ("CONTEXT_GUARD_MAX_MSG_CHARS", "max_message_chars", DagConfig)]


@pytest.mark.parametrize(("old", "field", "cls"), OLD)
def test_an_old_name_still_sets_the_value_and_warns_that_it_is_deprecated(monkeypatch, old, field, cls):
    monkeypatch.setenv(old, "123")
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated.*REACTQ_"):
        config = cls()
    assert getattr(config, field) == 123


@pytest.mark.parametrize(("old", "field", "cls"), OLD)
def test_the_new_name_wins_over_the_old_one_and_does_not_warn(monkeypatch, old, field, cls):
    new = deprecated_names(cls)[old]
    monkeypatch.setenv(new, "150")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert getattr(cls(), field) == 150


def test_every_environment_name_of_every_setting_starts_with_reactq_except_the_providers():
    for cls in (EngineConfig, DagConfig, Settings):
        old = deprecated_names(cls)
        for name, field in cls.model_fields.items():
            alias = field.validation_alias
            if alias is None:
                current = f"{cls.model_config.get('env_prefix', '')}{name}".upper()
            elif isinstance(alias, str):
                current = alias
            else:
                current = [c for c in alias.choices if c not in old][0]  # type: ignore[assignment]
            assert current.startswith("REACTQ_") or current.startswith("OPENAI_"), (cls.__name__, name, current)
