"""``python -m bench.faults [names…]``: import every ``bench/faults/f_*.py`` (or the named ones),
call its ``run()`` and print ONE JSON line ``{name: figures, ...}``."""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    here = Path(__file__).parent
    names = argv or sorted(m.name[2:] for m in pkgutil.iter_modules([str(here)]) if m.name.startswith("f_"))
    out = {}
    for name in names:
        mod = importlib.import_module(f"bench.faults.f_{name}")
        try:
            out[name] = mod.run()
        except Exception as exc:  # one fault's failure is a figure, not the end of the suite
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
