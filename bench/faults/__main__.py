"""``python -m bench.faults [names…]``: import every ``bench/faults/f_*.py`` (or the named
ones), call its ``run() -> dict`` and print ONE JSON line ``{name: figures, …}``."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    here = Path(__file__).parent
    names = argv or sorted(p.stem[2:] for p in here.glob("f_*.py"))
    out: dict[str, object] = {}
    for name in names:
        module = importlib.import_module(f"bench.faults.f_{name}")
        try:
            out[name] = module.run()
        except Exception as exc:  # one broken fault must not hide the others' figures
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
