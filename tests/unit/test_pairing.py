"""The history validator the integration tier runs on every LLM request (tests/pairing.py)."""

from __future__ import annotations

from tests.pairing import pairing_problem


def _call(cid: str) -> dict:
    return {"id": cid, "type": "function", "function": {"name": "f", "arguments": "{}"}}


def _body(*messages: dict) -> dict:
    return {"messages": [{"role": "system", "content": "s"}, *messages]}


def test_paired_calls_pass_in_any_order():
    body = _body({"role": "user", "content": "q"},
                 {"role": "assistant", "content": None, "tool_calls": [_call("a"), _call("b")]},
                 {"role": "tool", "tool_call_id": "b", "content": "2"},
                 {"role": "tool", "tool_call_id": "a", "content": "1"},
                 {"role": "user", "content": "[USER INTERRUPT]: more"})
    assert pairing_problem(body) is None


def test_a_message_between_a_call_and_its_result_is_refused():
    body = _body({"role": "user", "content": "q"},
                 {"role": "assistant", "tool_calls": [_call("a"), _call("b")]},
                 {"role": "tool", "tool_call_id": "a", "content": "1"},
                 {"role": "user", "content": "[USER INTERRUPT]: more"},
                 {"role": "tool", "tool_call_id": "b", "content": "2"})
    assert "before the results" in pairing_problem(body)


def test_a_missing_result_an_orphan_result_and_a_repeated_result_are_refused():
    assert "ends before" in pairing_problem(_body({"role": "assistant", "tool_calls": [_call("a")]}))
    assert "answers no call" in pairing_problem(_body({"role": "user", "content": "q"},
                                                      {"role": "tool", "tool_call_id": "a", "content": "1"}))
    assert "twice" in pairing_problem(_body({"role": "assistant", "tool_calls": [_call("a")]},
                                            {"role": "tool", "tool_call_id": "a", "content": "1"},
                                            {"role": "tool", "tool_call_id": "a", "content": "1"}))
    assert "repeated" in pairing_problem(_body({"role": "assistant", "tool_calls": [_call("a"), _call("a")]}))
