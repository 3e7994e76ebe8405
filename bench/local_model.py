"""How often the bundled SmolLM2 answers the demo's questions right, per way of asking it.

``python -m bench.local_model [--runs 3] [--variants default,native] [--questions demo,quickstart]``
runs the demo's sample questions (``demo``: ``dispatcher/local/samples/questions.jsonl``, graded
by their ``expect`` patterns) and the README quickstart's question (``quickstart``: its
``quickstart.py`` as the README writes it, the reader's ``word_count`` loaded by the worker
through the README's ``REACTQ_TOOLS``, the question as the script asks it, right when the
answer says 6) through real workers against a local model server, once per variant and run,
one question at a time (the server answers one request at a time; concurrent runs only queue):

* ``default``: what ``reactq run`` and ``make demo`` use (``localmodel.write_registry``'s
  defaults on a ``chatml`` server: JSON mode with the action grammar, repeat penalty off,
  one tool turn, no synthesis);
* ``native``: native tool calls on a ``chatml-function-calling`` server, tool results as user
  messages, answer synthesis;
* ``default+synthesis``, ``default-max_tool_turns``, ``default+repeat_penalty``: ``default``
  with one choice undone.

Prints one JSON line: per variant, right answers per run and per question, and per question
how many runs called the question's tools. ``--quickstart-query`` asks the quickstart's tool
another question (wordings are compared this way). Needs the ``local`` extra
(``make install-local``).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

# (server prompt format, write_registry keywords)
NATIVE = {"tool_call": True, "json_mode": False, "json_schema": False, "repeat_penalty": None,
          "max_tool_turns": None, "answer_synthesis": True}
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "default": ("chatml", {}),
    "native": ("chatml-function-calling", NATIVE),
    "default+synthesis": ("chatml", {"answer_synthesis": True}),
    "default-max_tool_turns": ("chatml", {"max_tool_turns": None}),
    "default+repeat_penalty": ("chatml", {"repeat_penalty": None}),
}
ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```\s*$", re.M | re.S)
#: The quickstart's right answer, 6 words: "6", "six", "6 words", "word count: 6", "the answer
#: is 6.", not "16" nor "6 letters".
SIX = (r"(?i)^\W*(6|six)\W*$|\b(6|six)\s+words\b|\bwords?[\"']?\s*(count\s+)?(is|are|:|=)\s*(6|six)\b"
       r"|\b(is|are|:|=)\s*(6|six)\W*$")


def quickstart(where: Path, query: str | None = None) -> tuple[dict[str, Any], str]:
    """The README quickstart's question (``id`` "quickstart", graded by :data:`SIX`) and its
    ``REACTQ_TOOLS``, with its ``quickstart.py`` written into ``where``: the request is the
    script's own ``RunRequest`` (``query`` replaced when given), nothing added."""
    blocks = [(m.group(1), m.group(2).strip(), m.group(3)) for m in FENCE.finditer((ROOT / "README.md").read_text())]
    source = next(code for lang, info, code in blocks if lang == "python" and 'title="quickstart.py"' in info)
    shell = next(code for lang, info, code in blocks if lang == "bash" and info == "quickstart")
    tools = re.search(r"REACTQ_TOOLS=(\S+)", shell)
    assert tools is not None, "the README quickstart exports no REACTQ_TOOLS"
    call = next(node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
                and getattr(node.func, "attr", None) == "RunRequest")
    request = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg}
    if query:
        request["query"] = query
    where.mkdir(parents=True, exist_ok=True)
    (where / "quickstart.py").write_text(source)
    return {"id": "quickstart", **request, "expect": SIX}, tools.group(1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.local_model")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--variants", default="default,native", help=f"comma-separated, of: {', '.join(VARIANTS)}")
    p.add_argument("--questions", default="demo,quickstart", help="comma-separated, of: demo, quickstart")
    p.add_argument("--quickstart-query", help="ask the quickstart's tool this instead of the README's question")
    args = p.parse_args(argv)
    which = set(args.questions.split(","))

    from reactq.dispatcher.client import Dispatcher
    from reactq.dispatcher.local.demo import load_questions, run_batch
    from reactq.dispatcher.local.workers import ensure_workers, stop_workers
    from reactq.dispatcher.local.model import LocalModelServer, find_gguf, local_model_missing, write_registry
    from reactq.shared.redisconn import ensure_embedded
    from reactq.shared.settings import Settings

    missing = local_model_missing()
    if missing:
        print(f"the local model is not available: {missing}", file=sys.stderr)
        return 2
    # The sample questions use the demo tools (echo, add), as `make demo` registers them.
    os.environ.setdefault("REACTQ_DEMO_TOOLS", "true")
    data = Path(tempfile.mkdtemp(prefix="reactq-bench-local-"))
    os.environ["REACTQ_REDIS_URL"] = ensure_embedded(data)
    questions = load_questions(None) if "demo" in which else []
    if "quickstart" in which:
        # The reader's tool, loaded by the worker as the README's `export REACTQ_TOOLS=… PYTHONPATH=.` says.
        question, tools = quickstart(data / "quickstart", args.quickstart_query)
        questions.append(question)
        os.environ["REACTQ_TOOLS"] = ",".join(filter(None, [os.environ.get("REACTQ_TOOLS"), tools]))
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(data / "quickstart"),
                                                                  os.environ.get("PYTHONPATH")]))
    figures: dict[str, Any] = {}
    servers: dict[str, LocalModelServer] = {}
    try:
        for name in args.variants.split(","):
            chat_format, options = VARIANTS[name]
            if chat_format not in servers:
                servers[chat_format] = LocalModelServer(
                    find_gguf() or Path(), data / f"llama-{chat_format}.log", chat_format=chat_format).start()
            registry = write_registry(data / f"{name}.toml", servers[chat_format].base_url, **options)
            os.environ["REACTQ_MODELS"] = str(registry)
            settings = Settings(data_dir=data)
            stop_workers(settings, embedded=False)
            ensure_workers(settings, count=1, ping=False)
            per_run: list[int] = []
            per_question: dict[str, int] = {q["id"]: 0 for q in questions}
            answers: dict[str, list[str]] = {q["id"]: [] for q in questions}
            tool_called: dict[str, int] = {q["id"]: 0 for q in questions}
            for n in range(args.runs):
                right = 0
                for q in questions:  # one at a time: the server serves one request at a time
                    for row in run_batch(Dispatcher(settings), [q], data / f"{name}-{n}-{q['id']}.jsonl",
                                         timeout=600):
                        right += bool(row["right"])
                        per_question[q["id"]] += bool(row["right"])
                        answers[q["id"]].append(str(row["answer"])[:120])
                        tool_called[q["id"]] += bool(set(row["tool_calls"]) & set(q.get("tools") or []))
                per_run.append(right)
            figures[name] = {"right_per_run": per_run, "of": len(questions),
                             "right_per_question": per_question, "tool_called_per_question": tool_called,
                             "queries": {q["id"]: q["query"] for q in questions}, "answers": answers}
            print(json.dumps({name: figures[name]}), file=sys.stderr, flush=True)
    finally:
        stop_workers(Settings(data_dir=data))
        for server in servers.values():
            server.stop()
    print(json.dumps({"local_model_quality": figures, "load_average": os.getloadavg()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
