"""Typed answers in the engine (in-process shell): ``output_schema`` on a run.

The answer phase asks for the schema through ``structured_llm_call`` (a forced function call
for a native run of a model with ``tool_call``; ``json_schema`` where the model constrains
replies; JSON mode; plain text), validates with ``jsonschema`` and re-asks with the
validator's errors.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from engine_kit import MODES, NATIVE, Mode, echo_tool, run
from reactq.shared.engine.output import MAX_SCHEMA_BYTES, call_schema, problems
from reactq.shared.llm.testing import ScriptedLLM, text, tool_calls
from reactq.shared.requests import RunRequest
from reactq.shared.settings import EngineConfig

PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}
USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


def typed_reply(mode: Mode, data: dict[str, Any], **kw: Any) -> Any:
    """An answer attempt's reply: the forced call (native) or JSON text (JSON mode)."""
    if mode.native:
        return tool_calls(("a1", "final_answer", data), **kw)
    return text(json.dumps(data), **kw)


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_a_valid_answer_is_the_runs_output_and_its_json_text_the_answer(mode: Mode) -> None:
    llm = mode.llm([mode.answer("Ada, 36"), typed_reply(mode, {"name": "Ada", "age": 36})])
    out = await run(llm, query="Who?", output_schema=PERSON)

    assert out.done["output"] == {"name": "Ada", "age": 36}
    assert json.loads(out.done["answer"]) == {"name": "Ada", "age": 36}
    deltas = "".join(d["content"] for d in out.of("answer", status="delta"))
    assert deltas == out.done["answer"]
    attempt = llm.calls[-1]
    assert not attempt.stream  # answer attempts are not streamed
    if mode.native:
        assert attempt.kwargs["tools"][0]["function"]["parameters"] == PERSON
        assert attempt.kwargs["tool_choice"] == {"type": "function", "function": {"name": "final_answer"}}
    else:  # a JSON-mode run never gets a forced function call
        assert "tools" not in attempt.kwargs
    assert json.dumps(PERSON) in attempt.messages[1].content


async def test_a_json_mode_model_is_asked_in_json_mode() -> None:
    llm = ScriptedLLM([text(json.dumps({"type": "final_answer", "answer": "Ada"})),
                       text('{"name": "Ada", "age": 36}')], abilities={"json_mode": True})
    out = await run(llm, query="Who?", output_schema=PERSON)
    assert llm.calls[-1].kwargs["response_format"] == {"type": "json_object"}
    assert out.done["output"] == {"name": "Ada", "age": 36}


async def test_a_model_that_constrains_replies_gets_the_schema_as_json_schema() -> None:
    llm = ScriptedLLM([text(json.dumps({"type": "final_answer", "answer": "Ada"})),
                       text('{"name": "Ada", "age": 36}')],
                      abilities={"json_mode": True, "json_schema": True})
    out = await run(llm, query="Who?", mode="json", output_schema=PERSON)

    fmt = llm.calls[-1].kwargs["response_format"]
    assert fmt == {"type": "json_schema", "json_schema": {"name": "final_answer", "schema": PERSON}}
    assert out.done["output"] == {"name": "Ada", "age": 36}


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_an_invalid_answer_is_repaired_with_the_validators_errors(mode: Mode) -> None:
    llm = mode.llm([mode.answer("Ada"), typed_reply(mode, {"name": "Ada", "age": "thirty-six"}, usage=USAGE),
                    typed_reply(mode, {"name": "Ada", "age": 36}, usage=USAGE)])
    out = await run(llm, query="Who?", output_schema=PERSON)

    assert out.done["output"] == {"name": "Ada", "age": 36}
    repair = llm.calls[-1].messages
    assert repair[-2].role == "assistant" and json.loads(repair[-2].content)["age"] == "thirty-six"
    assert "$.age: 'thirty-six' is not of type 'integer'" in repair[-1].content
    assert out.of("phase", phase="output_repair")[0]["problems"] == [
        '$.age: does not satisfy type: "integer"']
    assert out.done["usage"]["total_tokens"] >= 30  # both attempts counted
    # Nothing of the answer went out before it validated.
    first_answer = next(i for i, e in enumerate(out.events) if e.channel == "answer")
    repair_at = next(i for i, e in enumerate(out.events) if e.data.get("phase") == "output_repair")
    assert repair_at < first_answer


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_an_answer_never_valid_fails_the_run_naming_the_first_failing_path(mode: Mode) -> None:
    bad = typed_reply(mode, {"name": "Ada"})
    llm = mode.llm([mode.answer("Ada"), bad, bad, bad])
    out = await run(llm, query="Who?", output_schema=PERSON, status="failed")

    err = out.of("error", kind="output_invalid")[0]
    assert '$: does not satisfy required: "age"' in err["message"]
    assert "Ada" not in err["message"] and "Ada" not in out.done["answer"]
    assert "after 3 attempts" in err["message"]
    assert out.done["status"] == "failed" and out.done["output"] is None
    assert not out.of("answer")
    assert len(llm.calls) == 4


