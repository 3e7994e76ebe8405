"""``python -m bench.faults [names…]``: run the fault modules (all by default), print one JSON line."""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys
import time
import traceback
from pathlib import Path


def main(argv: list[str]) -> int:
    here = Path(__file__).resolve().parent
    names = sorted(m.name[2:] for m in pkgutil.iter_modules([str(here)]) if m.name.startswith("f_"))
    wanted = argv or names
    unknown = [n for n in wanted if n not in names]
    if unknown:
        print(f"unknown fault modules: {unknown}; known: {names}", file=sys.stderr)
        return 2
    out: dict[str, object] = {}
    for name in wanted:
        started = time.monotonic()
        try:
            figures = importlib.import_module(f"bench.faults.f_{name}").run()
        except Exception as exc:  # one module failing must not hide the others' figures
            traceback.print_exc()
            figures = {"error": f"{type(exc).__name__}: {exc}"}
        figures["suite_seconds"] = round(time.monotonic() - started, 1)
        out[name] = figures
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
