"""The door's pure admission steps: which models a run or a DAG may call (the dollar-cap rule
covers them all), and which scope a request needs beyond creating a run."""

from __future__ import annotations

import pytest

from reactq.shared.errors import Forbidden, RequestError
from reactq.shared.requests import DagRequest, RunRequest
from reactq.shared.service.admission import (
    check_priced_models,
    check_scope,
    dag_models,
    model_for_role,
    prefixed,
    run_models,
)
from reactq.shared.stores.keys import Caller

SPECS = [{"name": "main", "roles": ["general", "smart"], "price": {"input_per_mtok": 1}},
         {"name": "quick", "roles": ["fast"], "price": {"input_per_mtok": 1}},
         {"name": "deep", "roles": ["reasoning"]}]


def test_a_role_resolves_as_the_workers_registry_does():
    assert model_for_role(SPECS, None) == "main"
    assert model_for_role(SPECS, "reasoning") == "deep"
    assert model_for_role(SPECS, "vision") == "main", "a role no model has: the default"
    assert model_for_role([], None) is None


def test_a_run_may_call_its_model_and_the_fast_one():
    assert run_models(None, SPECS) == ["main", "quick"]
    assert run_models("deep", SPECS) == ["deep", "quick"]


def test_a_dag_may_call_its_model_each_steps_role_and_the_fast_one():
    given = DagRequest(goal="g", steps=[{"id": "a", "task": "t"}])
    assert dag_models(given, SPECS) == ["main", "quick"]
    hinted = DagRequest(goal="g", steps=[{"id": "a", "task": "t", "model_hint": "reasoning"}])
    assert "deep" in dag_models(hinted, SPECS)
    assert "deep" in dag_models(DagRequest(goal="g"), SPECS), "a planner's steps may name any role"
    assert dag_models(DagRequest(goal="g", model="deep", steps=[{"id": "a", "task": "t"}]), SPECS)[0] == "deep"


def test_an_unpriced_model_is_named():
    with pytest.raises(RequestError, match="'deep'") as exc:
        check_priced_models("model", ["main", "deep"], SPECS, "tenant t's cost_per_day_usd")
    assert exc.value.field == "model" and "cost_per_day_usd" in str(exc.value)
    check_priced_models("model", ["main", "quick"], SPECS, "its cost_budget_usd")


def test_approving_on_timeout_needs_the_approvals_write_scope():
    req = RunRequest(query="q", approval={"tools": "all", "on_timeout": "approve"})
    with pytest.raises(Forbidden) as exc:
        check_scope(req, Caller("acme", frozenset({"runs:write"})))
    assert exc.value.scope == "approvals:write" and exc.value.field == "approval.on_timeout"
    check_scope(req, Caller("acme", frozenset({"runs:write", "approvals:write"})))
    check_scope(req, None)  # an in-cluster entry: its owner's key was checked when it was made
    check_scope(RunRequest(query="q", approval={"tools": "all"}), Caller("acme", frozenset({"runs:write"})))


def test_a_refusal_inside_another_request_names_its_field_there():
    assert prefixed("run", RequestError("m", field="model")).field == "run.model"
    forbidden = prefixed("run", Forbidden("approvals:write", field="approval.on_timeout"))
    assert isinstance(forbidden, Forbidden) and forbidden.field == "run.approval.on_timeout"
