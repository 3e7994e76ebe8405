"""An OpenAI-compatible scripted HTTP server for tests and benchmarks.

The real ``openai`` client (3.x, which talks through ``httpx2``) cannot be intercepted by
respx-style mocks, so reactq's tests drive it over real HTTP against this server.

What callers may rely on:

* ``POST /v1/chat/completions`` calls ``handler(request_json) -> Reply`` (sync or async) and
  answers as OpenAI does: a ``chat.completion`` JSON body, or, when the request says
  ``stream: true``, Server-Sent Events ``data: {...}\\n\\n`` chunks ending ``data: [DONE]``.
  With ``stream_options.include_usage`` a last chunk with empty ``choices`` carries usage.
* ``GET /v1/models`` lists the configured model ids.
* Every chat request is logged (thread-safe) in ``server.requests`` as a ``RequestRecord``
  with the JSON body, the time it was received and the time it was answered (for streams:
  when the last byte was sent).
* Enforcing mode (``ScriptedServer(..., rpm=N, tpm=M)`` or ``server.enforce(rpm, tpm)``): a
  provider's own limits over a sliding 60 s window of the requests it accepted (tokens = the
  usage it reports). A request over either limit gets 429 with ``Retry-After`` (seconds until
  the window has room), is logged with ``status=429`` and never reaches the handler.
* A handler that raises answers 500 with ``x-should-retry: false`` (so the openai client
  does not retry a test bug three times) and the exception is kept in ``server.errors``.

Replies are built with ``reply_text``, ``reply_tool_calls`` and ``reply_error``; each takes
the options ``delay`` (seconds, ``asyncio.sleep`` so a thousand slow requests can be held at
once), ``chunk_delay``, ``truncate_stream``, ``include_usage``, ``repeat_tool_ids_in_chunks``
(llama.cpp style) and ``reuse_index_zero`` (every streamed tool call on index 0).

Two ready-made handlers: ``conversation_script`` (stateless, keyed by the first user message,
so retried / redelivered calls get the same reply) and ``SequenceHandler`` (stateful, in
order). Run in-thread with ``ScriptedServer(handler).start()``, or as a process with
``python -m tests.scripted_server --port N --script module:attr`` (prints
``listening on http://127.0.0.1:PORT/v1`` once ready).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import json
import socket
import threading
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

JSON = dict[str, Any]
Handler = Callable[[JSON], "Reply | Awaitable[Reply]"]

#: The text a streamed synthesis request gets when a script does not set its own.
DEFAULT_SYNTHESIS_TEXT = "final answer"


# --------------------------------------------------------------------------- replies


@dataclass(frozen=True)
class ToolCallSpec:
    """One scripted tool call. ``arguments`` as a ``str`` is sent verbatim (e.g. invalid JSON)."""

    id: str
    name: str
    arguments: Mapping[str, Any] | str

    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(dict(self.arguments))


@dataclass(frozen=True)
class Reply:
    """What the server answers to one chat request. Build it with the ``reply_*`` helpers.

    ``usage=None`` means: a small deterministic usage computed from the request and reply
    sizes. ``finish_reason=None`` means ``tool_calls`` when there are tool calls, else ``stop``.
    """

    status: int = 200
    content: str | None = None
    tool_calls: tuple[ToolCallSpec, ...] = ()
    reasoning_content: str | None = None
    usage: Mapping[str, Any] | None = None
    finish_reason: str | None = None
    error_body: Mapping[str, Any] | None = None
    retry_after: float | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0
    chunk_delay: float = 0.0
    chunk_chars: int = 8
    truncate_stream: bool = False
    include_usage: bool = True
    repeat_tool_ids_in_chunks: bool = False
    reuse_index_zero: bool = False
    raw_body: str | None = None
    """Sent as it is (with ``raw_content_type``) instead of a completion: an HTML error page,
    a truncated JSON body."""
    raw_content_type: str = "text/html"

    def with_options(self, **options: Any) -> Reply:
        """A copy with some options changed (e.g. ``reply.with_options(delay=1.0)``)."""
        return replace(self, **options)


def reply_text(content: str, usage: Mapping[str, Any] | None = None,
               reasoning_content: str | None = None, **options: Any) -> Reply:
    """A plain assistant reply (also what a JSON-mode reply is: ``content`` is the JSON text)."""
    return Reply(content=content, usage=usage, reasoning_content=reasoning_content, **options)


def reply_tool_calls(calls: Sequence[tuple[str, str, Mapping[str, Any] | str]],
                     content: str | None = None, **options: Any) -> Reply:
    """A native tool-call reply; each call is ``(id, name, args)``, args a dict or raw string."""
    specs = tuple(ToolCallSpec(id=i, name=n, arguments=a) for i, n, a in calls)
    return Reply(content=content, tool_calls=specs, **options)


def reply_error(status: int, body: Mapping[str, Any] | None = None,
                retry_after: float | None = None, **options: Any) -> Reply:
    """An HTTP error. ``retry_after`` (seconds) sends ``retry-after`` and ``retry-after-ms``.

    Note: the openai client ignores a ``Retry-After`` of 0 (it only honours values > 0) and
    falls back to its own backoff of ≈ 0.5 s, 1 s, …; use e.g. ``retry_after=0.01`` for
    fast tests.
    """
    return Reply(status=status, error_body=body, retry_after=retry_after, **options)


# --------------------------------------------------------------------------- handlers


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content
                        if isinstance(p, dict) and p.get("type") == "text")
    return str(content)


def first_user_text(request: JSON) -> str:
    """The text of the first user message of a chat request ("" if none)."""
    for message in request.get("messages") or []:
        if message.get("role") == "user":
            return _text_of(message.get("content"))
    return ""


def count_assistant_messages(request: JSON) -> int:
    """How many assistant messages the request's history holds (= loop turns already taken)."""
    return sum(1 for m in request.get("messages") or [] if m.get("role") == "assistant")


