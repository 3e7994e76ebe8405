"""Model-registry options for small local models (README "First run"): the action schema for
servers that constrain replies (``abilities.json_schema``, ``json_schema_as``), extra request
fields (``extra_body``), ``max_tool_turns`` and ``answer_synthesis = false``. A model without
them is asked exactly as before (test_engine_loop.py covers that)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field
from tests.unit.engine_kit import AddArgs, add_tool, echo_tool, run

from reactq.shared.engine.action_schema import action_schema
from reactq.shared.engine.prompts import ANSWER_NOW
from reactq.shared.llm.registry import load_registry
from reactq.shared.llm.testing import ScriptedLLM, final, text, tool_calls, tool_json
from reactq.shared.models import ChatMessage
from reactq.shared.settings import Settings
from reactq.shared.tools.base import Tool


class Inner(BaseModel):
    title: str = Field(max_length=10)


class Outer(BaseModel):
    title: str = Field(max_length=200_000)
    items: list[Inner] = Field(max_length=5)


def _schema(model: type[BaseModel], name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": "d",
                                             "parameters": model.model_json_schema()}}


def _small(replies: list[Any], **options: Any) -> ScriptedLLM:
    llm = ScriptedLLM(replies, abilities={"json_mode": True, "json_schema": True})
    for key, value in options.items():
        setattr(llm, key, value)
    return llm


def test_one_alternative_per_tool_and_the_answer():
    schema = action_schema([_schema(AddArgs, "add"), _schema(Inner, "inner")])
    alts = schema["anyOf"]
    assert [a["properties"]["type"]["const"] for a in alts] == ["tool_call", "tool_call", "final_answer"]
    assert [a["properties"]["tool_name"]["const"] for a in alts[:2]] == ["add", "inner"]
    assert alts[0]["properties"]["tool_args"]["required"] == ["a", "b"]
    assert alts[2]["required"] == ["type", "answer"]
    # No "reasoning": a small model's guess there misleads it (measured, action_schema.py).
    assert all("reasoning" not in a["properties"] for a in alts)
    assert action_schema([_schema(AddArgs, "add")], answer_only=True) == alts[2]
    assert action_schema([]) == alts[2]


def test_length_bounds_and_references_go_but_a_parameter_named_title_stays():
    args = action_schema([_schema(Outer, "outer")])["anyOf"][0]["properties"]["tool_args"]
    assert set(args["properties"]) == {"title", "items"}
    text_ = json.dumps(args)
    assert "maxLength" not in text_ and "maxItems" not in text_ and "$ref" not in text_
    assert "$defs" not in text_
    assert args["properties"]["items"]["items"]["properties"]["title"]["type"] == "string"


def test_a_recursive_reference_becomes_any_object():
    params = {"type": "object", "properties": {"node": {"$ref": "#/$defs/Node"}},
              "$defs": {"Node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/Node"}}}}}
    schema = action_schema([{"type": "function", "function": {"name": "tree", "parameters": params}}])
    json.dumps(schema)  # finite


def test_the_builtin_tools_compile_to_small_grammars():
    """text_stats' maxLength of 200,000 once made a 1.6 MB grammar that crashed llama.cpp."""
    gbnf = pytest.importorskip("llama_cpp.llama_grammar").json_schema_to_gbnf
    from reactq.shared.tools.builtins import builtin_registry

    tools = [t.openai_schema() for t in builtin_registry(demo=True)]
    assert len(gbnf(json.dumps(action_schema(tools)))) < 20_000


async def test_json_schema_then_answer_only_after_max_tool_turns_and_no_synthesis():
    llm = _small([tool_json("add", {"a": 2.5, "b": 4.25}), final("6.75")],
                 max_tool_turns=1, answer_synthesis=False)
    out = await run(llm, [add_tool()], query="add 2.5 and 4.25")
    first, second = (c.kwargs["response_format"] for c in out.loop_calls())
    assert first["type"] == "json_schema"
    assert [a["properties"]["type"]["const"] for a in first["json_schema"]["schema"]["anyOf"]] == \
        ["tool_call", "final_answer"]
    assert second["json_schema"]["schema"] == action_schema([], answer_only=True)
    # The loop's answer is the run's answer: no synthesis call, no fallback error.
    assert out.synthesis_calls() == [] and out.of("error") == []
    assert out.done["answer"] == "6.75" and out.state.final_answer == "6.75"
    deltas = "".join(d["content"] for d in out.of("answer", status="delta"))
    assert deltas == "6.75" and out.of("answer", status="done")


