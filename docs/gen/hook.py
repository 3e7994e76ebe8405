"""mkdocs hook: the reference pages are generated at build time, never kept by hand."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def on_files(files: Any, config: Any) -> Any:
    # mkdocs restores sys.path after loading a hook: the repository root goes on it here.
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from mkdocs.structure.files import File

    from docs.gen.pages import generate

    for path, content in generate().items():
        files.append(File.generated(config, path, content=content))
    return files