@dataclass
class Script:
    """One conversation's replies: ``turns`` for non-streamed calls, ``synthesis`` for streams."""

    turns: list[Reply]
    synthesis: Reply | None = None


def conversation_script(scripts: Mapping[str, Script | Sequence[Reply]]) -> Handler:
    """A STATELESS handler for engine-level tests and benchmarks.

    The script is found by the first user message's text: an exact key match, else the
    first key (in dict order) that is a substring of it, else the key ``"*"``. Non-streamed
    requests get ``turns[n]`` with n = the number of assistant messages in the request,
    clamped to the last turn, so a retried or redelivered call gets the same reply as the
    first delivery. Streamed requests (``stream: true``, i.e. answer synthesis) get the
    script's ``synthesis`` reply, by default ``reply_text(DEFAULT_SYNTHESIS_TEXT)``.
    No matching script ⇒ HTTP 400 (not retried by the client) naming the query.
    """
    normalized: dict[str, Script] = {
        key: value if isinstance(value, Script) else Script(turns=list(value))
        for key, value in scripts.items()
    }

    def find(query: str) -> Script | None:
        if query in normalized:
            return normalized[query]
        for key, script in normalized.items():
            if key != "*" and key and key in query:
                return script
        return normalized.get("*")

    def handler(request: JSON) -> Reply:
        query = first_user_text(request)
        script = find(query)
        if script is None:
            return reply_error(400, {"error": {
                "message": f"scripted server: no script for first user message {query[:200]!r}",
                "type": "invalid_request_error"}})
        if request.get("stream"):
            return script.synthesis or reply_text(DEFAULT_SYNTHESIS_TEXT)
        if not script.turns:
            return reply_error(400, {"error": {
                "message": f"scripted server: script for {query[:200]!r} has no turns",
                "type": "invalid_request_error"}})
        index = min(count_assistant_messages(request), len(script.turns) - 1)
        return script.turns[index]

    return handler


class SequenceHandler:
    """A STATEFUL handler: replies in order, one per request (thread-safe).

    When the replies run out it answers HTTP 400 "exhausted" (not retried), or repeats the
    last reply with ``repeat_last=True``. ``calls`` counts the requests it saw.
    """

    def __init__(self, replies: Sequence[Reply], *, repeat_last: bool = False) -> None:
        self.replies = list(replies)
        self.repeat_last = repeat_last
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, request: JSON) -> Reply:
        with self._lock:
            i = self.calls
            self.calls += 1
        if i < len(self.replies):
            return self.replies[i]
        if self.repeat_last and self.replies:
            return self.replies[-1]
        return reply_error(400, {"error": {
            "message": f"scripted server: SequenceHandler exhausted after {len(self.replies)} replies",
            "type": "invalid_request_error"}})


# --------------------------------------------------------------------------- server


