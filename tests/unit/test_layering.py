"""The architecture's import rules (DESIGN.md "Architecture"), checked mechanically."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
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


def _top(name: str) -> str:
    """The project's layer an import names: ``reactq.shared.x`` → ``shared``."""
    parts = name.split(".")
    return parts[1] if parts[0] == "reactq" and len(parts) > 1 else parts[0]


def test_nothing_imports_the_folders_by_their_bare_names():
    """Installed, the folders are ``reactq.shared`` etc.; a bare ``shared`` import would only
    work from a checkout (and would shadow an application's own package)."""
    for folder in ("shared", "workers", "dispatcher", "reactq", "tests", "bench"):
        for path in (ROOT / folder).rglob("*.py"):
            bad = {n for n in _imports(path) if n.split(".")[0] in {"shared", "workers", "dispatcher"}}
            assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_the_engine_imports_no_io_library():
    for path in (ROOT / "shared" / "engine").glob("*.py"):
        bad = {n for n in _imports(path) if n.split(".")[0] in IO_LIBRARIES}
        assert not bad, f"{path.name} imports {bad}"


def test_shared_never_imports_the_shells():
    for path in (ROOT / "shared").rglob("*.py"):
        bad = {n for n in _imports(path) if _top(n) in {"workers", "dispatcher"}}
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_the_dispatcher_imports_no_worker_code():
    """Task names, queues and the Celery config are in ``shared/wire.py``: the dispatcher
    sends by name and needs nothing from ``workers/``."""
    for path in (ROOT / "dispatcher").rglob("*.py"):
        bad = {n for n in _imports(path) if _top(n) == "workers"}
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


#: What a gateway host must not load: worker code, tool implementations (built-ins, MCP, the
#: registry loader) and hook implementations. The tool and hook *types* are the public API.
GATEWAY_FORBIDDEN = ("reactq.workers", "reactq.shared.tools.builtins", "reactq.shared.tools.mcp",
                     "reactq.shared.tools.loader", "reactq.shared.tools.http_fetch", "mcp",
                     "reactq.shared.hooks.builtins", "reactq.shared.hooks.loader")

_LOADED = """
import json, sys
import reactq.dispatcher.http
from reactq.dispatcher.http import create_app
from reactq.shared.settings import Settings
create_app(Settings(redis_url="redis://127.0.0.1:1/0"))
print(json.dumps(sorted(sys.modules)))
"""


def test_the_gateway_loads_no_worker_tool_or_hook_module(tmp_path):
    """Importing the gateway and building its app, in a fresh interpreter (this one has
    loaded everything), loads none of ``GATEWAY_FORBIDDEN``."""
    out = subprocess.run([sys.executable, "-c", _LOADED], capture_output=True, text=True, check=True,
                         cwd=tmp_path, timeout=60).stdout
    loaded = json.loads(out.splitlines()[-1])
    assert "reactq.dispatcher.http.runs" in loaded  # the probe saw the gateway itself
    bad = [m for m in loaded if any(m == f or m.startswith(f + ".") for f in GATEWAY_FORBIDDEN)]
    assert not bad, f"importing the gateway loaded {bad}"


def test_celery_accepts_json_only():
    from reactq.shared.settings import Settings
    from reactq.shared.wire import celery_config

    conf = celery_config(Settings(redis_url="redis://127.0.0.1:1/0"))
    assert conf["accept_content"] == ["json"]
    assert conf["task_serializer"] == "json"
    assert conf["task_acks_late"] and conf["task_reject_on_worker_lost"]
    assert conf["worker_prefetch_multiplier"] == 1


ENV_READERS = {"environ", "environb", "getenv", "getenvb"}


def _settings_classes() -> set[str]:
    """Names of the settings classes: building one reads the environment (pydantic-settings)."""
    import inspect

    from pydantic_settings import BaseSettings

    from reactq.shared import settings
    from reactq.shared.dag import config

    return {name for mod in (settings, config) for name, obj in vars(mod).items()
            if inspect.isclass(obj) and issubclass(obj, BaseSettings) and obj is not BaseSettings}


