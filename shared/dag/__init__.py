"""The DAG engine: plan a goal into steps, run each step as its own ReAct run,
analyze the results, re-plan while the goal is not met, then answer.

Pure parts, importable anywhere (no Redis, no Celery):

* ``models`` — ``PlanStep``, ``ExecutionPlan``, ``AnalysisResult``, lenient plan parsing
  and validation (dangling dependencies pruned, cycles refused with ``CycleError``).
* ``planner`` / ``analyzer`` — one ``structured_llm_call`` each (``create_plan``,
  ``analyze_plan``); ``prompts`` holds their texts.
* ``query`` — a step's query from its dependencies' results, the re-plan context, the
  synthesis prompt and the not-achieved answer.
* ``state`` + ``machine`` — the persisted ``DagState`` and the transitions that advance it,
  returning events and effects for a shell to carry out after saving.
* ``store`` — ``reactq:dag:{id}`` and its event stream (compare-and-set saves, seq-guarded
  publishing); ``binding`` — role → registry model name; ``config`` — ``DagConfig``.

The Celery shell is ``workers/dags/`` (``tasks.py``, ``drive.py``); the doors are
``dispatcher/dag.py`` (Python), ``dispatcher/http/dags.py`` (HTTP + SSE) and
``dispatcher/cli/dags.py`` (``reactq dag``).
"""

from .config import DagConfig
from .models import AnalysisResult, CycleError, ExecutionPlan, PlanError, PlanStep

__all__ = ["AnalysisResult", "CycleError", "DagConfig", "ExecutionPlan", "PlanError", "PlanStep"]
