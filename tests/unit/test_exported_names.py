"""``import reactq`` is the one import a user needs: its names are pinned here, so adding or
dropping one is a decision (httpx's tests/test_exported_members.py)."""

from __future__ import annotations

import pickle

import reactq

EXPECTED = {
    # tools and hooks
    "tool", "Tool", "ToolRegistry", "ToolResult", "Artifact",
    "hook", "Hook", "HookContext", "HookPoint", "HookRegistry", "HookResult",
    # evals
    "evaluator", "Score",
    # running agents: in the cluster and over HTTP
    "RunRequest", "DagRequest", "Dispatcher", "RunHandle", "DagDispatcher", "DagHandle", "run_local",
    "Client", "AsyncClient",
    # errors
    "ReactqError", "ConfigError", "RequestError", "LLMError", "StreamIncomplete", "StructuredOutputError",
    "ToolError", "ToolNotFound", "RunNotFound", "StateConflict", "NoWorker",
    "APIError", "BadRequest", "Unauthorized", "Forbidden", "NotFound", "Conflict", "InvalidRequest",
    "RateLimited", "ServerError", "APIConnectionError", "APITimeoutError",
}


def test_reactq_exports_exactly_the_public_names():
    assert set(reactq.__all__) == EXPECTED
    assert len(reactq.__all__) == len(EXPECTED), "a name is listed twice"
    for name in reactq.__all__:
        assert getattr(reactq, name) is not None, name


def test_every_exported_error_has_the_one_root_and_pickles():
    errors = [getattr(reactq, n) for n in reactq.__all__
              if isinstance(getattr(reactq, n), type) and issubclass(getattr(reactq, n), Exception)]
    assert all(issubclass(e, reactq.ReactqError) for e in errors)
    err = reactq.NotFound("no run with id 'x'", status_code=404, code="not_found")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is reactq.NotFound and (back.status_code, back.code) == (404, "not_found")
