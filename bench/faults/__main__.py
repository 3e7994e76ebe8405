"""``python -m bench.faults [names…]``: import every ``bench/faults/f_*.py``, call its
``run() -> dict`` (bounded, self-contained) and print ONE JSON line ``{name: figures, …}``."""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys
import traceback
from typing import Any

import bench.faults as pkg


def main(argv: list[str]) -> int:
    names = sorted(m.name for m in pkgutil.iter_modules(pkg.__path__) if m.name.startswith("f_"))
    wanted = [n if n.startswith("f_") else f"f_{n}" for n in argv] or names
    out: dict[str, Any] = {}
    for name in wanted:
        try:
            out[name] = importlib.import_module(f"bench.faults.{name}").run()
        except Exception as exc:  # one fault's failure is reported, the others still run
            traceback.print_exc()
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
