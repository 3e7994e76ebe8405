"""Tool calls in tool-runner processes: a hard deadline, and a worker that stays alive.

Why a process per call in flight (see the docs, "Durability and recovery"): a tool that holds the GIL (a
C-level loop, a big regex) starves every thread of its process, the lease heartbeat
included, so its lease expires and the call is sent again although it still runs; and no
Python-level timeout can stop such a call. Run in a child process, the tool holds only the
child's GIL: the worker thread waits on a pipe (``poll``, no GIL held), its heartbeat goes
on, and at the deadline the worker kills the child (SIGKILL needs no cooperation).

Each worker process keeps a small pool of idle children (they are reused, so a call costs
a pipe round trip, not a Python start); a killed or dead child is replaced on next use.
A child finds the tool by a *locator*: ``("ref", module, qualname)`` for a function
importable under its own name (``@tool`` functions, ``Tool(fn=module_level_function)``),
or ``("spec", entry, name)`` for a tool that ``REACTQ_TOOLS`` entry built (a factory's
closure). A tool with neither (a closure built at run time, ``__main__``) runs in a
thread of the worker with a soft deadline, and a warning says so once.
"""

from __future__ import annotations

import importlib
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from reactq.shared.errors import ToolError
from reactq.shared.tools.frames import read_frame, write_frame

log = logging.getLogger(__name__)

Locator = tuple[str, str, str]
SPEC_KEY = "_reactq_tools_entry"
#: How long a runner may take to start and import a tool before the call: not the tool's
#: deadline (a cold runner on a busy host can take seconds), but a bound all the same.
LOAD_SECONDS = 60.0
"""``Tool.metadata`` key: the ``REACTQ_TOOLS`` entry that built the tool (set by the loader)."""


class ToolTimeoutError(ToolError, TimeoutError):
    """A tool call ran past its deadline and was stopped (also a ``TimeoutError``)."""


class ToolProcessDied(ToolError):
    """The tool-runner process died mid-call (killed, out of memory, a crash in C code)."""


