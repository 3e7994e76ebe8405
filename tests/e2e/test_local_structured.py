"""A typed answer from the bundled SmolLM2-135M: its registry entry has ``json_schema`` (the
server turns the schema into a llama.cpp grammar), so the answer attempt is constrained to the
schema's shape; ``jsonschema`` then checks what the grammar cannot (``minimum``, formats).

As in ``test_local_model.py`` the model's words are not ours to check: each run must end in
one terminal state, ``succeeded`` with an ``output`` valid against the schema or ``failed``
with ``output_invalid``. How often the answer was valid at the first attempt and after
repairs is printed (``pytest -s``) and written down in docs/structured-output.md.
"""

from __future__ import annotations

from typing import Any

import pytest

from reactq.shared.engine.output import problems
from reactq.shared.requests import RunRequest
from tests.e2e.test_local_model import assert_every_turn_resolves

pytestmark = [pytest.mark.local_model, pytest.mark.timeout(600)]

PERSON = {"type": "object", "properties": {
    "name": {"type": "string"}, "born": {"type": "integer", "minimum": 1000, "maximum": 2100},
    "city": {"type": "string"}}, "required": ["name", "born", "city"]}
DOCUMENTS = [
    "Ada Lovelace was born in 1815 in London.",
    "Alan Turing was born in 1912 in London.",
    "Marie Curie was born in 1867 in Warsaw.",
]


def test_smollm2_answers_a_small_extraction_with_a_schema(e2e_dispatcher: Any) -> None:
    tally = {"first": 0, "repaired": 0, "invalid": 0}
    for doc in DOCUMENTS:
        handle = e2e_dispatcher.submit(RunRequest(
            query=f"Extract the person's name, birth year and city of birth: {doc}",
            tools=[], max_iterations=2, completion_check=False, output_schema=PERSON))
        events = [e for _, e in handle.events(timeout=280)]
        result = handle.result(timeout=10)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert events[-1].channel == "done" and events[-1].data["output"] == result["output"]
        assert_every_turn_resolves(events)
        repairs = [e for e in events if e.channel == "phase" and e.data.get("phase") == "output_repair"]
        if result["status"] == "succeeded":
            assert problems(PERSON, result["output"]) == []
            deltas = "".join(e.data["content"] for e in events
                             if e.channel == "answer" and e.data["status"] == "delta")
            assert deltas == result["answer"]
            tally["repaired" if repairs else "first"] += 1
        else:
            assert result["status"] == "failed"
            assert [e.data["kind"] for e in events if e.channel == "error"][-1] in ("output_invalid", "llm_error")
            tally["invalid"] += 1
        print(f"\n{doc!r}: {result['status']} after {len(repairs) + 1} attempt(s): {result['output']}")
    print(f"\nSmolLM2 typed answers: {tally}")
