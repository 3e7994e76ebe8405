"""``text_stats``: characters, words, lines and sentences of a text (linear time)."""

from __future__ import annotations

import json
import re
from typing import Literal

from pydantic import BaseModel, Field
from reactq.shared.tools.base import Tool
from reactq.shared.tools.builtins.numbers import MAX_DOCUMENT_CHARS

# --------------------------------------------------------------------------- text_stats


Measure = Literal["characters", "words", "lines", "sentences"]


class TextStatsArgs(BaseModel):
    text: str = Field(description="The text to measure.", max_length=MAX_DOCUMENT_CHARS)
    # One count comes back as the bare number, as ``calculator`` and ``add`` return theirs:
    # nothing to misread (a small model given all four counts answered "43 words" with the
    # character count; see the local-model guide).
    only: Measure | None = Field(None, description="Return only this count, e.g. \"words\".")


# The lookbehind makes a match start only at the first mark of a run: without it a long
# run of marks not followed by a space is rescanned from each of its positions (quadratic).
_SENTENCE_END = re.compile(r"(?<![.!?])[.!?]+(?:\s+|$)")


def _text_stats(text: str, only: Measure | None = None) -> str:
    """Words are whitespace-separated; a sentence ends at ``.``/``!``/``?`` + space or end."""
    stats: dict[str, int] = {
        "characters": len(text),
        "words": len(text.split()),
        "lines": len(text.splitlines()),
        "sentences": sum(1 for part in _SENTENCE_END.split(text) if part.strip()),
    }
    return str(stats[only]) if only else json.dumps(stats)


text_stats = Tool(
    name="text_stats",
    inline=True,
    isolate=False,
    description=(
        "Count the characters, words, lines and sentences of a text; returns JSON "
        '{"characters", "words", "lines", "sentences"}, or with `only`, that one count as a bare number.'
    ),
    args_model=TextStatsArgs,
    fn=_text_stats,
)