def _env_reads(path: Path, settings: set[str]) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr in ENV_READERS:
            found.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            found += [f"line {node.lineno}: from os import {a.name}" for a in node.names if a.name in ENV_READERS]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in settings:
            found.append(f"line {node.lineno}: {node.func.id}()")
        elif (isinstance(node, ast.keyword) and node.arg == "default_factory"
              and isinstance(node.value, ast.Name) and node.value.id in settings):
            found.append(f"line {node.value.lineno}: default_factory={node.value.id}")
    return found


def test_the_engine_never_reads_the_environment():
    """Engine config is passed in (``EngineDeps.config``, read at the shells' edge): no module
    under shared/engine reads ``os.environ`` / ``os.getenv`` or builds a settings object."""
    settings = _settings_classes()
    assert "EngineConfig" in settings
    for path in (ROOT / "shared" / "engine").rglob("*.py"):
        assert not _env_reads(path, settings), f"{path.relative_to(ROOT)} reads the environment: {_env_reads(path, settings)}"


def test_the_environment_check_sees_each_way_of_reading_it(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("import os\nfrom os import getenv\nfrom dataclasses import field\n"
                   "a = os.environ.get('X')\nb = os.getenv('Y')\nc = EngineConfig()\n"
                   "d = field(default_factory=EngineConfig)\ne = EngineConfig.defaults()\n")
    assert len(_env_reads(src, _settings_classes())) == 5


# -- the wings: where Redis is spoken, which way imports point -------------------------------

#: Modules of ``shared/`` outside ``shared/stores/`` that may import redis-py: the connection
#: itself and kombu's transport (the broker's, not the state's).
REDIS_OUTSIDE_STORES = {"shared/redisconn.py", "shared/transport.py"}


def test_only_the_stores_talk_to_redis_in_shared():
    """A newcomer can tell from the tree where a Redis key is written: ``shared/stores/``."""
    for path in (ROOT / "shared").rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("shared/stores/") or rel in REDIS_OUTSIDE_STORES:
            continue
        bad = {n for n in _imports(path) if n.split(".")[0] == "redis"}
        assert not bad, f"{rel} imports {bad}: move its Redis work into shared/stores/"


def _module_of(path: Path, root: Path = ROOT) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return "reactq." + ".".join(parts)


def _absolute(node: ast.ImportFrom, name: str, is_package: bool) -> str:
    """The module a ``from ... import`` names, its dots resolved against module ``name``."""
    if node.level == 0:
        return node.module or ""
    parts = name.split(".") if is_package else name.split(".")[:-1]
    parts = parts[:len(parts) - (node.level - 1)]
    return ".".join([*parts, node.module] if node.module else parts)


def _all_imports(path: Path, name: str, modules: set[str]) -> set[str]:
    """Every module ``path`` (module ``name``) imports: at the top, inside a function, or
    under ``if TYPE_CHECKING:``. A lazy or type-only import is still a dependency a reader
    follows, and a circle through one is a circle all the same. ``from package import
    module`` names the module, not the package; relative imports are resolved."""
    is_package = path.name == "__init__.py"
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, name, is_package)
            subs = {f"{base}.{a.name}" for a in node.names} & modules
            names |= subs if len(subs) == len(node.names) else {base, *subs}
    return names


