"""The cluster-wide limiter's decisions (Lua on fakeredis[lua]; a fake clock)."""

from __future__ import annotations

import fakeredis
import pytest

from reactq.shared.engine import flowcontrol
from reactq.shared.engine.state import RunState
from reactq.shared.stores import flow as L
from reactq.shared.stores.flow import Denied, FlowLimiter, Limits, Ticket
from reactq.shared.keys import Keys


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000_000.0

    def __call__(self) -> float:
        return self.ms

    def advance(self, seconds: float) -> None:
        self.ms += seconds * 1000


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(L, "_now_ms", c)
    return c


@pytest.fixture
def lim() -> FlowLimiter:
    return FlowLimiter(fakeredis.FakeRedis(), Keys("t:"), horizon_s=0.5, grace_s=5)


def test_requests_are_spread_at_the_rpm_pace_not_burst(lim: FlowLimiter, clock: Clock) -> None:
    limits = Limits(rpm=600)  # one request every 100 ms
    starts = []
    for i in range(6):
        got = lim.acquire("m", limits, member=f"r{i}", priority="interactive", tokens=10)
        assert isinstance(got, Ticket), got
        starts.append(got.start_in)
    assert starts == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4, 0.5])
    # The seventh would start 0.6 s out: beyond the horizon, so it waits instead.
    got = lim.acquire("m", limits, member="r6", priority="interactive", tokens=10)
    assert isinstance(got, Denied) and got.reason in ("rate", "line") and got.wait_s > 0


def test_at_most_rpm_starts_in_any_minute(lim: FlowLimiter, clock: Clock) -> None:
    limits = Limits(rpm=60)
    started: list[float] = []
    t_end = clock.ms + 180_000
    while clock.ms < t_end:
        got = lim.acquire("m", limits, member="x", priority="batch", tokens=1)
        if isinstance(got, Ticket):
            started.append(clock.ms + got.start_in * 1000)
        clock.advance(0.05)
    for t in started:
        assert sum(1 for u in started if t <= u < t + 60_000) <= 60


def test_token_reservation_is_settled_with_reported_usage(lim: FlowLimiter, clock: Clock) -> None:
    limits = Limits(tpm=6000)  # 10 ms a token
    a = lim.acquire("m", limits, member="a", priority="interactive", tokens=100)  # 1 s of tokens
    assert isinstance(a, Ticket) and a.start_in == 0
    b = lim.acquire("m", limits, member="b", priority="interactive", tokens=100)
    assert isinstance(b, Denied)  # would start 1 s out
    lim.settle(a, limits, 10)  # it used only 10 tokens: 0.9 s given back
    c = lim.acquire("m", limits, member="b", priority="interactive", tokens=100)
    assert isinstance(c, Ticket) and c.start_in == pytest.approx(0.1, abs=0.01)
    assert lim.usage("m")["tpm_used"] == 10


def test_max_concurrency_counts_calls_in_flight(lim: FlowLimiter, clock: Clock) -> None:
    limits = Limits(max_concurrency=2)
    t1 = lim.acquire("m", limits, member="a", priority="interactive", tokens=1)
    t2 = lim.acquire("m", limits, member="b", priority="interactive", tokens=1)
    assert isinstance(t1, Ticket) and isinstance(t2, Ticket)
    d = lim.acquire("m", limits, member="c", priority="interactive", tokens=1)
    assert isinstance(d, Denied) and d.reason == "concurrency"
    assert lim.usage("m")["in_flight"] == 2
    lim.settle(t1, limits, 1)
    assert isinstance(lim.acquire("m", limits, member="c", priority="interactive", tokens=1), Ticket)


def test_pause_stops_everyone_until_it_ends(lim: FlowLimiter, clock: Clock) -> None:
    lim.pause("m", 2.0)
    for limits in (Limits(), Limits(rpm=1000)):
        d = lim.acquire("m", limits, member="a", priority="interactive", tokens=1)
        assert isinstance(d, Denied) and d.reason == "paused" and d.wait_s >= 1.9
    clock.advance(2.01)
    assert isinstance(lim.acquire("m", Limits(), member="a", priority="interactive", tokens=1), Ticket)


