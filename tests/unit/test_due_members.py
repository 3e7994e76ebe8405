"""Due member names (reactq.shared.stores.due): what the watchdog parses is what commits write."""

from __future__ import annotations

import time

from reactq.shared.stores.due import Member, dag_member, deadline_ms, parse_member, run_member, tool_member


def test_member_names_round_trip() -> None:
    assert parse_member(run_member("abc")) == Member("run", "abc")
    assert parse_member(dag_member("d1")) == Member("dag", "d1")
    # A tool call id is whatever the LLM sent, colons included.
    assert parse_member(tool_member("abc", "call:1:x")) == Member("tool", "abc", "call:1:x")


def test_unknown_or_broken_names_are_not_guessed() -> None:
    for name in ("", "run:", "tool:abc", "tool::x", "lease:run:abc", "weird"):
        assert parse_member(name) is None


def test_a_deadline_is_one_bound_after_now_or_after_a_later_moment() -> None:
    now = time.time()
    assert abs(deadline_ms(5.0) - (now + 5.0) * 1000) < 500
    assert abs(deadline_ms(5.0, after=now + 60) - (now + 65) * 1000) < 500
    assert abs(deadline_ms(5.0, after=now - 60) - (now + 5) * 1000) < 500, "never in the past"
