"""Threads in the engine (pure): the "Previous conversation" block and what a
finished run leaves in its thread's history.

A thread's history is user/assistant pairs only: each earlier run's query (with the
follow-ups injected into it) and its final answer, never its tool traces, so it is valid
for every provider whatever the earlier runs did.
"""

from __future__ import annotations

from collections.abc import Sequence

from reactq.shared.engine.context import estimate_messages
from reactq.shared.engine.state import RunState
from reactq.shared.models import ChatMessage

#: Without a summarizing model: the last this-many characters of the history.
HISTORY_MAX_CHARS = 20_000

INTERRUPTED_NOTE = "(This request was interrupted by the user's next message before it was answered.{tools})"
CANCELLED_NOTE = "(This request was cancelled before it was answered.{tools})"
FAILED_NOTE = "(This request failed before it was answered: {error})"


def previous_conversation(history: Sequence[ChatMessage], *, max_chars: int = HISTORY_MAX_CHARS) -> str:
    """``User: …`` / ``Assistant: …`` lines; over ``max_chars``, only the newest part."""
    text = "\n".join(f"{m.role.capitalize()}: {m.text()}" for m in history if m.role in ("user", "assistant"))
    return text if len(text) <= max_chars else text[-max_chars:]


def enriched_query(history: Sequence[ChatMessage], query: str, *, max_chars: int = HISTORY_MAX_CHARS) -> str:
    """No history ⇒ the query; else ``Previous conversation:\\n…\\n\\nCurrent request: <q>``."""
    if not history:
        return query
    return f"Previous conversation:\n{previous_conversation(history, max_chars=max_chars)}\n\nCurrent request: {query}"


def fit_history(history: Sequence[ChatMessage], max_tokens: int) -> list[ChatMessage]:
    """The newest whole turns (user + assistant) of a thread that fit in ``max_tokens``.

    The history is pinned, and the context guard never drops pinned messages while the run
    has little else to compact: a thread that outgrew the budget would make
    every request too long. So a run starts from at most this much of it (half the
    guard's budget), the oldest turns left out first.
    """
    kept: list[ChatMessage] = []
    turns: list[list[ChatMessage]] = []
    for m in history:
        if m.role == "user" or not turns:
            turns.append([m])
        else:
            turns[-1].append(m)
    for turn in reversed(turns):
        if estimate_messages([*turn, *kept]) > max_tokens:
            break
        kept = [*turn, *kept]
    return kept


def tools_called(state: RunState) -> list[str]:
    """Names of the tools the run called (in order, each once), the open calls included."""
    names = [s.tool_name for s in state.steps if s.type == "tool_call" and s.tool_name]
    # Calls that were still open when the run stopped are only in the messages (and in
    # ``pending_calls`` until they are answered).
    names += [c.name for m in state.messages for c in (m.tool_calls or [])]
    names += [c.name for c in state.pending_calls]
    return list(dict.fromkeys(names))


def _tools_clause(state: RunState) -> str:
    names = tools_called(state)
    if state.answer_guarded:  # only the run's tools: a name the model invented may carry anything
        names = [n for n in names if n in state.available_tools]
    return f" Tools it had called: {', '.join(names)}." if names else " It had called no tools."


def user_turn(state: RunState) -> str:
    """The run's query, with the follow-ups injected into it (the interrupt messages)."""
    injected = [m.text() for m in state.messages
                if m.role == "user" and m.pinned and m.text().startswith("[USER INTERRUPT]")]
    return "\n\n".join([state.query, *injected])


def thread_turns(state: RunState, stop: str | None) -> list[ChatMessage]:
    """What a finished run leaves in its thread: nothing for a ``rollback``, else its query
    and its answer — or a note saying why there is none (naming the tools it called)."""
    if state.status == "cancelled" and stop == "rollback":
        return []
    if state.status == "succeeded":  # it finished before the stop took effect: it stands
        # Under an ANSWER guardrail only the checked answer (the loop's own is not checked).
        answer = state.final_answer or ("" if state.answer_guarded else state.answer or "")
    elif state.status == "cancelled" and stop == "interrupt":
        answer = INTERRUPTED_NOTE.format(tools=_tools_clause(state))
    elif state.status == "cancelled":
        answer = CANCELLED_NOTE.format(tools=_tools_clause(state))
    else:
        answer = FAILED_NOTE.format(error=state.error or "unknown error")
    return [ChatMessage(role="user", content=user_turn(state)),
            ChatMessage(role="assistant", content=answer)]


__all__ = [
    "HISTORY_MAX_CHARS",
    "enriched_query",
    "fit_history",
    "previous_conversation",
    "thread_turns",
    "tools_called",
    "user_turn",
]
