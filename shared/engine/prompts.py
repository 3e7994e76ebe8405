"""Every text the engine shows the LLM, in one place (the wording where it gives one)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

PARSE_FAILURE_SENTINEL = "(could not parse LLM output as JSON)"

JSON_REFORMAT_REQUEST = (
    "Your previous response was not valid JSON. Please re-format your answer as a JSON "
    'object with the structure: {"type": "final_answer", "reasoning": "...", "answer": '
    '"..."}. Put your full answer inside the "answer" field as a string.'
)

EMPTY_TOOL_OUTPUT = (
    "Tool '{name}' completed successfully with no output. Do not retry with same arguments."
)

ARTIFACT_SUMMARY = (
    "[Artifact generated: {names}] The content is rendered as a preview in the UI and "
    "available for download. Do NOT paste the raw source in your answer."
)

CYCLE_WARNING = (
    "\u26a0 You have called `{tool_name}` with identical arguments {count} times and received "
    "the same result. Please try a different approach or tool."
)

SELF_REFLECTION = (
    "[Self-check] You have completed {n} tool-call iterations. Pause and reflect:\n"
    "- Original goal: {query}\n"
    "- Are you still on track toward this goal?\n"
    "- Have you been repeating similar actions or going in circles?\n"
    "- What is the most direct next step to finish?\n"
    "If you have enough information, produce your final answer now."
)

COMPLETION_CHECKLIST = (
    "Before finalizing your answer, verify:\n"
    "1. Does your answer fully address the original question?\n"
    "2. Did you verify key facts from tool results?\n"
    "3. Are there any contradictions in the information gathered?\n"
    "If everything checks out, proceed with your final answer. If not, continue investigating."
)

# The wording is ours: the verification turn is consumed, then this asks for the
# user-facing answer, so "Let me verify: 1. ... ✓" never becomes the answer.
ANSWER_REASK = (
    "Thank you for checking. Now give the user-facing final answer to the original "
    "question, without mentioning the verification: {query}"
)

INTERRUPT_ONE = "[USER INTERRUPT]: {content}\n\nAcknowledge and adjust if needed."
INTERRUPT_MANY_HEAD = "[USER INTERRUPT]: The user sent {n} messages while you were working:\n"
INTERRUPT_MANY_TAIL = "\n\nAcknowledge ALL of them and adjust your response if needed."

MAX_ITERATIONS_ANSWER = (
    "I was unable to complete the task within {n} iterations.  Here is what I gathered so far:\n"
)

TOO_MANY_TOOL_CALLS = (
    "Not run: your reply asked for {n} tool calls and at most {limit} run per turn "
    "(REACTQ_MAX_TOOL_CALLS_PER_TURN). Call it again in a later turn if you still need it."
)
# Said after the last observation of a JSON-mode turn that may only answer (max_tool_turns),
# in the request only: see ``loop.llm_messages``.
ANSWER_NOW = "Answer with this result."
CANCELLED_OBSERVATION = "Tool call cancelled: the run was cancelled before it finished."
INTERRUPTED_OBSERVATION = (
    "Tool call interrupted: the user sent a new message and this run was stopped before "
    "it used the result of this call."
)
UNCERTAIN_OBSERVATION = (
    "The worker running this tool stopped before reporting a result. The tool is not "
    "idempotent, so it was not run again: its effect is UNKNOWN. Check before retrying."
)

_JSON_MODE_TEMPLATE = """You are a helpful AI assistant that solves tasks step by step using tools.

Available tools:
{tools}

Respond with a single JSON object and nothing else. To call a tool:
{{"type": "tool_call", "reasoning": "<why>", "tool_name": "<name>", "tool_args": {{...}}}}
When you have enough information to answer:
{{"type": "final_answer", "reasoning": "<why>", "answer": "<your answer>"}}
Call one tool at a time. Use tool results to decide the next step."""

_NATIVE_TEMPLATE = """You are a helpful AI assistant that solves tasks step by step.
Use the provided tools when they help; call several at once when they are independent.
When you have enough information, reply with your final answer as plain text."""

_OPERATOR_RULE = (
    "If a tool result says the call was rejected by an operator or blocked by a policy, do "
    "not retry it: answer, name the rejected action and ask how to proceed."
)


def date_line(now: float) -> str:
    dt = datetime.fromtimestamp(now, tz=timezone.utc)
    return f"Current date and time: {dt:%Y-%m-%d %H:%M} UTC (the current year is {dt.year})."


def format_tools(tools: list[dict[str, Any]]) -> str:
    """JSON-mode tool list: name, description and parameter schema of each tool."""
    if not tools:
        return "(no tools available)"
    lines = []
    for t in tools:
        fn = t["function"]
        schema = json.dumps(fn.get("parameters", {}), ensure_ascii=False)
        lines.append(f"- {fn['name']}: {fn.get('description', '')}\n  Parameters: {schema}")
    return "\n".join(lines)


def system_prompt(mode: str, tools: list[dict[str, Any]], *, now: float,
                  override: str | None = None, extra: str | None = None) -> str:
    """``override`` replaces the default entirely; ``extra`` is appended to it."""
    if override is not None:
        return override
    base = _JSON_MODE_TEMPLATE.format(tools=format_tools(tools)) if mode == "json" else _NATIVE_TEMPLATE
    text = f"{base}\n{_OPERATOR_RULE}\n\n{date_line(now)}"
    if extra:
        text += f"\n\nAdditional instructions:\n{extra}"
    return text


def interrupt_message(contents: list[str]) -> str:
    """Several drained interrupts become one combined message."""
    if len(contents) == 1:
        return INTERRUPT_ONE.format(content=contents[0])
    numbered = "\n".join(f"{i}. {c}" for i, c in enumerate(contents, 1))
    return INTERRUPT_MANY_HEAD.format(n=len(contents)) + numbered + INTERRUPT_MANY_TAIL


SYNTHESIS_SYSTEM = """You are FIM One's answer synthesizer (running in reactq). You are given a user's \
question and the execution trace of an agent that worked on it with tools.
Write the final answer for the user:
- Present the results directly. No meta-commentary: never say "based on the tool output", \
"according to the results" or describe the agent's process.
- Use Markdown formatting when it helps (lists, tables, code blocks).
- Answer in the same language as the question unless the Agent Directive says otherwise.
- If a tool produced a file or artifact, mention it briefly instead of repeating its content."""
