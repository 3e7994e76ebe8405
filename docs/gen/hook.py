"""mkdocs hook: the reference pages are generated at build time, never kept by hand."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    from docs.gen.pages import generate

    for path, content in generate().items():
        files.append(File.generated(config, path, content=content))
    return files
