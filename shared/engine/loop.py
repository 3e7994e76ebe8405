"""The ReAct loop as pure transitions over ``RunState``.

Each function takes the state and what just happened (an LLM reply, tool outcomes,
drained interrupts, the current time), mutates the state and returns the events it
produced, with their ``seq`` already assigned. After every transition
``next.next_step(state)`` says what comes next (``SelectTools``, ``CallLLM``,
``RunTools(calls)``, ``Answer`` or ``Done``); how a run ends is in ``ending``, flow
control's transitions in ``flowcontrol``, the run's result in ``result``.

No I/O happens here: the shells (``reactq.shared.inprocess``, ``workers``) carry it out.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from reactq.shared.engine import action_schema, recorded
from reactq.shared.engine import prompts as P
from reactq.shared.engine import turncap
from reactq.shared.engine.actions import Action, parse_action
from reactq.shared.engine.callevents import done_data, start_data
from reactq.shared.engine.jsonx import md5_args, text_json
from reactq.shared.engine.result import step_summary
from reactq.shared.engine.state import Interrupt, RunState, StepRecord, ToolOutcome
from reactq.shared.events import Event
from reactq.shared.models import ChatMessage, LLMResult, ToolCallRequest, Usage
from reactq.shared.settings import EngineConfig


def emit(state: RunState, channel: str, **data: Any) -> Event:
    """Make the run's next event (assigns ``seq``)."""
    state.seq += 1
    return Event(channel, {**data, "seq": state.seq})


def new_run(
    *,
    run_id: str,
    query: str,
    model: str,
    native: bool,
    available_tools: list[str],
    max_iterations: int,
    completion_check: bool = True,
    system_prompt: str | None = None,
    metadata: dict[str, Any] | None = None,
    now: float,
) -> RunState:
    """A fresh run. ``native`` is the resolved mode: the caller checked the abilities."""
    return RunState(
        run_id=run_id,
        query=query,
        model=model,
        mode="native" if native else "json",
        max_iterations=max_iterations,
        completion_check=completion_check,
        system_prompt=system_prompt,
        metadata=dict(metadata or {}),
        available_tools=list(available_tools),
        started_at=now,
    )


def needs_selection(state: RunState, config: EngineConfig) -> bool:
    """Select only when more than the threshold of tools are available."""
    return len(state.available_tools) > config.tool_selection_threshold


def selecting_event(state: RunState) -> Event:
    return emit(state, "phase", phase="selecting_tools", total_tools=len(state.available_tools))


def set_tools(state: RunState, selected: list[str] | None) -> None:
    """Fix the run's tool set: the selection, or every available tool (``None``)."""
    state.tool_names = list(state.available_tools) if selected is None else list(selected)


def start(state: RunState, schemas: list[dict[str, Any]], *, now: float) -> None:
    """Build the first messages from the schemas of the run's tools."""
    if state.tool_names is None:
        set_tools(state, None)
    # A thread's earlier turns come between the system prompt and the query, pinned like
    # injected messages (the context guard still unpins and compacts them when they
    # outgrow half its budget).
    state.messages = [
        ChatMessage(role="system", content=P.system_prompt(state.mode, schemas, now=now,
                                                            extra=state.system_prompt)),
        *(m.model_copy(update={"pinned": True}) for m in state.history),
        ChatMessage(role="user", content=state.query, pinned=True),
    ]
    state.phase = "llm"


def begin_turn(state: RunState) -> list[Event]:
    """Start turn ``iteration + 1``: the thinking-start event."""
    state.iteration += 1
    return [emit(state, "step", type="thinking", status="start", iteration=state.iteration)]


def llm_request(state: RunState, schemas: list[dict[str, Any]], json_mode: bool, *,
                json_schema: bool = False, max_tool_turns: int | None = None) -> dict[str, Any]:
    """Keyword arguments of this turn's ``chat()`` call.

    ``json_schema`` (the model's ability): JSON-mode turns send the action's schema
    (``action_schema``) instead of asking for any JSON object. ``max_tool_turns`` (the
    model's registry entry) reached: the turn may only answer — the schema keeps the final
    answer alone, native mode says ``tool_choice="none"`` (JSON mode without a schema
    cannot be held to it).
    """
    answer_only = _answer_only(state, max_tool_turns)
    if state.mode == "native":
        return {"tools": schemas or None,
                "tool_choice": ("none" if answer_only else "auto") if schemas else None}
    if json_schema:
        return {"response_format": action_schema.response_format(schemas, answer_only=answer_only)}
    return {"response_format": {"type": "json_object"} if json_mode else None}


