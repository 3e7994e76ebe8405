"""How often the bundled SmolLM2 answers the demo's questions right, per way of asking it.

``python -m bench.local_model [--runs 3] [--variants default,native]`` runs the demo's sample
questions (``dispatcher/local/samples/questions.jsonl``, graded by their ``expect`` patterns)
through real workers against a local model server, once per variant and run, one question at
a time (the server answers one request at a time; concurrent runs only queue):

* ``default``: what ``reactq run`` and ``make demo`` use (``localmodel.write_registry``'s
  defaults on a ``chatml`` server: JSON mode with the action grammar, repeat penalty off,
  one tool turn, no synthesis);
* ``native``: native tool calls on a ``chatml-function-calling`` server, tool results as user
  messages, answer synthesis;
* ``default+synthesis``, ``default-max_tool_turns``, ``default+repeat_penalty``: ``default``
  with one choice undone.

Prints one JSON line: per variant, right answers per run and per question. Needs the
``local`` extra (``make install-local``).
"""

from __future__ import annotations

import argparse
import json
import os
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.local_model")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--variants", default="default,native", help=f"comma-separated, of: {', '.join(VARIANTS)}")
    args = p.parse_args(argv)

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
    questions = load_questions(None)
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
            for n in range(args.runs):
                right = 0
                for q in questions:  # one at a time: the server serves one request at a time
                    for row in run_batch(Dispatcher(settings), [q], data / f"{name}-{n}-{q['id']}.jsonl",
                                         timeout=600):
                        right += bool(row["right"])
                        per_question[q["id"]] += bool(row["right"])
                        answers[q["id"]].append(str(row["answer"])[:120])
                per_run.append(right)
            figures[name] = {"right_per_run": per_run, "of": len(questions),
                             "right_per_question": per_question, "answers": answers}
            print(json.dumps({name: figures[name]}), file=sys.stderr, flush=True)
    finally:
        stop_workers(Settings(data_dir=data))
        for server in servers.values():
            server.stop()
    print(json.dumps({"local_model_quality": figures, "load_average": os.getloadavg()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
