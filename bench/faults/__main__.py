"""``python -m bench.faults [names…]``: import every ``bench/faults/f_*.py``, call its
``run() -> dict`` (bounded in time, self-contained), print ONE JSON line ``{name: figures}``."""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys
import traceback
from pathlib import Path


def main(argv: list[str]) -> int:
    here = Path(__file__).parent
    names = sorted(m.name for m in pkgutil.iter_modules([str(here)]) if m.name.startswith("f_"))
    wanted = [n if n.startswith("f_") else f"f_{n}" for n in argv]
    out: dict[str, object] = {}
    for name in names:
        if wanted and name not in wanted:
            continue
        try:
            out[name[2:]] = importlib.import_module(f"bench.faults.{name}").run()
        except Exception as exc:  # one fault's failure is a figure, not the end of the suite
            out[name[2:]] = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-800:]}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