@dataclass
class RequestRecord:
    """One logged chat request. ``answered_at`` is None while the reply is still being sent.
    ``headers`` are the request headers, lower-cased names."""

    body: JSON
    received_at: float
    answered_at: float | None = None
    headers: dict[str, str] = field(default_factory=dict)
    status: int = 200


def _estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4) if text else 0


def _default_usage(request: JSON, reply: Reply) -> JSON:
    prompt = sum(_estimate_tokens(_text_of(m.get("content"))) + 4
                 for m in request.get("messages") or [])
    completion = _estimate_tokens(reply.content or "") + _estimate_tokens(reply.reasoning_content or "")
    completion += sum(_estimate_tokens(c.arguments_json()) + 4 for c in reply.tool_calls)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


def _chunks(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i:i + size] for i in range(0, len(text), size)]


class ScriptedServer:
    """The server. ``handler`` may be replaced between tests; the request log is cleared with
    ``clear()``. ``base_url`` is ``http://127.0.0.1:PORT/v1`` (what ``OpenAILLM`` takes)."""

    def __init__(self, handler: Handler, *, host: str = "127.0.0.1", port: int = 0,
                 models: Sequence[str] = ("scripted",), rpm: int | None = None,
                 tpm: int | None = None, window_s: float = 60.0) -> None:
        self.handler = handler
        self.rpm = rpm
        self.tpm = tpm
        #: The enforcing window; the limits scale with it (rpm=600 over 3 s = 30 requests).
        self.window_s = window_s
        self._window: list[tuple[float, int]] = []  # (accepted at, tokens reported)
        self.host = host
        self.models = list(models)
        self.errors: list[BaseException] = []
        self._requested_port = port
        self._port: int | None = None
        self._log: list[RequestRecord] = []
        self._lock = threading.Lock()
        self._seq = 0
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.app = Starlette(routes=[
            Route("/v1/chat/completions", self._chat, methods=["POST"]),
            Route("/v1/models", self._models, methods=["GET"]),
        ])

    # -- log --------------------------------------------------------------

    @property
    def requests(self) -> list[RequestRecord]:
        """A snapshot of the chat request log, in arrival order."""
        with self._lock:
            return list(self._log)

    @property
    def bodies(self) -> list[JSON]:
        """Just the JSON bodies of the logged chat requests."""
        return [r.body for r in self.requests]

    def clear(self) -> None:
        """Forget logged requests and handler errors (and the enforcing window)."""
        with self._lock:
            self._log.clear()
            self.errors.clear()
            self._window.clear()

    def enforce(self, rpm: int | None, tpm: int | None, window_s: float = 60.0) -> None:
        """Switch enforcing mode on (or off with ``None, None``); the window starts empty."""
        with self._lock:
            self.rpm, self.tpm, self.window_s = rpm, tpm, window_s
            self._window.clear()

    @property
    def rate_limited(self) -> list[RequestRecord]:
        """The requests the enforcing mode answered with 429."""
        return [r for r in self.requests if r.status == 429]

    def _over_limit(self, now: float) -> float | None:
        """Seconds until the window has room, or None when the request may pass (lock held)."""
        if not self.rpm and not self.tpm:
            return None
        w = self.window_s
        self._window = [(t, n) for t, n in self._window if t > now - w]
        waits = []
        max_req = int(self.rpm * w / 60) if self.rpm else 0
        max_tok = int(self.tpm * w / 60) if self.tpm else 0
        if max_req and len(self._window) >= max_req:
            waits.append(self._window[len(self._window) - max_req][0] + w - now)
        if max_tok and sum(n for _, n in self._window) >= max_tok:
            total, excess = 0, sum(n for _, n in self._window) - max_tok
            for t, n in self._window:
                total += n
                if total >= excess:
                    waits.append(t + w - now)
                    break
        return max(0.01, max(waits)) if waits else None

    def _accepted(self, now: float, tokens: int) -> None:
        if self.rpm or self.tpm:
            with self._lock:
                self._window.append((now, tokens))

    # -- lifecycle ----------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("ScriptedServer is not started")
        return self._port

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def _bind(self) -> socket.socket:
        # Binding the socket ourselves (port 0 = any free port) avoids the
        # pick-a-port-then-bind race between parallel test processes.
        # proto must be IPPROTO_TCP (not the default 0): asyncio only sets TCP_NODELAY on
        # accepted sockets whose proto says TCP, and without it every response waits
        # ≈ 40 ms for a delayed ACK (Nagle).
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self._requested_port))
        sock.listen(4096)  # room for a thousand held requests
        self._port = sock.getsockname()[1]
        return sock

    def _make_server(self) -> uvicorn.Server:
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="off",
                                timeout_graceful_shutdown=1, backlog=4096,
                                timeout_keep_alive=30)
        return uvicorn.Server(config)

    def start(self, timeout: float = 10.0) -> ScriptedServer:
        """Serve from a daemon thread; returns once the server accepts connections."""
        if self._thread is not None:
            return self
        sock = self._bind()
        self._server = server = self._make_server()
        self._thread = threading.Thread(target=lambda: server.run(sockets=[sock]),
                                        name=f"scripted-server-{self._port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("ScriptedServer failed to start")
            time.sleep(0.005)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving and join the thread (held requests are cut after ≈ 1 s)."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
        self._server = None
        self._thread = None

    def serve_forever(self, announce: bool = False) -> None:
        """Serve in the calling thread until interrupted (the CLI's mode).

        With ``announce`` it prints ``listening on <base_url>`` once the socket listens
        (connections made from then on queue until the loop accepts them)."""
        sock = self._bind()
        if announce:
            print(f"listening on {self.base_url}", flush=True)
        self._server = self._make_server()
        self._server.run(sockets=[sock])

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- endpoints ------------------------------------------------------------

    async def _models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": m, "object": "model", "created": 0, "owned_by": "reactq-tests"}
            for m in self.models]})

    async def _chat(self, request: Request) -> Response:
        received = time.time()
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse({"error": {"message": "body is not JSON",
                                           "type": "invalid_request_error"}}, status_code=400)
        record = RequestRecord(body=body, received_at=received, headers=dict(request.headers))
        with self._lock:
            self._log.append(record)
            self._seq += 1
            seq = self._seq
            over = self._over_limit(received)
        if over is not None:
            record.status = 429
            record.answered_at = time.time()
            return JSONResponse({"error": {"message": "scripted server: rate limit exceeded",
                                           "type": "rate_limit_error", "code": "rate_limit_exceeded"}},
                                status_code=429, headers={"retry-after": f"{over:.3f}",
                                                          "retry-after-ms": f"{over * 1000:.0f}"})
        try:
            reply = self.handler(body)
            if inspect.isawaitable(reply):
                reply = await reply
            if not isinstance(reply, Reply):
                raise TypeError(f"handler returned {type(reply).__name__}, not Reply")
        except Exception as exc:  # a test bug: report it, and tell the client not to retry
            with self._lock:
                self.errors.append(exc)
            record.answered_at = time.time()
            return JSONResponse(
                {"error": {"message": f"scripted handler raised: {exc!r}\n{traceback.format_exc()}",
                           "type": "server_error"}},
                status_code=500, headers={"x-should-retry": "false"})

        if reply.delay > 0:
            await asyncio.sleep(reply.delay)

        if reply.raw_body is not None:
            record.answered_at = time.time()
            return Response(reply.raw_body, status_code=reply.status, media_type=reply.raw_content_type,
                            headers=dict(reply.headers))

        if reply.status >= 400:
            record.status = reply.status
            headers = dict(reply.headers)
            if reply.retry_after is not None:
                headers["retry-after"] = f"{reply.retry_after:g}"
                headers["retry-after-ms"] = f"{reply.retry_after * 1000:g}"
            err = dict(reply.error_body) if reply.error_body is not None else {
                "error": {"message": f"scripted error {reply.status}", "type": "scripted_error",
                          "code": str(reply.status)}}
            record.answered_at = time.time()
            return JSONResponse(err, status_code=reply.status, headers=headers)

        completion_id = f"chatcmpl-scripted-{seq}"
        model = str(body.get("model") or (self.models[0] if self.models else "scripted"))
        if body.get("stream"):
            usage = reply.usage if reply.usage is not None else _default_usage(body, reply)
            self._accepted(received, int(usage.get("total_tokens") or 0))
            return StreamingResponse(self._stream(body, reply, completion_id, model, record),
                                     media_type="text/event-stream",
                                     headers={"cache-control": "no-cache", **reply.headers})
        payload = self._completion(body, reply, completion_id, model)
        self._accepted(received, int((payload.get("usage") or {}).get("total_tokens") or 0))
        record.answered_at = time.time()
        return JSONResponse(payload, headers=dict(reply.headers))

    @staticmethod
    def _finish_reason(reply: Reply) -> str:
        return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")

    def _completion(self, body: JSON, reply: Reply, cid: str, model: str) -> JSON:
        message: JSON = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function",
                 "function": {"name": c.name, "arguments": c.arguments_json()}}
                for c in reply.tool_calls]
        if reply.reasoning_content is not None:
            message["reasoning_content"] = reply.reasoning_content
        payload: JSON = {
            "id": cid, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish_reason(reply),
                         "logprobs": None}],
        }
        if reply.include_usage:
            payload["usage"] = dict(reply.usage) if reply.usage is not None else _default_usage(body, reply)
        return payload

    async def _stream(self, body: JSON, reply: Reply, cid: str, model: str,
                      record: RequestRecord) -> AsyncIterator[bytes]:
        created = int(time.time())

        def chunk(delta: JSON, finish_reason: str | None = None) -> bytes:
            data = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason,
                                 "logprobs": None}]}
            return f"data: {json.dumps(data)}\n\n".encode()

        async def pace() -> None:
            if reply.chunk_delay > 0:
                await asyncio.sleep(reply.chunk_delay)

        try:
            yield chunk({"role": "assistant", "content": ""})
            for part in _chunks(reply.reasoning_content or "", reply.chunk_chars):
                await pace()
                yield chunk({"reasoning_content": part})
            for part in _chunks(reply.content or "", reply.chunk_chars):
                await pace()
                yield chunk({"content": part})
            for position, call in enumerate(reply.tool_calls):
                index = 0 if reply.reuse_index_zero else position
                fragments = _chunks(call.arguments_json(), reply.chunk_chars) or [""]
                for n, frag in enumerate(fragments):
                    await pace()
                    if n == 0 or reply.repeat_tool_ids_in_chunks:
                        # OpenAI sends id/name once; llama.cpp repeats them in every chunk.
                        tc = {"index": index, "id": call.id, "type": "function",
                              "function": {"name": call.name, "arguments": frag}}
                    else:
                        tc = {"index": index, "function": {"arguments": frag}}
                    yield chunk({"tool_calls": [tc]})
            if reply.truncate_stream:
                # The connection ends cleanly but without finish_reason and without [DONE].
                return
            await pace()
            yield chunk({}, finish_reason=self._finish_reason(reply))
            wants_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            if wants_usage and reply.include_usage:
                usage = dict(reply.usage) if reply.usage is not None else _default_usage(body, reply)
                data = {"id": cid, "object": "chat.completion.chunk", "created": created,
                        "model": model, "choices": [], "usage": usage}
                yield f"data: {json.dumps(data)}\n\n".encode()
            yield b"data: [DONE]\n\n"
        finally:
            record.answered_at = time.time()


