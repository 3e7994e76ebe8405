"""Patches to reactq's code, applied in the benchmark workers without editing its files
(opt-in, never default).

``python -m bench --experiment NAME …`` applies them in the benchmark workers (through
``BENCH_EXPERIMENTS``, read by ``bench.celeryapp``) and in this process, so a figure can be
measured with and without a change, interleaved on the same machine. Each of the three below
is also how reactq's own code works, so on it they change nothing; they show the shape of
a patch:

* ``openai_post``: ``OpenAILLM`` sends its request dict with ``client.post(...)`` instead of
  ``client.chat.completions.create(**request)``, skipping the openai SDK's recursive
  TypedDict transform of the params (O(history)). reactq: ``shared/llm/openai.py``.
* ``kombu_client``: kombu's Redis channel reuses one ``redis.Redis`` client (over its
  connection pool) instead of building a new one for every publish; redis-py 8 builds a
  169-entry response-callback table per client (redis-py #3624). reactq:
  ``shared/transport.py``.
* ``token_estimate``: the context guard counts ASCII characters with ``str.isascii`` /
  ``encode("ascii", "ignore")`` instead of a Python generator over every character
  (same result). reactq: ``shared/engine/context.py``.

One goes the other way, to measure what reactq's own design saves against the way it was:

* ``send_after_commit``: a step's successors are sent through kombu after its commit instead
  of being pushed by the commit script (``workers/runs/step.py``: ``carried``).

(``BENCH_TASK_EVENTS=on`` in the environment likewise turns Celery's task events on from the
start, as ``-E``: ``bench.celeryapp``.)
"""

from __future__ import annotations

import os
from typing import Any

NAMES = ("openai_post", "kombu_client", "token_estimate", "send_after_commit")


def apply(names: list[str] | None = None) -> list[str]:
    names = names if names is not None else [
        n for n in os.environ.get("BENCH_EXPERIMENTS", "").split(",") if n]
    for name in names:
        if name not in NAMES:
            raise ValueError(f"unknown experiment {name!r}; choose from {NAMES}")
        globals()[f"_{name}"]()
    return names


def _openai_post() -> None:
    from openai import AsyncStream
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    from reactq.shared.llm.openai import OpenAILLM

    class Completions:
        def __init__(self, client: Any) -> None:
            self._c = client

        async def create(self, **request: Any) -> Any:
            stream = bool(request.get("stream"))
            return await self._c.post("/chat/completions", body=request, cast_to=ChatCompletion,
                                      stream=stream, stream_cls=AsyncStream[ChatCompletionChunk])

    class Client:
        def __init__(self, client: Any) -> None:
            self._c = client
            self.chat = type("Chat", (), {"completions": Completions(client)})()

        def __getattr__(self, name: str) -> Any:
            return getattr(self._c, name)

    original = OpenAILLM._client

    def _client(self: OpenAILLM) -> Any:
        return Client(original(self))

    OpenAILLM._client = _client  # type: ignore[method-assign]


def _kombu_client() -> None:
    from kombu.transport import redis as kredis

    original = kredis.Channel._create_client

    def _create_client(self: Any, asynchronous: bool = False) -> Any:
        if asynchronous:
            return original(self, asynchronous=True)
        client = self.__dict__.get("_bench_client")
        if client is None:
            client = self.__dict__["_bench_client"] = original(self)
        return client

    kredis.Channel._create_client = _create_client


def _token_estimate() -> None:
    from reactq.shared.engine import context

    def estimate_tokens(text: str | None) -> int:
        if not text:
            return 0
        ascii_chars = len(text) if text.isascii() else len(text.encode("ascii", "ignore"))
        return max(1, int(ascii_chars / 4.0 + (len(text) - ascii_chars) / 1.5))

    context.estimate_tokens = estimate_tokens



def _send_after_commit() -> None:
    from reactq.workers.runtime import Runtime

    Runtime.sends_in_commit = False  # type: ignore[assignment]  # shadows the cached property