class Counting(fakeredis.FakeRedis):
    """Counts the commands and script calls sent (each ``EVAL``/``EVALSHA`` is one)."""

    sent: list[str]

    def execute_command(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.sent.append(str(args[0]).upper())
        return super().execute_command(*args, **kwargs)


def test_a_model_without_limits_is_admitted_on_one_read_and_settles_into_its_use(clock: Clock) -> None:
    r = Counting()
    r.sent = []
    lim = FlowLimiter(r, Keys("t:"), horizon_s=0.5, grace_s=5)
    got = lim.acquire("m", Limits(), member="a", priority="interactive", tokens=40)
    assert isinstance(got, Ticket) and got.free and got.start_in == 0
    assert r.sent == ["HGET"]  # the pause, nothing written
    lim.settle(got, Limits(), 33)
    unused = lim.acquire("m", Limits(), member="b", priority="batch", tokens=40)
    assert isinstance(unused, Ticket)
    lim.settle(unused, Limits(), 0, learn=False)  # given back unused: leaves no trace
    use = lim.usage("m")
    assert (use["rpm_used"], use["tpm_used"], use["reserved_tokens"], use["in_flight"]) == (1, 33, 0, 0)
    assert 0 < r.ttl(Keys("t:").flow_window("m")) <= 120


def test_a_pause_read_ahead_by_the_step_serves_its_admission_once(clock: Clock) -> None:
    r = Counting()
    r.sent = []
    lim = FlowLimiter(r, Keys("t:"), horizon_s=0.5, grace_s=5)
    assert lim.pause_read() is None  # nothing admitted yet: nothing to guess
    assert isinstance(lim.acquire("m", Limits(), member="a", priority="interactive", tokens=1), Ticket)
    model, op = lim.pause_read() or ("", None)
    assert model == "m" and op is not None and op.args[0] == "HGET"
    with L.seen_pauses() as seen:
        seen["m"] = None  # what the step's first round trip read: no pause
        r.sent = []
        assert isinstance(lim.acquire("m", Limits(), member="a", priority="interactive", tokens=1), Ticket)
        assert r.sent == []  # no round trip of its own
        assert isinstance(lim.acquire("m", Limits(), member="a", priority="interactive", tokens=1), Ticket)
        assert r.sent == ["HGET"]  # a second call of the step reads again
        seen["m"] = b"1"  # a pause was set: the script decides
        lim.pause("m", 1.0)
        assert isinstance(lim.acquire("m", Limits(), member="a", priority="interactive", tokens=1), Denied)


def test_a_pause_over_with_nobody_waiting_is_cleared_and_the_fast_admission_returns(
        lim: FlowLimiter, clock: Clock) -> None:
    lim.pause("m", 1.0)
    assert isinstance(lim.acquire("m", Limits(), member="a", priority="interactive", tokens=1), Denied)
    assert isinstance(lim.acquire("m", Limits(), member="b", priority="batch", tokens=1), Denied)
    clock.advance(1.1)
    first = lim.acquire("m", Limits(), member="a", priority="interactive", tokens=1)
    assert isinstance(first, Ticket) and not first.free  # "b" still waits: the pause stays
    second = lim.acquire("m", Limits(), member="b", priority="batch", tokens=1)
    assert isinstance(second, Ticket) and not second.free  # the last waiter clears it
    third = lim.acquire("m", Limits(), member="c", priority="interactive", tokens=1)
    assert isinstance(third, Ticket) and third.free
    lim.pause("m", 1.0)  # a new 429 stops the fast admission again
    assert isinstance(lim.acquire("m", Limits(), member="c", priority="interactive", tokens=1), Denied)


def test_waiters_keep_their_place_and_interactive_goes_first(lim: FlowLimiter, clock: Clock) -> None:
    limits = Limits(rpm=60)  # one a second; horizon 0.5 s ⇒ one admitted at a time
    assert isinstance(lim.acquire("m", limits, member="first", priority="batch", tokens=1), Ticket)
    for m in ("b1", "b2"):
        assert isinstance(lim.acquire("m", limits, member=m, priority="batch", tokens=1), Denied)
    clock.advance(0.6)
    # b2 comes back before b1: b1 arrived first, so b2 still waits.
    assert isinstance(lim.acquire("m", limits, member="b2", priority="batch", tokens=1), Denied)
    # An interactive run arriving now takes the next slot, ahead of both batch waiters.
    assert isinstance(lim.acquire("m", limits, member="i1", priority="interactive", tokens=1), Ticket)
    assert isinstance(lim.acquire("m", limits, member="b1", priority="batch", tokens=1), Denied)
    # Two interactive newcomers: the second waits, and while it waits no batch run goes.
    assert isinstance(lim.acquire("m", limits, member="i2", priority="interactive", tokens=1), Denied)
    clock.advance(1.0)
    assert isinstance(lim.acquire("m", limits, member="b1", priority="batch", tokens=1), Denied)
    assert isinstance(lim.acquire("m", limits, member="i2", priority="interactive", tokens=1), Ticket)
    clock.advance(1.0)
    assert isinstance(lim.acquire("m", limits, member="b2", priority="batch", tokens=1), Denied)
    assert isinstance(lim.acquire("m", limits, member="b1", priority="batch", tokens=1), Ticket)


def test_a_waiter_that_never_returns_loses_its_place(lim: FlowLimiter, clock: Clock) -> None:
    limits = Limits(rpm=60)
    lim.acquire("m", limits, member="x", priority="batch", tokens=1)
    gone = lim.acquire("m", limits, member="gone", priority="batch", tokens=1)
    assert isinstance(gone, Denied)
    clock.advance(gone.wait_s + 6)  # past its wait + grace
    assert isinstance(lim.acquire("m", limits, member="later", priority="batch", tokens=1), Ticket)


def _state(**kw: object) -> RunState:
    return RunState(run_id="r", query="q", model="m", mode="native", max_iterations=5, **kw)


def test_budget_stop_answers_with_the_max_iterations_summary() -> None:
    state = _state(token_budget=100, phase="llm", iteration=2)
    assert flowcontrol.budget_reached(state, 100) and not flowcontrol.budget_reached(state, 99)
    events = flowcontrol.stop_for_budget(state, 120, now=1.0)
    kinds = [(e.channel, e.data.get("kind") or e.data.get("status") or e.data.get("type")) for e in events]
    assert kinds[0] == ("error", "budget")
    assert kinds[-1] == ("done", "succeeded")
    assert state.status == "succeeded" and state.phase == "done"
    assert state.final_answer.startswith("I was unable to complete the task within 2 iterations")
    deltas = "".join(e.data["content"] for e in events if e.data.get("status") == "delta")
    assert deltas == state.final_answer
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


def test_rate_limited_event_once_per_wait() -> None:
    state = _state(phase="llm")
    first = flowcontrol.rate_limited(state, "m", 2.0, now=1.0)
    assert [e.data for e in first] == [{"phase": "rate_limited", "model": "m", "wait_s": 2.0, "seq": 1}]
    assert flowcontrol.rate_limited(state, "m", 1.0, now=2.0) == []
    flowcontrol.admitted(state)
    assert len(flowcontrol.rate_limited(state, "m", 1.0, now=3.0)) == 1


def test_the_sdk_retry_of_429s_is_switched_off_under_the_metering_wrapper() -> None:
    from reactq.shared.flow.middleware import FlowControl, LimitedLLM
    from reactq.shared.llm.openai import OpenAILLM
    from reactq.workers.metrics import MeteredLLM

    base = OpenAILLM("m", base_url="http://127.0.0.1:9/v1")
    assert base.retry_rate_limits
    LimitedLLM(MeteredLLM(base, recorder=None), Limits(), FlowControl(limiter=None))  # type: ignore[arg-type]
    assert base.retry_rate_limits is False


def test_estimates_learn_the_models_actual_to_estimated_ratio(lim: FlowLimiter, clock: Clock) -> None:
    limits = Limits(tpm=60_000)
    for _ in range(20):
        t = lim.acquire("m", limits, member="a", priority="interactive", tokens=1000)
        assert isinstance(t, Ticket)
        lim.settle(t, limits, 100)  # the provider reports a tenth of the estimate
        clock.advance(1)
    t = lim.acquire("m", limits, member="a", priority="interactive", tokens=1000)
    assert isinstance(t, Ticket) and 100 <= t.reserved < 150


def test_registry_entries_take_the_three_limits_and_refuse_nonsense(tmp_path) -> None:
    from reactq.shared.errors import ConfigError
    from reactq.shared.llm.registry import load_model_specs

    good = tmp_path / "m.toml"
    good.write_text('[models.a]\nmodel = "x"\nrpm = 500\ntpm = 200000\nmax_concurrency = 50\n')
    (spec,) = load_model_specs(good)
    assert (spec.rpm, spec.tpm, spec.max_concurrency) == (500, 200000, 50)
    bad = tmp_path / "bad.toml"
    bad.write_text('[models.a]\nmodel = "x"\nrpm = 0\n')
    with pytest.raises(ConfigError, match=r"\[models.a\] rpm"):
        load_model_specs(bad)


def test_run_requests_take_priority_and_token_budget() -> None:
    from pydantic import ValidationError

    from reactq.dispatcher.batch.items import parse_obj
    from reactq.shared.requests import RunRequest

    assert RunRequest(query="q").priority == "interactive"
    assert RunRequest(query="q", priority="batch", token_budget=10).token_budget == 10
    for bad in ({"priority": "urgent"}, {"token_budget": 0}):
        with pytest.raises(ValidationError):
            RunRequest(query="q", **bad)
    assert parse_obj({"query": "q"}, 1).request.priority == "batch"
    assert parse_obj({"query": "q", "priority": "interactive"}, 1).request.priority == "interactive"


def test_reactq_run_shows_a_wait_for_capacity() -> None:
    import io

    from rich.console import Console

    from reactq.dispatcher.cli.render import RunRenderer
    from reactq.shared.events import Event

    buf = io.StringIO()
    r = RunRenderer(Console(file=buf, width=100, force_terminal=False))
    r.handle(Event("phase", {"phase": "rate_limited", "model": "general", "wait_s": 2.5, "seq": 1}), "1-0")
    r.close()
    assert "model general is at its limits; waiting ≈ 2.5s" in buf.getvalue()


def test_a_freed_slot_goes_to_the_waiting_interactive_call_not_a_batch_call(lim: FlowLimiter, clock: Clock) -> None:
    """max_concurrency = 1 saturated by a batch: an interactive call that asked while the
    slot was taken gets it next, whichever batch waiter comes back first."""
    limits = Limits(max_concurrency=1)
    busy = lim.acquire("m", limits, member="b0", priority="batch", tokens=1)
    assert isinstance(busy, Ticket)
    for m in ("b1", "b2"):
        assert isinstance(lim.acquire("m", limits, member=m, priority="batch", tokens=1), Denied)
    assert isinstance(lim.acquire("m", limits, member="i1", priority="interactive", tokens=1), Denied)
    lim.settle(busy, limits, 1)
    clock.advance(0.01)
    # The batch waiters are back first: the free slot is the interactive call's.
    for m in ("b1", "b2"):
        assert isinstance(lim.acquire("m", limits, member=m, priority="batch", tokens=1), Denied)
    got = lim.acquire("m", limits, member="i1", priority="interactive", tokens=1)
    assert isinstance(got, Ticket)
    lim.settle(got, limits, 1)
    # Then the batch line in its own order.
    assert isinstance(lim.acquire("m", limits, member="b2", priority="batch", tokens=1), Denied)
    assert isinstance(lim.acquire("m", limits, member="b1", priority="batch", tokens=1), Ticket)
