"""``python -m bench.faults [names…]``: run every ``f_*.py`` fault module (or the named ones,
with or without the ``f_`` prefix) and print one JSON line ``{name: figures, ...}``.
A module that raises is reported as ``{"error": "..."}``; the others still run."""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys
import time
import traceback
from pathlib import Path
from typing import Any


def discover() -> list[str]:
    here = Path(__file__).parent
    return sorted(m.name[2:] for m in pkgutil.iter_modules([str(here)]) if m.name.startswith("f_"))


def main(argv: list[str]) -> int:
    wanted = [a.removeprefix("f_") for a in argv] or discover()
    unknown = sorted(set(wanted) - set(discover()))
    if unknown:
        print(f"unknown fault module(s): {unknown}; available: {discover()}", file=sys.stderr)
        return 2
    out: dict[str, Any] = {}
    for name in wanted:
        started = time.monotonic()
        try:
            figures = importlib.import_module(f"bench.faults.f_{name}").run()
        except Exception as exc:  # one broken module must not hide the others' figures
            traceback.print_exc(file=sys.stderr)
            figures = {"error": f"{type(exc).__name__}: {exc}"}
        figures["wall_s"] = round(time.monotonic() - started, 1)
        out[name] = figures
        print(f"{name}: {json.dumps(figures)}", file=sys.stderr, flush=True)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