def llm_messages(state: RunState, max_tool_turns: int | None = None) -> list[ChatMessage]:
    """The history as this turn sends it. A JSON-mode turn that may only answer says so
    after the last observation, in the request only (the history keeps the observation as
    it was): SmolLM2-135M, given ``Observation: 9`` alone, answered a word-count question
    with the sentence it had quoted; told to answer with the result, it said 9."""
    messages = state.messages
    if state.mode == "native" or not messages or not _answer_only(state, max_tool_turns):
        return messages
    last = messages[-1]
    if last.role != "user" or not isinstance(last.content, str) or not last.content.startswith("Observation: "):
        return messages
    return [*messages[:-1], last.model_copy(update={"content": f"{last.content}\n{P.ANSWER_NOW}"})]


def _answer_only(state: RunState, max_tool_turns: int | None) -> bool:
    return max_tool_turns is not None and tool_turns(state) >= max_tool_turns


def tool_turns(state: RunState) -> int:
    """How many turns of the run called tools."""
    return len({s.iteration for s in state.steps if s.type == "tool_call"})


def apply_compaction(state: RunState, messages: list[ChatMessage]) -> list[Event]:
    """Replace the history with its compacted form; emits ``compact`` when it shrank."""
    before = len(state.messages)
    state.messages = messages
    if len(messages) < before:
        return [emit(state, "compact", original_messages=before, kept_messages=len(messages))]
    return []


Held = Callable[[ToolCallRequest], bool]
"""Whether a call may wait for a person (``waiting.may_wait``): its start is not published at dispatch."""


def on_llm_reply(state: RunState, result: LLMResult, interrupts: list[Interrupt],
                 config: EngineConfig, *, now: float, held: Held | None = None) -> list[Event]:
    """Process one loop reply. Interrupts are taken only at the drain points."""
    state.usage = state.usage + Usage.from_dict(result.usage)
    if state.mode == "native":
        return _on_native_reply(state, result, interrupts, config, now, held)
    return _on_json_reply(state, result, interrupts, config, now, held)


def _on_json_reply(state: RunState, result: LLMResult, interrupts: list[Interrupt],
                   config: EngineConfig, now: float, held: Held | None) -> list[Event]:
    content = result.message.text()
    action = parse_action(content, result.message.reasoning_content)
    state.messages.append(ChatMessage(role="assistant", content=content))
    events = [_thinking_done(state, action.reasoning)]
    if action.parse_failed and not state.parse_retried and state.iteration < state.max_iterations:
        # One reformat request per failure streak; not a drain point.
        state.parse_retried = True
        state.messages.append(ChatMessage(role="user", content=P.JSON_REFORMAT_REQUEST))
        return events + _continue(state, config)
    if not action.parse_failed:
        state.parse_retried = False
    events += _drain(state, interrupts)
    if action.type == "tool_call":
        state.verify_pending = False
        call = ToolCallRequest(id=f"json-{state.iteration}", name=action.tool_name or "",
                               arguments=action.tool_args)
        if action.reasoning:
            state.trace.append(f"Assistant reasoning: {action.reasoning}")
        return events + _dispatch(state, [call], action.reasoning, now, held=held)
    drained = bool(interrupts)
    return events + _final_candidate(state, action, drained, config)


def _on_native_reply(state: RunState, result: LLMResult, interrupts: list[Interrupt],
                     config: EngineConfig, now: float, held: Held | None) -> list[Event]:
    msg = result.message
    content = msg.text()
    calls = _unique_call_ids(state, list(msg.tool_calls or []))
    reasoning = msg.reasoning_content or ""
    state.messages.append(ChatMessage(role="assistant", content=msg.content, tool_calls=calls or None,
                                      reasoning_content=msg.reasoning_content))
    events = [_thinking_done(state, reasoning or (content if calls else ""))]
    if calls:
        state.verify_pending = False
        if content:
            state.trace.append(f"Assistant reasoning: {content}")
        return events + _dispatch(state, calls, reasoning, now, cap=config.max_tool_calls_per_turn, held=held)
    # A turn without tool calls is the final-answer signal; drain right after it.
    events += _drain(state, interrupts)
    action = Action(type="final_answer", reasoning=reasoning, answer=content)
    return events + _final_candidate(state, action, bool(interrupts), config)


