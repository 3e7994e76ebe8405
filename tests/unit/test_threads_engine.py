"""Threads in the pure engine: history before the query, the S81 block in synthesis, what a
finished run leaves in its thread, and the interrupt stop (no I/O, no Redis)."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import ValidationError

from reactq.shared.engine import ending, loop
from reactq.shared.engine import prompts as P
from reactq.shared.engine.context import ContextGuard, estimate_messages
from reactq.shared.engine.conversation import (
    enriched_query,
    fit_history,
    previous_conversation,
    thread_turns,
)
from reactq.shared.engine.state import RunState
from reactq.shared.engine.synthesis import synthesis_messages
from reactq.shared.models import ChatMessage, ToolCallRequest
from reactq.shared.requests import RunRequest

HISTORY = [ChatMessage(role="user", content="my name is Ada"), ChatMessage(role="assistant", content="Hello Ada.")]


def _state(**kw: object) -> RunState:
    base: dict[str, object] = {"run_id": "r", "query": "what is my name?", "model": "m", "mode": "native",
                               "max_iterations": 5}
    base.update(kw)
    return RunState(**base)  # type: ignore[arg-type]


def test_the_thread_history_comes_pinned_between_the_system_prompt_and_the_query():
    state = _state(history=HISTORY)
    loop.start(state, [], now=0.0)
    assert [(m.role, m.content, m.pinned) for m in state.messages[1:]] == [
        ("user", "my name is Ada", True), ("assistant", "Hello Ada.", True), ("user", "what is my name?", True)]
    assert state.messages[0].role == "system"


def test_a_thread_that_outgrew_the_budget_still_gives_requests_that_fit():
    """Pinned messages are never dropped by the guard (S71/S73), so a run starts from the
    newest whole turns that fit in half its budget; the guard then keeps it in budget."""
    long = [ChatMessage(role="user" if i % 2 == 0 else "assistant", content=f"turn {i} " + "x" * 4000)
            for i in range(20)]
    unfitted = _state(history=long)
    loop.start(unfitted, [], now=0.0)
    guard = ContextGuard(budget=6000)
    kept = asyncio.run(guard.check_and_compact(unfitted.messages))
    assert estimate_messages(kept) > 6000, "without fitting, pinned history overflows (the reason for fit_history)"
    fitted = fit_history(long, 3000)
    assert fitted and estimate_messages(fitted) <= 3000
    assert fitted[-1].content == long[-1].content and fitted[0].role == "user", "newest whole turns"
    state = _state(history=fitted)
    loop.start(state, [], now=0.0)
    state.messages += [ChatMessage(role="user", content="y" * 4000) for _ in range(6)]
    kept = asyncio.run(guard.check_and_compact(state.messages))
    assert estimate_messages(kept) <= 6000 and kept[-1].content == "y" * 4000


def test_synthesis_gets_the_previous_conversation_block():
    state = _state(history=HISTORY)
    text = synthesis_messages(state)[1].content
    assert text.startswith("Question: Previous conversation:\nUser: my name is Ada\nAssistant: Hello Ada."
                           "\n\nCurrent request: what is my name?")
    assert synthesis_messages(_state())[1].content.startswith("Question: what is my name?\n")


def test_previous_conversation_keeps_the_newest_part_when_too_long():
    assert enriched_query([], "q") == "q"
    hist = [ChatMessage(role="user", content="a" * 50), ChatMessage(role="assistant", content="zz")]
    assert previous_conversation(hist, max_chars=10).endswith("zz") and len(previous_conversation(hist, max_chars=10)) == 10


def _stopped(strategy: str) -> RunState:
    state = _state()
    loop.start(state, [], now=0.0)
    call = ToolCallRequest(id="c1", name="search", arguments={"q": "x"})
    state.messages.append(ChatMessage(role="assistant", tool_calls=[call]))
    state.pending_calls = [call]
    state.phase = "tools"
    events = ending.interrupt(state, now=1.0, strategy=strategy)
    assert [e.channel for e in events] == ["error", "done"]
    assert events[0].data["kind"] == "interrupted" and events[0].data["strategy"] == strategy
    return state


def test_an_interrupt_answers_the_open_call_as_interrupted_and_cancels_the_run():
    state = _stopped("interrupt")
    assert state.status == "cancelled" and state.phase == "done"
    assert (state.messages[-1].role, state.messages[-1].tool_call_id, state.messages[-1].content) == (
        "tool", "c1", P.INTERRUPTED_OBSERVATION)
    assert not state.steps, "an interrupted call is not recorded as run"
    turns = thread_turns(state, "interrupt")
    assert turns[0].content == "what is my name?"
    assert "interrupted" in turns[1].content and "search" in turns[1].content


def test_what_a_run_leaves_in_its_thread():
    assert thread_turns(_stopped("rollback"), "rollback") == []
    done = _state(status="succeeded", phase="done", final_answer="Ada")
    assert [m.content for m in thread_turns(done, "rollback")] == ["what is my name?", "Ada"], \
        "a run that finished before the stop took effect stands"
    failed = _state(status="failed", phase="done", error="boom")
    assert "failed" in thread_turns(failed, None)[1].content
    injected = _state(status="succeeded", phase="done", final_answer="ok", messages=[
        ChatMessage(role="user", content="[USER INTERRUPT]: also this", pinned=True)])
    assert thread_turns(injected, None)[0].content == "what is my name?\n\n[USER INTERRUPT]: also this"


@pytest.mark.parametrize("bad", ["", "a{b}", "x" * 201, "sp ace"])
def test_thread_ids_are_checked_at_the_door(bad):
    with pytest.raises(ValidationError) as err:
        RunRequest(query="q", thread_id=bad)
    assert err.value.errors()[0]["loc"] == ("thread_id",)


def test_multitask_strategy_is_one_of_five():
    assert RunRequest(query="q").multitask_strategy == "inject"
    with pytest.raises(ValidationError):
        RunRequest(query="q", multitask_strategy="later")  # type: ignore[arg-type]


def test_tool_selection_on_a_thread_sees_the_previous_conversation():
    from pydantic import BaseModel
    from reactq.shared.engine.deps import EngineDeps
    from reactq.shared.engine.steps import select_step
    from reactq.shared.llm.testing import ScriptedLLM, tool_json
    from reactq.shared.settings import EngineConfig
    from reactq.shared.tools.base import Tool, ToolRegistry

    class A(BaseModel):
        x: str = ""

    registry = ToolRegistry([Tool(name=f"t{i}", description=f"tool {i}", args_model=A, fn=lambda x="": x)
                             for i in range(20)])
    llm = ScriptedLLM([tool_json({"tools": ["t1"]})])
    state = _state(history=HISTORY, available_tools=registry.names())

    class IO:
        async def publish(self, events):
            pass

        async def interrupts(self, after):
            return []

    asyncio.run(select_step(state, EngineDeps(llm=llm, registry=registry, config=EngineConfig()), IO()))
    prompt = " ".join(str(m.content) for m in llm.calls[0].messages)
    assert "Previous conversation:\nUser: my name is Ada" in prompt and "Current request: what is my name?" in prompt


def test_a_guarded_runs_thread_turns_keep_only_what_its_guardrails_saw():
    """Under an ANSWER guardrail a thread keeps the checked answer only, and a note about a
    stopped run names only the run's own tools (an invented name may carry anything)."""
    done = _state(status="succeeded", answer="reach ada@example.com", final_answer="", answer_guarded=True)
    assert "ada@example.com" not in thread_turns(done, None)[1].content
    stopped = _state(status="cancelled", answer_guarded=True, available_tools=["search"],
                     pending_calls=[ToolCallRequest(id="c1", name="search", arguments={}),
                                    ToolCallRequest(id="c2", name="mail_ada@example.com", arguments={})])
    note = thread_turns(stopped, None)[1].content
    assert "search" in note and "ada@example.com" not in note
