"""Bad input is refused at the door with a message naming the field and the limit."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from reactq.shared.errors import RequestError
from reactq.shared.requests import DagRequest, RunRequest, check_run_request


def _error(**fields) -> str:
    with pytest.raises(ValidationError) as info:
        RunRequest(**fields)
    return str(info.value)


def test_an_empty_query_is_refused_naming_the_field_and_the_limit():
    msg = _error(query="")
    assert "query" in msg and "at least 1 character" in msg


def test_a_blank_query_is_refused():
    assert "non-whitespace" in _error(query="   ")


def test_a_query_over_100000_characters_is_refused():
    msg = _error(query="x" * 100_001)
    assert "query" in msg and "100000" in msg


@pytest.mark.parametrize("value, limit", [(0, "greater than or equal to 1"), (201, "less than or equal to 200")])
def test_max_iterations_out_of_range_is_refused(value, limit):
    msg = _error(query="q", max_iterations=value)
    assert "max_iterations" in msg and limit in msg


def test_an_unknown_mode_or_field_is_refused():
    assert "mode" in _error(query="q", mode="turbo")
    assert "surprise" in _error(query="q", surprise=1)


def test_unknown_tool_names_in_the_allowlist_are_refused_with_what_is_available():
    with pytest.raises(RequestError) as info:
        check_run_request(RunRequest(query="q", tools=["calculator", "rm_rf"]),
                          tools=["calculator", "echo"], models=["m"])
    assert info.value.field == "tools"
    assert "rm_rf" in str(info.value) and "echo" in str(info.value)


def test_an_unknown_model_is_refused():
    with pytest.raises(RequestError) as info:
        check_run_request(RunRequest(query="q", model="gpt-9"), tools=[], models=["general"])
    assert info.value.field == "model" and "general" in str(info.value)


def test_dag_limits_are_checked():
    with pytest.raises(ValidationError) as info:
        DagRequest(goal="g", max_concurrency=51)
    assert "max_concurrency" in str(info.value)
    with pytest.raises(ValidationError):
        DagRequest(goal="g", max_rounds=0)


def test_defaults_are_the_contracts():
    req = RunRequest(query="q")
    assert (req.mode, req.completion_check, req.tools) == ("auto", True, None)
    # Unset means the configured default, REACTQ_MAX_ITERATIONS (50).
    assert req.max_iterations is None