def _unique_call_ids(state: RunState, calls: list[ToolCallRequest]) -> list[ToolCallRequest]:
    """Give every call an id that is non-empty and unique within the run.

    Results are matched to calls by id (and the Celery shell keys a call's idempotency
    record on run id + call id), but some providers send empty ids or reuse one id for
    every call. Such a call gets a fresh id; the assistant message stores the renamed
    calls, so the history the model sees stays consistently paired.
    """
    seen = set(map(_CALL_ID, state.steps))  # at C speed: this runs every turn, over every step
    seen.discard(None)
    out: list[ToolCallRequest] = []
    for i, call in enumerate(calls):
        call_id = call.id
        if not call_id or call_id in seen:
            base = f"call_{state.iteration}_{i}"
            call_id, n = base, 1
            while call_id in seen or any(c.id == call_id for c in calls[i + 1:]):
                n += 1
                call_id = f"{base}_{n}"
            call = call.model_copy(update={"id": call_id})
        seen.add(call_id)
        out.append(call)
    return out


_CALL_ID = operator.attrgetter("tool_call_id")


def _thinking_done(state: RunState, reasoning: str) -> Event:
    return emit(state, "step", type="thinking", status="done", iteration=state.iteration,
                reasoning=reasoning)


def _dispatch(state: RunState, calls: list[ToolCallRequest], reasoning: str, now: float,
              cap: int | None = None, held: Held | None = None) -> list[Event]:
    """One start event per call, in call order, before any runs (calls past ``cap``
    included: they are answered with an error in ``on_tool_results``), except for the calls
    that may wait for a person (``held``): theirs comes once they run (``callevents``)."""
    state.pending_calls, state.refused_calls = turncap.split(calls, cap or len(calls))
    recorded.match_turn(state)
    # A call the recorded ledger holds for a person (it may have run) waits like any other.
    waits = {cid for cid, view in recorded.turn_view(state).items() if view.get("action") == "wait"}
    state.held_calls = [c.id for c in state.pending_calls
                        if c.id in waits or (held is not None and held(c))]
    state.pending_reasoning = reasoning
    state.tools_started_at = now
    state.phase = "tools"
    return [emit(state, "step", **start_data(state.iteration, c, reasoning if i == 0 else ""))
            for i, c in enumerate(calls) if c.id not in state.held_calls]


def _drain(state: RunState, interrupts: list[Interrupt]) -> list[Event]:
    """An ``inject`` event per message, then one combined, pinned user message."""
    if not interrupts:
        return []
    events = [emit(state, "inject", type="inject", content=i.content, id=i.id) for i in interrupts]
    state.messages.append(ChatMessage(role="user", pinned=True,
                                      content=P.interrupt_message([i.content for i in interrupts])))
    state.interrupt_cursor = interrupts[-1].cursor
    return events


def _final_candidate(state: RunState, action: Action, drained: bool,
                     config: EngineConfig) -> list[Event]:
    """The accept / suppress / checklist decision for a final-answer turn."""
    if drained and state.iteration < state.max_iterations:
        return _continue(state, config)  # Answer the follow-up first
    if state.verify_pending:
        # The verification reply is consumed; ask again for the user-facing answer.
        state.verify_pending = False
        if state.iteration < state.max_iterations:
            state.messages.append(ChatMessage(role="user", content=P.ANSWER_REASK.format(query=state.query)))
            return _continue(state, config)
        # The checklist must never cost the run its answer. A reformat retry or
        # an interrupt used the turn kept for asking again, so the answer the
        # checklist held back stands (the verification reply itself is never the answer).
        if state.checklist_candidate is not None:
            action = Action(type="final_answer", reasoning=action.reasoning,
                            answer=state.checklist_candidate)
    if (
        state.completion_check
        and not state.checklist_fired
        and state.tool_call_count >= config.completion_check_min_tools
        and state.max_iterations - state.iteration >= 2
    ):
        state.checklist_fired = True
        state.verify_pending = True
        state.checklist_candidate = action.answer or ""
        state.messages.append(ChatMessage(role="user", content=P.COMPLETION_CHECKLIST))
        return _continue(state, config)
    answer = action.answer or ""
    state.steps.append(StepRecord(type="final_answer", iteration=state.iteration,
                                  reasoning=action.reasoning, answer=answer))
    return to_answer(state, answer)