async def test_the_turn_that_may_only_answer_is_told_so_after_the_observation():
    """In the request only: the history keeps the observation as the tool gave it."""
    llm = _small([tool_json("add", {"a": 2.5, "b": 4.25}), final("6.75")],
                 max_tool_turns=1, answer_synthesis=False)
    out = await run(llm, [add_tool()], query="add 2.5 and 4.25")
    first, second = (c.messages for c in out.loop_calls())
    assert second[-1].content == f"Observation: 6.75\n{ANSWER_NOW}"
    assert all(ANSWER_NOW not in str(m.content) for m in first + out.state.messages)


async def test_a_turn_that_may_still_call_tools_sees_the_observation_alone():
    llm = _small([tool_json("echo", {"text": "a"}), final("a"), text("synth")])
    out = await run(llm, [echo_tool()])
    assert out.loop_calls()[1].messages[-1].content == "Observation: a"


async def test_without_max_tool_turns_every_turn_may_call_a_tool():
    llm = _small([tool_json("echo", {"text": "a"}), tool_json("echo", {"text": "b"}), final("ab"),
                  text("synth")])
    out = await run(llm, [echo_tool()])
    schemas = [c.kwargs["response_format"]["json_schema"]["schema"] for c in out.loop_calls()]
    assert all("anyOf" in s for s in schemas) and len(schemas) == 3
    assert out.done["answer"] == "synth"


async def test_native_mode_says_tool_choice_none_once_the_tool_turns_are_used():
    llm = ScriptedLLM([tool_calls(("c1", "add", {"a": 1, "b": 2})), text("3"), text("It is 3.")],
                      abilities={"tool_call": True})
    llm.max_tool_turns = 1  # type: ignore[attr-defined]
    out = await run(llm, [add_tool()])
    assert [c.kwargs["tool_choice"] for c in out.loop_calls()] == ["auto", "none"]
    assert out.loop_calls()[1].kwargs["tools"]  # still sent: the history holds a tool call


def _registry(tmp_path: Path, body: str) -> Any:
    path = tmp_path / "models.toml"
    path.write_text('[models.small]\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\n' + body +
                    '[models.big]\nmodel = "n"\nbase_url = "http://127.0.0.1:9/v1"\n')
    return load_registry(Settings(models=path))


def test_the_registry_entry_reaches_the_request(tmp_path: Path):
    reg = _registry(tmp_path, 'json_schema_as = "json_object"\nmax_tool_turns = 1\n'
                              'answer_synthesis = false\nextra_body = { repeat_penalty = 1.0, model = "x" }\n'
                              'abilities = { json_mode = true, json_schema = true }\n')
    small, big = reg.get("small"), reg.get("big")
    fmt = {"type": "json_schema", "json_schema": {"name": "react_action", "schema": {"type": "object"}}}
    msgs = [ChatMessage(role="user", content="hi")]
    req = small._request(msgs, response_format=fmt, temperature=0.5)
    assert req["response_format"] == {"type": "json_object", "schema": {"type": "object"}}
    assert req["repeat_penalty"] == 1.0 and req["model"] == "m" and req["temperature"] == 0.5
    assert (small.max_tool_turns, small.answer_synthesis, small.abilities["json_schema"]) == (1, False, True)
    assert big._request(msgs, response_format=fmt)["response_format"] == fmt
    assert "repeat_penalty" not in big._request(msgs)
    assert (big.max_tool_turns, big.answer_synthesis) == (None, True)


@pytest.mark.parametrize("body", ['max_tool_turns = 0\n', 'answer_synthesis = "no"\n',
                                  'json_schema_as = "grammar"\n', 'abilities = { json_schema = 1 }\n'])
def test_bad_values_are_refused_naming_the_field(tmp_path: Path, body: str):
    from reactq.shared.errors import ConfigError

    field = body.split(" =")[0]
    with pytest.raises(ConfigError, match=r"\[models\.small\] " + ("abilities" if "abilities" in body else field)):
        _registry(tmp_path, body)


def test_a_tool_without_parameters_gets_any_object():
    tool = Tool(name="noargs", description="d", args_model=AddArgs, fn=lambda a, b: "x")
    fn = dict(tool.openai_schema()["function"])
    fn.pop("parameters")
    alt = action_schema([{"type": "function", "function": fn}])["anyOf"][0]
    assert alt["properties"]["tool_args"] == {"type": "object"}
