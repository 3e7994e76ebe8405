"""How often the bundled SmolLM2 answers the demo's questions right, per message shape.

``python -m bench.local_model [--runs 3]`` runs the demo's sample questions
(``dispatcher/samples/questions.jsonl``, graded by their ``expect`` pattern) through real
workers against the shared local model server, once per variant and run:

* ``tool``: tool results as ``tool`` messages (what the chat template drops),
* ``user``: ``tool_results_as = "user"`` (the default of the local registry),
* ``user+json_mode``: the same with the ``json_mode`` ability (JSON-mode turns use the
  server's JSON grammar).

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

VARIANTS = {"tool": {"tool_results_as": "tool", "json_mode": False},
            "user": {"tool_results_as": "user", "json_mode": False},
            "user+json_mode": {"tool_results_as": "user", "json_mode": True}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.local_model")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--variants", default=",".join(VARIANTS))
    args = p.parse_args(argv)

    from reactq.dispatcher.client import Dispatcher
    from reactq.dispatcher.demo import load_questions, run_batch
    from reactq.dispatcher.local import ensure_workers, stop_workers
    from reactq.dispatcher.localmodel import local_model_missing, shared_server, write_registry
    from reactq.shared.redisconn import redis_url
    from reactq.shared.settings import Settings

    missing = local_model_missing()
    if missing:
        print(f"the local model is not available: {missing}", file=sys.stderr)
        return 2
    # The sample questions use the demo tools (echo, add), as `make demo` registers them.
    os.environ.setdefault("REACTQ_DEMO_TOOLS", "true")
    data = Path(tempfile.mkdtemp(prefix="reactq-bench-local-"))
    base = Settings(data_dir=data)
    os.environ["REACTQ_REDIS_URL"] = redis_url(base)
    base_url = shared_server(Settings(data_dir=data))
    questions = load_questions(None)
    figures: dict[str, Any] = {}
    try:
        for name in args.variants.split(","):
            registry = write_registry(data / f"{name}.toml", base_url, **VARIANTS[name])
            os.environ["REACTQ_MODELS"] = str(registry)
            settings = Settings(data_dir=data)
            stop_workers(settings, embedded=False)
            ensure_workers(settings, count=2, ping=False)
            per_run: list[int] = []
            per_question: dict[str, int] = {q["id"]: 0 for q in questions}
            for n in range(args.runs):
                rows = list(run_batch(Dispatcher(settings), questions, data / f"{name}-{n}.jsonl",
                                      timeout=300))
                per_run.append(sum(bool(r["right"]) for r in rows))
                for r in rows:
                    per_question[r["id"]] += bool(r["right"])
            figures[name] = {"right_per_run": per_run, "of": len(questions),
                             "right_per_question": per_question}
            print(json.dumps({name: figures[name]}), file=sys.stderr, flush=True)
    finally:
        from reactq.dispatcher.localmodel import stop_shared_server

        stop_workers(Settings(data_dir=data))
        stop_shared_server(Settings(data_dir=data))
    print(json.dumps({"local_model_quality": figures}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
