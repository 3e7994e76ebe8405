"""The architecture's import rules (DESIGN.md "Architecture"), checked mechanically."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IO_LIBRARIES = {"redis", "celery", "kombu", "openai", "httpx", "httpx2", "starlette", "fastapi",
                "uvicorn", "requests", "socket", "subprocess", "aiohttp"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_the_engine_imports_no_io_library():
    for path in (ROOT / "shared" / "engine").glob("*.py"):
        bad = {n for n in _imports(path) if n.split(".")[0] in IO_LIBRARIES}
        assert not bad, f"{path.name} imports {bad}"


def test_shared_never_imports_the_shells():
    for path in (ROOT / "shared").rglob("*.py"):
        bad = {n for n in _imports(path) if n.split(".")[0] in {"workers", "dispatcher"}}
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_the_dispatcher_uses_workers_only_for_names_and_configuration():
    allowed = {"workers.config"}
    for path in (ROOT / "dispatcher").rglob("*.py"):
        bad = {n for n in _imports(path) if n.startswith("workers") and n not in allowed}
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_celery_accepts_json_only():
    from shared.settings import Settings
    from workers.config import celery_config

    conf = celery_config(Settings(redis_url="redis://127.0.0.1:1/0"))
    assert conf["accept_content"] == ["json"]
    assert conf["task_serializer"] == "json"
    assert conf["task_acks_late"] and conf["task_reject_on_worker_lost"]
    assert conf["worker_prefetch_multiplier"] == 1