# --------------------------------------------------------------------------- CLI


def load_handler(spec: str) -> Handler:
    """``module:attr`` → a handler. ``attr`` may be a handler callable, a dict of scripts
    (→ ``conversation_script``) or a list of replies (→ ``SequenceHandler``)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise SystemExit(f"--script must be module:attr, got {spec!r}")
    obj: Any = getattr(importlib.import_module(module_name), attr)
    if isinstance(obj, Mapping):
        return conversation_script(obj)
    if isinstance(obj, (list, tuple)):
        return SequenceHandler(obj)
    if callable(obj):
        return obj
    raise SystemExit(f"{spec} is neither a handler, a dict of scripts nor a list of replies")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="OpenAI-compatible scripted server (tests)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 = a free port")
    parser.add_argument("--script", required=True, help="module:attr of the handler or scripts")
    parser.add_argument("--model", action="append", default=None, help="model id(s) to list")
    parser.add_argument("--rpm", type=int, default=None, help="enforce requests per minute (429)")
    parser.add_argument("--tpm", type=int, default=None, help="enforce tokens per minute (429)")
    parser.add_argument("--window", type=float, default=60.0, help="enforcing window, seconds")
    args = parser.parse_args(argv)
    server = ScriptedServer(load_handler(args.script), host=args.host, port=args.port,
                            models=args.model or ["scripted"], rpm=args.rpm, tpm=args.tpm,
                            window_s=args.window)
    server.serve_forever(announce=True)


if __name__ == "__main__":
    # Run the copy imported as `tests.scripted_server`, not this `__main__` copy: the script
    # module builds its replies with `tests.scripted_server.Reply`, a different class.
    from tests.scripted_server import main as _main

    _main()