async def test_output_repairs_is_configurable() -> None:
    bad = typed_reply(NATIVE, {"name": "Ada"})
    llm = NATIVE.llm([NATIVE.answer("Ada"), bad])
    config = EngineConfig.defaults().model_copy(update={"output_repairs": 0})
    out = await run(llm, query="Who?", output_schema=PERSON, config=config, status="failed")
    assert "after 1 attempt:" in out.of("error", kind="output_invalid")[0]["message"]


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_a_non_object_schema_is_asked_for_wrapped_in_value(mode: Mode) -> None:
    schema = {"type": "array", "items": {"type": "string", "enum": ["red", "green", "blue"]}}
    llm = mode.llm([mode.answer("red and blue"), typed_reply(mode, {"value": ["red", "blue"]})])
    out = await run(llm, query="Colours?", output_schema=schema)

    assert out.done["output"] == ["red", "blue"]
    assert out.done["answer"] == '["red", "blue"]'
    if mode.native:
        assert llm.calls[-1].kwargs["tools"][0]["function"]["parameters"] == call_schema(schema)


async def test_plain_text_level_takes_a_bare_value_for_a_wrapped_schema() -> None:
    llm = ScriptedLLM([text(json.dumps({"type": "final_answer", "answer": "7"})), text("7")])
    out = await run(llm, query="How many?", mode="json", output_schema={"type": "integer"})
    assert out.done["output"] == 7
    assert "response_format" not in llm.calls[-1].kwargs or llm.calls[-1].kwargs["response_format"] is None


async def test_a_reply_that_is_no_json_at_all_is_re_asked() -> None:
    llm = ScriptedLLM([text(json.dumps({"type": "final_answer", "answer": "Ada"})),
                       text("Ada is 36."), text("Sorry, Ada is 36."),  # plain text + its reformat retry
                       text('{"name": "Ada", "age": 36}')])
    out = await run(llm, query="Who?", mode="json", output_schema=PERSON)
    assert out.done["output"] == {"name": "Ada", "age": 36}
    assert out.of("phase", phase="output_repair")[0]["problems"] == ["$: the reply was not a JSON object"]


async def test_the_answer_follows_the_tool_loop_and_sees_its_trace() -> None:
    llm = NATIVE.llm([NATIVE.call("echo", {"text": "Ada is 36"}), NATIVE.answer("done"),
                      typed_reply(NATIVE, {"name": "Ada", "age": 36})])
    out = await run(llm, [echo_tool()], query="Who?", output_schema=PERSON)
    assert "Tool result: Ada is 36" in llm.calls[-1].messages[1].content
    assert out.done["output"]["age"] == 36


@pytest.mark.parametrize("schema, why", [
    ({"type": "strng"}, "not a valid JSON Schema"),
    ({"type": "object", "properties": {"a": {"minimum": "x"}}}, "not a valid JSON Schema"),
    ({"type": "object", "description": "x" * MAX_SCHEMA_BYTES}, "the limit is 65536 bytes"),
    ({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}, "does not resolve inside the schema"),
    ({"$ref": "https://example.com/schema.json"}, "does not resolve inside the schema"),
])
def test_a_bad_schema_is_refused_naming_the_field(schema: dict[str, Any], why: str) -> None:
    with pytest.raises(ValidationError) as info:
        RunRequest(query="q", output_schema=schema)
    err = info.value.errors()[0]
    assert err["loc"] == ("output_schema",)
    assert why in err["msg"]


async def test_a_wrapped_schema_keeps_its_definitions() -> None:
    schema = {"$defs": {"colour": {"enum": ["red", "blue"]}}, "type": "array", "items": {"$ref": "#/$defs/colour"}}
    RunRequest(query="q", output_schema=schema)
    llm = NATIVE.llm([NATIVE.answer("red"), typed_reply(NATIVE, {"value": ["green"]}),
                      typed_reply(NATIVE, {"value": ["red"]})])
    out = await run(llm, query="Colours?", output_schema=schema)
    assert out.done["output"] == ["red"]
    assert "$[0]: 'green' is not one of ['red', 'blue']" in llm.calls[-1].messages[-1].content


def test_problems_are_listed_in_path_order_with_json_paths() -> None:
    schema = {"type": "object", "properties": {"items": {"type": "array", "items": {
        "type": "object", "properties": {"price": {"type": "number"}}}}}}
    found = problems(schema, {"items": [{"price": 1}, {"price": "x"}]})
    assert [str(p) for p in found] == ['$.items[1].price: does not satisfy type: "number"']
    assert [p.detail() for p in found] == ["$.items[1].price: 'x' is not of type 'number'"]

