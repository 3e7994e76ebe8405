"""``text_stats``: characters, words, lines and sentences of a text (linear time)."""

from __future__ import annotations

import json
import re

from pydantic import BaseModel, Field
from reactq.shared.tools.base import Tool
from reactq.shared.tools.builtins.numbers import MAX_DOCUMENT_CHARS

# --------------------------------------------------------------------------- text_stats


class TextStatsArgs(BaseModel):
    text: str = Field(description="The text to measure.", max_length=MAX_DOCUMENT_CHARS)


# The lookbehind makes a match start only at the first mark of a run: without it a long
# run of marks not followed by a space is rescanned from each of its positions (quadratic).
_SENTENCE_END = re.compile(r"(?<![.!?])[.!?]+(?:\s+|$)")


def _text_stats(text: str) -> str:
    """Words are whitespace-separated; a sentence ends at ``.``/``!``/``?`` + space or end."""
    stats = {
        "characters": len(text),
        "words": len(text.split()),
        "lines": len(text.splitlines()),
        "sentences": sum(1 for part in _SENTENCE_END.split(text) if part.strip()),
    }
    return json.dumps(stats)


text_stats = Tool(
    name="text_stats",
    inline=True,
    isolate=False,
    description=(
        "Count the characters, words, lines and sentences of a text; returns JSON "
        '{"characters", "words", "lines", "sentences"}.'
    ),
    args_model=TextStatsArgs,
    fn=_text_stats,
)