def _graph(folders: tuple[str, ...], root: Path = ROOT) -> dict[str, set[str]]:
    modules = {_module_of(p, root): p for f in folders for p in (root / f).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps = {n for n in _all_imports(path, name, set(modules)) if n in modules and n != name}
        graph[name] = deps
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle():
    """Imports point down: no two modules import each other, directly or round a circle,
    counting function-local and ``TYPE_CHECKING`` imports (the watchdog is handed its
    handlers; the runtime builds flow control itself; a tool runs in a runner through the
    framing module, not the runner's own; what two modules both need lives in a third below
    them: ``EngineDeps`` in ``engine/deps.py``, ``DagContext`` in ``dags/context.py``; a
    module that needs only part of a higher object declares a Protocol of that part)."""
    assert _cycles(_graph(("shared", "workers", "dispatcher"))) == []


def test_the_cycle_check_sees_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_the_cycle_check_sees_lazy_type_only_and_relative_imports(tmp_path):
    files = {
        "shared/__init__.py": "",
        "shared/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from reactq.shared.b import B\n",
        "shared/b.py": "def f():\n    from reactq.shared.a import A\n",
        "shared/c.py": "from . import d\n",
        "shared/d.py": "from .c import x\n",
        "shared/e.py": "import reactq.shared.a\nfrom reactq.shared import c\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert _cycles(_graph(("shared",), tmp_path)) == [
        ["reactq.shared.a", "reactq.shared.b"], ["reactq.shared.c", "reactq.shared.d"]]


#: Where ``os.environ`` may be read: the settings, and the test-only fault points.
ENV_MODULES = {"shared/settings.py", "workers/faults.py"}


def test_only_the_settings_read_the_environment():
    """Configuration is a setting (``shared/settings.py``), read at the edge and passed in."""
    for folder in ("shared", "workers", "dispatcher"):
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            if rel in ENV_MODULES:
                continue
            assert not _env_reads(path, set()), f"{rel} reads the environment: add a setting"


def test_nothing_writes_the_environment():
    for folder in ("shared", "workers", "dispatcher"):
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text()
            for spelled in ("os.environ[", "os.environ.setdefault", "os.environ.update", "os.putenv"):
                lines = [ln for ln in text.splitlines() if spelled in ln and "=" in ln.split(spelled)[1][:80]
                         and not ln.strip().startswith("#")]
                assert not [ln for ln in lines if spelled != "os.environ[" or "] =" in ln], \
                    f"{path.relative_to(ROOT)} writes the environment: {lines}"


# -- the run store owns the run's keys ---------------------------------------------------

#: Where a run's keys may be spelled: the stores, and the key list itself.
RUN_KEYS_OUTSIDE_STORES = {"shared/keys.py"}


def _run_key_names() -> set[str]:
    """The ``Keys`` members that name a run's keys or the run index (``run``, ``run_events``,
    ``runs``, ``runs_status``, ...)."""
    from reactq.shared.keys import Keys

    return {name for name in vars(Keys) if name == "run" or name.startswith(("run_", "runs"))}


def _run_keys_spelled(source: str, names: set[str]) -> list[str]:
    """``keys.run(...)``, ``self.rt.keys.run_events(...)``, ``Keys().runs``: a member of
    ``names`` read off something named ``keys`` / ``Keys`` (``rt.run(coro)`` is not one)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in names:
            owner = ast.unparse(node.value)
            if owner.split(".")[-1].lower() in {"keys", "keys()", "k"}:
                found.append((node.lineno, f"line {node.lineno}: {owner}.{node.attr}"))
    return [spelled for _, spelled in sorted(found)]


def test_only_the_stores_spell_a_runs_keys():
    """The run hash, its events, interrupts and ledger, and the run index are read and written
    by ``shared/stores/`` (``RunStore`` and its neighbours): no other module names their keys."""
    names = _run_key_names()
    assert {"run", "run_events", "runs"} <= names
    for folder in ("shared", "workers", "dispatcher"):
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith("shared/stores/") or rel in RUN_KEYS_OUTSIDE_STORES:
                continue
            bad = _run_keys_spelled(path.read_text(), names)
            assert not bad, f"{rel} spells a run's keys ({bad}): ask the run store instead"


def test_the_run_key_check_sees_each_spelling():
    names = _run_key_names()
    source = ("a = keys.run(rid)\nb = self.rt.keys.run_events(rid)\nc = gw.keys.runs\n"
              "d = Keys().run_tools(rid)\ne = rt.run(coro)\nf = read.run(client)\ng = K.run(rid)\n")
    assert [f.split(":")[0] for f in _run_keys_spelled(source, names)] == [
        "line 1", "line 2", "line 3", "line 4", "line 7"]
