"""The DAG engine's constants, read from the environment (``REACTQ_DAG_*``).

Like ``EngineConfig``, this is read once at the edge (a worker's runtime, the dispatcher)
and passed inward; nothing in ``reactq.shared.dag`` reads ``os.environ`` itself.
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from reactq.shared.settings import RenamedSettings, renamed


class DagConfig(RenamedSettings):
    """Limits and truncations of plan → execute → analyze → re-plan."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", frozen=True,
                                      populate_by_name=True)

    step_timeout: float = Field(600.0, gt=0, validation_alias=renamed("REACTQ_DAG_STEP_TIMEOUT", "DAG_STEP_TIMEOUT"))
    """Seconds a step's child run may take before the step is failed."""
    step_max_iterations: int = Field(15, ge=1, le=200, validation_alias=renamed("REACTQ_DAG_STEP_MAX_ITERATIONS", "DAG_STEP_MAX_ITERATIONS"))
    """The ``max_iterations`` of each child run."""
    stop_confidence: float = Field(0.8, ge=0, le=1, validation_alias=renamed("REACTQ_DAG_REPLAN_STOP_CONFIDENCE", "DAG_REPLAN_STOP_CONFIDENCE"))
    """An analysis at least this confident stops re-planning even when not achieved."""
    recent_truncation: int = Field(500, ge=10, validation_alias=renamed("REACTQ_DAG_REPLAN_RECENT_TRUNCATION", "DAG_REPLAN_RECENT_TRUNCATION"))
    """Re-planning shows the latest steps' results cut to this many characters."""
    older_truncation: int = Field(200, ge=10, validation_alias=renamed("REACTQ_DAG_REPLAN_OLDER_TRUNCATION", "DAG_REPLAN_OLDER_TRUNCATION"))
    """Re-planning shows older steps' results cut to this many characters."""
    analyzer_truncation: int = Field(10_000, ge=100, validation_alias=renamed("REACTQ_DAG_ANALYZER_TRUNCATION", "DAG_ANALYZER_TRUNCATION"))
    """The analysis of a round sees step results cut to this many characters."""
    synthesis_truncation: int = Field(10_000, ge=100, validation_alias=renamed("REACTQ_DAG_SYNTHESIS_TRUNCATION", "DAG_SYNTHESIS_TRUNCATION"))
    """The final answer's synthesis sees step results cut to this many characters."""
    planner_desc_length: int = Field(120, ge=10, validation_alias=renamed("REACTQ_DAG_PLANNER_DESC_LENGTH", "DAG_PLANNER_DESC_LENGTH"))
    """Tool descriptions in the planner's catalog are cut to this many characters."""
    context_multiplier: float = Field(3.0, ge=1, validation_alias=renamed("REACTQ_DAG_STRUCTURED_CONTEXT_MULTIPLIER", "DAG_STRUCTURED_CONTEXT_MULTIPLIER"))
    """A dependency given as a table may use this many times the context budget."""
    max_message_chars: int = Field(50_000, ge=100, validation_alias=renamed("REACTQ_MAX_MESSAGE_CHARS", "CONTEXT_GUARD_MAX_MSG_CHARS"))
    """The dependency-context budget of a step query (×``context_multiplier`` for tables)."""
    max_steps: int = Field(50, ge=1, le=100, validation_alias="REACTQ_DAG_MAX_STEPS")
    """The most steps a plan may have (a user plan above it is refused at the door)."""
    tick_seconds: float = Field(2.0, gt=0, validation_alias="REACTQ_DAG_TICK_SECONDS")
    """How often a running DAG checks its steps (timeouts, progress, lost notifications)."""
    progress_observation_chars: int = Field(500, ge=0, validation_alias="REACTQ_DAG_PROGRESS_CHARS")
    """Tool observations forwarded into the DAG stream are cut to this many characters."""