def locator(fn: Any, metadata: dict[str, Any], name: str) -> Locator | None:
    """How a child finds ``fn``, or None when it cannot (then the call runs in-process)."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if module and qualname and module != "__main__" and "<" not in qualname:
        try:
            obj: Any = importlib.import_module(module)
            for part in qualname.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError):
            obj = None
        if obj is fn or getattr(obj, "fn", None) is fn:
            return ("ref", module, qualname)
    entry = metadata.get(SPEC_KEY)
    return ("spec", entry, name) if isinstance(entry, str) else None


class _Child:
    def __init__(self) -> None:
        req_r, self.req_w = os.pipe()
        self.resp_r, resp_w = os.pipe()
        cmd = [sys.executable, "-m", "reactq.shared.tools.runner", str(req_r), str(resp_w),
               str(os.getpid())]
        try:
            self.proc = subprocess.Popen(cmd, pass_fds=(req_r, resp_w), stdin=subprocess.DEVNULL)
        finally:
            os.close(req_r)
            os.close(resp_w)

    def wait_reply(self, deadline: float) -> Any:
        """The reply frame; TimeoutError past ``deadline``, EOFError when the child died."""
        poller = select.poll()
        poller.register(self.resp_r, select.POLLIN)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            if poller.poll(left * 1000):  # blocks without the GIL
                return read_frame(self.resp_r)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.close_fds()

    def close_fds(self) -> None:
        for fd in (self.req_w, self.resp_r):
            try:
                os.close(fd)
            except OSError:
                pass

    def describe_exit(self) -> str:
        code = self.proc.wait()
        return f"killed by signal {-code}" if code < 0 else f"exit code {code}"


class ToolProcessPool:
    """Idle tool-runner children of this process; one child per call in flight."""

    def __init__(self, max_idle: int = 4) -> None:
        self.max_idle = max_idle
        self._idle: list[_Child] = []
        self._running: dict[object, _Child] = {}
        self._lock = threading.Lock()
        # Children are started from one long-lived thread: PR_SET_PDEATHSIG fires when the
        # *thread* that started the child ends, and a worker's task threads may come and go.
        self._spawner = ThreadPoolExecutor(1, thread_name_prefix="reactq-toolrunner-spawn")

    def call(self, loc: Locator, kwargs: dict[str, Any], timeout: float, name: str,
             token: object = None) -> Any:
        """Run the call in a child; the result, or ToolError (its message is for the LLM).
        ``cancel(token)`` from another thread stops it."""
        child = self._take()
        with self._lock:
            self._running[token] = child
        try:
            status, payload = self._exchange(child, loc, kwargs, timeout, name)
        finally:
            with self._lock:
                self._running.pop(token, None)
        self._give_back(child)  # only now: a late cancel() must not hit the next call
        if status == "ok":
            return payload
        raise ToolError(payload)

    def cancel(self, token: object) -> None:
        """Stop the call started with ``token`` (its waiting thread sees the child die)."""
        with self._lock:
            child = self._running.get(token)
            if child is not None and child.proc.returncode is None:
                child.proc.send_signal(signal.SIGKILL)

    def _exchange(self, child: _Child, loc: Locator, kwargs: dict[str, Any], timeout: float,
                  name: str) -> tuple[str, Any]:
        loaded = False
        try:
            # sys.path rides along: a tool module may live on a path added after the spawn.
            write_frame(child.req_w, ("call", loc, kwargs, timeout, list(sys.path)))
            status, payload = child.wait_reply(time.monotonic() + LOAD_SECONDS)
            if status == "started":  # loaded: the tool's own deadline starts now
                loaded = True
                status, payload = child.wait_reply(time.monotonic() + timeout)
        except TimeoutError:
            child.kill()
            if not loaded:
                raise ToolTimeoutError(
                    f"Tool '{name}' could not be loaded within {LOAD_SECONDS:g}s and was stopped "
                    "(its module's import hangs or the host is overloaded)."
                ) from None
            raise ToolTimeoutError(
                f"Tool '{name}' timed out after {timeout:g}s (its deadline: the tool's timeout, "
                "default REACTQ_TOOL_TIMEOUT) and was stopped; try a smaller input or another way."
            ) from None
        except (EOFError, OSError):
            child.kill()
            raise ToolProcessDied(
                f"Tool '{name}' failed: its process died mid-call ({child.describe_exit()})"
            ) from None
        except BaseException:
            child.kill()  # e.g. KeyboardInterrupt: never reuse a child in an unknown state
            raise
        return status, payload

    def prewarm(self, n: int = 1) -> None:
        """Start ``n`` idle children in the background (the first call then skips the start)."""
        def start() -> None:
            for _ in range(n):
                with self._lock:
                    if len(self._idle) >= self.max_idle:
                        return
                child = _Child()
                with self._lock:
                    self._idle.append(child)
        self._spawner.submit(start)

    def idle_pids(self) -> list[int]:
        with self._lock:
            return [c.proc.pid for c in self._idle]

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for child in idle:
            child.kill()
        self._spawner.shutdown(wait=False)

    def _take(self) -> _Child:
        with self._lock:
            while self._idle:
                child = self._idle.pop()
                if child.proc.poll() is None:
                    return child
                child.close_fds()
        return self._spawner.submit(_Child).result()

    def _give_back(self, child: _Child) -> None:
        with self._lock:
            if len(self._idle) < self.max_idle:
                self._idle.append(child)
                return
        os.close(child.req_w)  # EOF: the child exits
        child.proc.wait()
        os.close(child.resp_r)


_pool: ToolProcessPool | None = None
_pool_pid = 0
_pool_lock = threading.Lock()


def pool() -> ToolProcessPool:
    """This process's pool (a forked child gets its own: pipes and threads do not fork)."""
    global _pool, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool, _pool_pid = ToolProcessPool(), os.getpid()
        return _pool
