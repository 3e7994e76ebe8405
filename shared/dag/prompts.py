"""The DAG engine's prompts: planner, analyzer, re-plan context, synthesis.

The leading words of each user message are distinct on purpose ("Goal:", "Goal to
evaluate:", "Original goal:" in step queries), so a scripted test server can tell the
planner, the analyzer and the steps apart by the first user message alone.
"""

from __future__ import annotations

from datetime import datetime

PLAN_FUNCTION = "create_plan"
ANALYZE_FUNCTION = "analyze_plan"

PLAN_SCHEMA: dict[str, object] = {
    "type": "object",
    "properties": {
        "steps": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "task": {"type": "string"},
                    "dependencies": {"type": "array", "items": {"type": "string"}},
                    "tool_hint": {"type": ["string", "null"]},
                    "model_hint": {"type": ["string", "null"], "enum": ["fast", "reasoning", None]},
                },
                "required": ["id", "task"],
            },
        },
    },
    "required": ["steps"],
}

ANALYSIS_SCHEMA: dict[str, object] = {
    "type": "object",
    "properties": {
        "achieved": {"type": "boolean"},
        "confidence": {"type": "number"},
        "final_answer": {"type": ["string", "null"]},
        "reasoning": {"type": "string"},
    },
    "required": ["achieved", "confidence", "reasoning"],
}


def planner_system(now: datetime) -> str:
    """The planner's rules, dated so "latest"/"this year" mean something."""
    return f"""You are a planning assistant. Break the user's goal into a small plan of steps that \
can be executed by independent AI agents with tools.

Current date: {now:%Y-%m-%d} (year {now:%Y}).

Rules:
- Write every task in the same language as the goal.
- Each task is 1-3 sentences and self-contained: the agent running it sees only its task \
and the results of the steps it depends on.
- Maximize parallelism: a step depends only on steps whose results it really needs.
- Combine trivially related sub-tasks into one step; prefer 2-6 steps.
- tool_hint: only a tool name from the available tools list, or null.
- model_hint: "fast" only for trivial, deterministic steps (formatting, simple lookups); \
"reasoning" for deep analysis or domain expertise; null otherwise and whenever in doubt.
- Step ids are short unique strings; dependencies list the ids of earlier steps.

Respond by calling {PLAN_FUNCTION} with {{"steps": [{{"id", "task", "dependencies", \
"tool_hint", "model_hint"}}]}}."""


ANALYZER_SYSTEM = """You evaluate whether a plan's execution achieved the user's goal.

Read the goal and every step's result. Decide:
- achieved: true only if the results together fully answer the goal.
- confidence: a number from 0 to 1 for how sure you are of that verdict.
- reasoning: what is established, what is missing or wrong.
- final_answer: a complete answer to the goal when achieved, else null.

When sources or steps contradict each other, say so in the reasoning and lower your \
confidence. Respond with a JSON object {"achieved", "confidence", "reasoning", "final_answer"}."""

SYNTHESIS_SYSTEM = """You write the final answer to the user's goal from the results of the \
work already done.

- Answer the goal directly and completely, using the step results as your sources.
- No meta-commentary: do not mention steps, plans, agents or this process.
- Write in the same language as the goal.
- Where results disagree, compare them and say which is better supported."""

REPLAN_FOOTER = "Please create a revised plan that addresses the gaps identified above."
DEPENDENCY_CONTEXT_HEADER = ("Context from previous steps (use this data directly — do NOT "
                             "re-run tools that produced these results):")
CONTEXT_TRUNCATED = "\n[Dependency context truncated]"
RESULT_TRUNCATED = "\n  [Result truncated]"
GOAL_NOT_ACHIEVED = "(goal not achieved)"
PLANNING_FAILED = ("The planning model failed to generate a valid task plan. Please try again, "
                   "or try a more capable model.")
SKIPPED_BY_USER = "Skipped — user changed requirements"
SKIPPED_BY_CANCEL = "Skipped — the DAG was cancelled"
COULD_NOT_RUN = "Step could not run: one or more dependencies failed."
