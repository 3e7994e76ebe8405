"""One door: no module outside ``shared/service/`` writes a run record or sends a run's first
step, so every way a run comes into being passes the same admission (``Door.create_run``)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The door itself, and the store whose ``create`` it calls.
DOOR = ("shared/service/",)
DEFINES_IT = {"shared/stores/runs.py"}
#: What a run store is called where one is used (``rt.store``, ``d.store``, ``self.runs`` …).
RUN_STORE_NAMES = {"store", "runs", "run_store"}


def _receiver(node: ast.expr) -> str:
    """The last name of a call's receiver: ``self.d.store`` → ``store``, ``RunStore(r)`` → ``RunStore``."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call):
        return _receiver(node.func)
    return ""


def _names_iterate(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "ITERATE") or \
        (isinstance(node, ast.Attribute) and node.attr == "ITERATE")


def _first_step(args: list[ast.expr]) -> bool:
    """``…(ITERATE, [run_id, 0], …)``: a run's first step."""
    for task, payload in zip(args, args[1:], strict=False):
        if _names_iterate(task) and isinstance(payload, ast.List) and len(payload.elts) == 2 \
                and isinstance(payload.elts[1], ast.Constant) and payload.elts[1].value == 0:
            return True
    return False


def door_bypasses(source: str) -> list[str]:
    """Where ``source`` writes a run record or sends a run's first step itself."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "create" \
                and _receiver(func.value) in RUN_STORE_NAMES | {"RunStore"}:
            found.append(f"line {node.lineno}: {ast.unparse(func)}(…) writes a run record")
        if _first_step(node.args):
            found.append(f"line {node.lineno}: {ast.unparse(func)}(ITERATE, [..., 0]) sends a first step")
    return found


def test_only_the_door_makes_runs_and_sends_their_first_step():
    for folder in ("shared", "workers", "dispatcher"):
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(DOOR) or rel in DEFINES_IT:
                continue
            bad = door_bypasses(path.read_text())
            assert not bad, f"{rel} goes around the door (reactq.shared.service.Door): {bad}"


def test_the_check_sees_each_way_around_the_door():
    src = ("rt.store.create(rid, req, tenant=t)\nself.runs.create(rid, req)\n"
           "RunStore(r).create(rid, req)\nsend(ITERATE, [rid, 0], RUNS_QUEUE)\n"
           "app.send_task(wire.ITERATE, [rid, 0])\n"
           "self.schedules.create(req, tick)\nsend(ITERATE, [rid, rec.step_no])\n")
    assert len(door_bypasses(src)) == 5


def test_the_door_is_where_runs_are_made():
    """The check would pass on an empty tree: the door's own module makes them."""
    door = (ROOT / "shared" / "service" / "door.py").read_text()
    ops = (ROOT / "shared" / "service" / "ops.py").read_text()
    assert any("writes a run record" in b for b in door_bypasses(door))
    assert any("sends a first step" in b for b in door_bypasses(ops))
