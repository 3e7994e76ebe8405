"""Run the fault suite: every ``bench/faults/f_*.py`` (or the names given), one JSON line."""

from __future__ import annotations

import importlib
import json
import sys
import traceback
from pathlib import Path
from typing import Any


def main(argv: list[str]) -> int:
    here = Path(__file__).resolve().parent
    names = sorted(p.stem[2:] for p in here.glob("f_*.py"))
    wanted = [a.removeprefix("f_") for a in argv] or names
    unknown = [n for n in wanted if n not in names]
    if unknown:
        print(f"unknown fault module(s): {', '.join(unknown)}; known: {', '.join(names)}",
              file=sys.stderr)
        return 2
    out: dict[str, Any] = {}
    for name in wanted:
        try:
            out[name] = importlib.import_module(f"bench.faults.f_{name}").run()
        except Exception as exc:  # one broken module must not hide the others' figures
            traceback.print_exc()
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
