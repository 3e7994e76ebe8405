"""Lenient JSON extraction (SPEC S8) and argument hashing (S40)."""

from __future__ import annotations

import hashlib
import json

import pytest

from reactq.shared.engine.jsonx import extract_json, md5_args


def test_pure_json_object_is_parsed() -> None:
    """S8: a reply that is exactly a JSON object."""
    assert extract_json('{"type": "final_answer", "answer": "hi"}') == {
        "type": "final_answer", "answer": "hi"}


def test_surrounding_whitespace_is_ignored() -> None:
    """S8: leading/trailing whitespace around pure JSON."""
    assert extract_json('\n  {"a": 1}\n ') == {"a": 1}


@pytest.mark.parametrize("fence", ["```json", "```JSON", "```"])
def test_json_inside_code_fences_is_extracted(fence: str) -> None:
    """S8: ```json fences (and plain ``` fences) around the object."""
    reply = f'Here you go:\n{fence}\n{{"answer": "42"}}\n```\nDone.'
    assert extract_json(reply) == {"answer": "42"}


def test_first_balanced_object_in_prose_is_extracted() -> None:
    """S8: the first balanced {…} embedded in prose."""
    reply = ('I will call a tool. {"type": "tool_call", "tool_args": {"x": {"y": 1}}} '
             'Then more {"b": 2}')
    assert extract_json(reply) == {"type": "tool_call", "tool_args": {"x": {"y": 1}}}


def test_braces_inside_strings_do_not_confuse_matching() -> None:
    """S8: brace matching is string-aware (escaped quotes included)."""
    reply = 'Answer: {"code": "if (a) { b(); }", "q": "say \\"}\\" now"} trailing }'
    assert extract_json(reply) == {"code": "if (a) { b(); }", "q": 'say "}" now'}


def test_a_later_object_is_used_when_the_first_braces_are_not_json() -> None:
    """S8: prose braces like {placeholder} are skipped for the next real object."""
    assert extract_json('Use {name} here: {"a": 1}') == {"a": 1}


def test_invalid_backslash_escapes_are_repaired() -> None:
    """S8: \\d, \\w or a Windows path inside a string are kept literally."""
    reply = r'{"pattern": "\d+\w*", "path": "C:\Users\me"}'
    assert extract_json(reply) == {"pattern": r"\d+\w*", "path": r"C:\Users\me"}


def test_valid_escapes_survive_the_repair() -> None:
    """S8: repair only touches invalid escapes; \\n, \\" and \\u00e9 stay escapes."""
    reply = r'{"a": "line\nnext", "b": "\"q\"", "c": "caf\u00e9", "d": "\x"}'
    assert extract_json(reply) == {"a": "line\nnext", "b": '"q"', "c": "café", "d": r"\x"}


def test_raw_newlines_and_tabs_inside_strings_are_repaired() -> None:
    """S8: literal newlines/tabs in a string value do not break parsing."""
    reply = '{"answer": "line one\nline two\tend"}'
    assert extract_json(reply) == {"answer": "line one\nline two\tend"}


def test_broken_escape_inside_prose_object_is_repaired() -> None:
    """S8: repair applies to objects found in prose and fences too."""
    reply = 'Result:\n```json\n{"regex": "^\\s+$"}\n```'
    assert extract_json(reply) == {"regex": "^\\s+$"}


@pytest.mark.parametrize("reply", ["", "   ", "no json here", "{not: json}", "{\"a\": 1",
                                   "[1, 2]", '[{"a": 1}]', "42", '"text"', "null"])
def test_non_objects_give_none(reply: str) -> None:
    """S8: non-JSON, truncated JSON and top-level non-objects (lists…) ⇒ None."""
    assert extract_json(reply) is None


def test_none_input_gives_none() -> None:
    """S8: a None content (native reply without text) is not JSON."""
    assert extract_json(None) is None


def test_unicode_content_is_kept() -> None:
    """S8: non-ASCII text round-trips."""
    assert extract_json('답: {"answer": "안녕하세요 你好"}') == {"answer": "안녕하세요 你好"}


def test_md5_args_ignores_key_order() -> None:
    """S40: the cycle hash is md5 of json.dumps(args, sort_keys=True, ensure_ascii=False)."""
    args = {"b": 1, "a": "é"}
    expected = hashlib.md5(
        json.dumps(args, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
    assert md5_args(args) == expected == md5_args({"a": "é", "b": 1})


def test_md5_args_treats_none_as_empty_arguments() -> None:
    """S40: null/missing arguments hash like {}."""
    assert md5_args(None) == md5_args({}) == hashlib.md5(b"{}").hexdigest()


def test_md5_args_differs_for_different_arguments() -> None:
    """S40: different arguments ⇒ different hash."""
    assert md5_args({"text": "a"}) != md5_args({"text": "b"})


def test_an_unbalanced_brace_in_prose_does_not_hide_a_later_object() -> None:
    """S8: "{name" never closes, yet the object after it is found."""
    assert extract_json('Fill in {name here: {"a": 1} please') == {"a": 1}