def _continue(state: RunState, config: EngineConfig) -> list[Event]:
    """Go on to the next turn, or end with the max-iterations summary."""
    if state.iteration < state.max_iterations:
        state.phase = "llm"
        return []
    return to_answer(state, P.MAX_ITERATIONS_ANSWER.format(n=state.max_iterations) + step_summary(state))


def to_answer(state: RunState, answer: str) -> list[Event]:
    """The loop is over: ``answer`` is its own (brief) answer; the synthesis comes next."""
    state.answer = answer
    state.phase = "answer"
    return [emit(state, "step", type="answer", status="start")]


def llm_observation(outcome: ToolOutcome) -> str:
    """What the LLM sees of a tool outcome."""
    if outcome.error is not None:
        return f"Error: {outcome.error}"
    if outcome.content_type in ("html", "markdown") and outcome.artifacts:
        return P.ARTIFACT_SUMMARY.format(names=", ".join(a.name for a in outcome.artifacts))
    if outcome.observation == "":
        return P.EMPTY_TOOL_OUTPUT.format(name=outcome.tool_name)
    return outcome.observation


def on_tool_results(state: RunState, outcomes: dict[str, ToolOutcome], interrupts: list[Interrupt],
                    config: EngineConfig, *, now: float) -> list[Event]:
    """Append the turn's results in call order, then warnings, interrupts, reflection."""
    calls = state.pending_calls + state.refused_calls
    outcomes = {**outcomes, **turncap.refused_outcomes(state, config.max_tool_calls_per_turn, now)}
    ordered = [outcomes[c.id] for c in calls]
    for call, out in zip(calls, ordered, strict=True):
        text = llm_observation(out)
        if state.mode == "native":
            state.messages.append(ChatMessage(role="tool", tool_call_id=call.id, name=call.name, content=text))
        else:
            state.messages.append(ChatMessage(role="user", content=f"Observation: {text}"))
        _record_step(state, call, out, config)
    events = [emit(state, "step", **done_data(state.iteration, c, o, state.tools_started_at, now))
              for c, o in zip(calls, ordered, strict=True) if not o.announced]
    state.tool_call_count += 1 if state.mode == "native" else len(calls)
    for warning in _cycle_warnings(state, calls, config):
        state.messages.append(ChatMessage(role="user", content=warning))
    if state.mode == "native":
        events += _drain(state, interrupts)
    _maybe_reflect(state, config)
    state.pending_calls, state.refused_calls, state.held_calls = [], [], []
    state.pending_reasoning = ""
    return events + _continue(state, config)


def _record_step(state: RunState, call: ToolCallRequest, out: ToolOutcome, config: EngineConfig) -> None:
    state.steps.append(StepRecord(
        type="tool_call", iteration=state.iteration, reasoning=state.pending_reasoning,
        tool_name=call.name, tool_args=call.arguments, tool_call_id=call.id,
        observation=out.observation, error=out.error, content_type=out.content_type,
        artifacts=out.artifacts,
    ))
    args = text_json(call.arguments)
    result = f"Error: {out.error}" if out.error is not None else out.observation
    limit = config.tool_obs_truncation
    if len(result) > limit:
        result = result[:limit] + "... (truncated)"
    state.trace += [f"Tool call: {call.name}({args})", f"Tool result: {result}"]


def _cycle_warnings(state: RunState, calls: list[ToolCallRequest], config: EngineConfig) -> list[str]:
    """Count every call of the batch in call order; warn at the threshold and above."""
    warnings = []
    for call in calls:
        key = f"{call.name}:{md5_args(call.arguments)}"
        count = state.cycle_counts.get(key, 0) + 1
        state.cycle_counts[key] = count
        if count >= config.cycle_detection_threshold:
            warnings.append(P.CYCLE_WARNING.format(tool_name=call.name, count=count))
    return warnings


def _maybe_reflect(state: RunState, config: EngineConfig) -> None:
    """Every N tool-call turns, unless this was the last turn."""
    n = state.tool_call_count
    if n and n % config.self_reflection_interval == 0 and state.iteration < state.max_iterations:
        state.messages.append(ChatMessage(role="user", content=P.SELF_REFLECTION.format(n=n, query=state.query)))
