"""``python -m bench.faults [names…]``: run the fault modules, print one JSON line."""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys
import traceback
from typing import Any

import bench.faults as pkg


def main(argv: list[str]) -> int:
    names = sorted(m.name[2:] for m in pkgutil.iter_modules(pkg.__path__) if m.name.startswith("f_"))
    wanted = argv or names
    unknown = [n for n in wanted if n not in names]
    if unknown:
        print(f"unknown fault modules {unknown}; available: {names}", file=sys.stderr)
        return 2
    out: dict[str, Any] = {}
    for name in wanted:
        try:
            out[name] = importlib.import_module(f"bench.faults.f_{name}").run()
        except Exception as exc:  # noqa: BLE001 — one broken module must not hide the others' figures
            traceback.print_exc()
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(out, sort_keys=True))
    return 0 if not any(isinstance(v, dict) and "error" in v for v in out.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
