"""``python -m docs.gen OUT``: write the generated pages under OUT (to read them without mkdocs)."""

from __future__ import annotations

import sys
from pathlib import Path

from docs.gen.pages import generate

out = Path(sys.argv[1] if len(sys.argv) > 1 else "site-reference")
for path, content in generate().items():
    (out / path).parent.mkdir(parents=True, exist_ok=True)
    (out / path).write_text(content)
    print(out / path)
