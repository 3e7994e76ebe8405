"""A tool-runner process: ``python -m reactq.shared.tools.runner REQ_FD RESP_FD PARENT_PID``.

Started and fed by :mod:`reactq.shared.tools.isolation`; runs one tool call at a time.
Frames on the two private pipes are pickles (parent and child are the same trusted code;
nothing here crosses the broker, which stays JSON-only). A request is
``("call", locator, kwargs, timeout, sys_path)``; replies: ``("started", None)`` once the tool is
imported and about to run (the call's deadline counts from there: a cold runner's interpreter
start and the tool module's import are not the tool's time), then ``("ok", result)`` or
``("error", text)``; a tool that cannot be loaded gets only the ``("error", text)``.

The child must never outlive its purpose, even while the tool holds the GIL (then no Python
code of ours runs): the kernel kills it when the worker dies (``PR_SET_PDEATHSIG``) and
when a call overruns its deadline by more than a little (``alarm`` with the default
``SIGALRM`` action). The worker kills it first in the normal case.
"""

from __future__ import annotations

import asyncio
import ctypes
import importlib
import inspect
import math
import os
import pickle
import signal
import sys
from typing import Any

from reactq.shared.tools.frames import read_frame, write_frame

#: Seconds past a call's deadline after which the kernel kills a child nobody killed.
ALARM_GRACE = 2


def _die_with_parent(parent_pid: int) -> None:
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(0)


def resolve(locator: tuple[str, ...]) -> Any:
    """The callable a locator names: ``("ref", module, qualname)`` or ``("spec", entry, name)``."""
    kind, where, name = locator
    if kind == "ref":
        obj: Any = importlib.import_module(where)
        for part in name.split("."):
            obj = getattr(obj, part)
        return getattr(obj, "fn", obj)  # a ``@tool``-decorated function is a Tool
    from reactq.shared.tools.loader import load_tools

    return _spec_tools(where, load_tools)[name].fn


_SPEC_CACHE: dict[str, dict[str, Any]] = {}


def _spec_tools(entry: str, load: Any) -> dict[str, Any]:
    if entry not in _SPEC_CACHE:
        _SPEC_CACHE[entry] = {t.name: t for t in load(entry)}
    return _SPEC_CACHE[entry]


def run_call(locator: tuple[str, ...], kwargs: dict[str, Any], timeout: float,
             started: Any = None) -> tuple[str, Any]:
    """Load the tool, say so through ``started()``, then run it under the alarm."""
    from reactq.shared.errors import ToolError

    try:
        fn = resolve(locator)
    except Exception as exc:
        return "error", f"the tool could not be loaded: {type(exc).__name__}: {exc}"
    if started is not None:
        started()
    signal.alarm(math.ceil(timeout) + ALARM_GRACE)
    try:
        result = asyncio.run(fn(**kwargs)) if inspect.iscoroutinefunction(fn) else fn(**kwargs)
        pickle.dumps(result)  # fail here, with a message, rather than in write_frame
        return "ok", result
    except Exception as exc:
        return "error", str(exc) if isinstance(exc, ToolError) else f"{type(exc).__name__}: {exc}"
    finally:
        signal.alarm(0)


def main(argv: list[str]) -> None:
    req_fd, resp_fd, parent_pid = (int(a) for a in argv[1:4])
    _die_with_parent(parent_pid)
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the worker, which kills us
    while True:
        try:
            msg = read_frame(req_fd)
        except EOFError:
            return
        sys.path[:] = msg[4]
        write_frame(resp_fd, run_call(msg[1], msg[2], msg[3],
                                      started=lambda: write_frame(resp_fd, ("started", None))))


if __name__ == "__main__":
    main(sys.argv)
