"""Which live worker offers which tool (``reactq.shared.stores.toolsets``): liveness, the
hand-on queue chosen, names ever offered, and one look per second at a waiting call."""

from __future__ import annotations

import fakeredis

from reactq.shared.keys import Keys
from reactq.shared.stores.toolsets import FORGET_S, LIVE_S, ToolSets
from reactq.shared.tools.base import ToolRegistry
from reactq.shared.tools.remote import remote_tool


def _sets() -> ToolSets:
    return ToolSets(fakeredis.FakeRedis(), Keys())


def test_a_tool_is_offered_by_live_workers_only_and_stale_entries_are_forgotten() -> None:
    s = _sets()
    s.announce("a@h", ["calculator", "slow"], "reactq.tools.@a@h", now=1000.0)
    s.announce("b@h", ["calculator"], "reactq.tools.@b@h", now=1000.0 - LIVE_S - 1)
    s.announce("c@h", ["slow"], "reactq.tools.@c@h", now=1000.0 - FORGET_S - 1)
    assert {ts.node for ts in s.live(now=1000.0)} == {"a@h"}
    assert s.r.hkeys(Keys().toolsets) and b"c@h" not in s.r.hkeys(Keys().toolsets), "forgotten"
    s.announce("a@h", ["calculator", "slow"], "reactq.tools.@a@h")
    assert s.queue_for("slow") == "reactq.tools.@a@h"
    assert s.queue_for("slow", exclude="a@h") is None
    s.retire("a@h")
    assert s.queue_for("slow") is None


def test_names_ever_offered_keep_their_schema() -> None:
    s = _sets()
    s.offer([{"name": "slow", "description": "Sleeps.", "parameters": {"type": "object"}, "idempotent": False}])
    assert s.ever_offered("slow") and not s.ever_offered("made_up")
    [entry] = s.schemas(["slow", "made_up"])
    stand_in = remote_tool(entry)
    assert stand_in.openai_schema()["function"]["name"] == "slow" and stand_in.idempotent is False
    reg = ToolRegistry()
    reg.add_missing([stand_in])
    reg.add_missing([remote_tool(entry)])
    assert reg.names() == ["slow"]


def test_a_waiting_call_is_looked_at_once_per_interval_whatever_the_duplicates() -> None:
    s = _sets()
    waited, looks = s.wait("r1", "c1", 1.0, ttl=90, now=100.0)
    assert (waited, looks) == (0.0, True)
    waited, looks = s.wait("r1", "c1", 1.0, ttl=90, now=100.2)  # a duplicate (the watchdog's resend)
    assert not looks and round(waited, 3) == 0.2
    waited, looks = s.wait("r1", "c1", 1.0, ttl=90, now=101.0)
    assert looks and round(waited, 3) == 1.0
    s.done_waiting("r1", "c1")
    assert s.wait("r1", "c1", 1.0, ttl=90, now=200.0) == (0.0, True)
