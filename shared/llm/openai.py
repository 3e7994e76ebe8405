"""``OpenAILLM``: the ``LLM`` protocol on the official ``openai`` client (3.x, over ``httpx2``).

Works with OpenAI and OpenAI-compatible servers (vLLM, llama.cpp, DeepSeek, …). What callers
may rely on:

* ``chat()`` returns an ``LLMResult`` whose message carries ``content``, ``tool_calls``
  (arguments parsed from JSON; unparseable ⇒ ``{"_raw": "<string>"}``) and
  ``reasoning_content`` (the provider's extra field, when it sends one). ``usage`` is a dict
  with ``prompt_tokens``, ``completion_tokens``, ``total_tokens`` and, when reported,
  ``cache_read_input_tokens``; ``{}`` when the server reports none.
* ``stream_chat()`` yields ``StreamChunk(delta_content=…)`` / ``StreamChunk(delta_reasoning=…)``
  as they arrive, then exactly one last chunk with ``finish_reason``, the assembled
  ``tool_calls`` (or None) and ``usage`` (None when the server ignored ``include_usage``).
  A stream that ends without a finish reason raises ``StreamIncomplete``.
* Retries are the openai client's own (``max_retries``; 408/409/429/5xx and connection
  errors, honouring ``Retry-After``); other 4xx are never retried. A final failure raises
  ``LLMError`` naming the model and the HTTP status (``.status_code`` attribute, None for
  connection errors / timeouts), with the openai exception as ``__cause__``.
* Parameters left ``None`` are not sent at all.
* With ``reactq.shared.llm.base.ALLOW_REAL_LLM = False`` (unit tests) any call to a non-loopback
  ``base_url`` raises ``ConfigError`` before a byte is sent.
* The API key never appears in ``repr()``/``str()``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import weakref
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from pydantic import SecretStr

from reactq.shared.errors import ConfigError, LLMError, StreamIncomplete
from reactq.shared.llm.scrub import describe_body, scrub
from reactq.shared.llm import base as llm_base
from reactq.shared.llm.shapes import tool_results_as_user
from reactq.shared.models import ChatMessage, LLMResult, StreamChunk, ToolCallRequest

__all__ = ["OpenAILLM", "is_loopback_url", "parse_arguments", "to_openai_message",
           "ToolCallAssembler"]

# Local OpenAI-compatible servers (llama.cpp, vLLM without --api-key) accept any key, but
# the openai client refuses to start without one.
_PLACEHOLDER_KEY = "sk-no-key-required"


def is_loopback_url(base_url: str | None) -> bool:
    """True when ``base_url`` points at this machine (127.0.0.0/8, ::1, localhost)."""
    if not base_url:
        return False  # None = api.openai.com
    host = urlsplit(base_url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_arguments(raw: str | None) -> dict[str, Any]:
    """Tool-call arguments from their JSON text: ``""``/None ⇒ ``{}``; anything that is not a
    JSON object ⇒ ``{"_raw": raw}`` (so the engine can report it back to the model)."""
    if raw is None or not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"_raw": raw}


def _arguments_json(arguments: dict[str, Any]) -> str:
    # Arguments that failed to parse go back verbatim: the model should see what it sent.
    if set(arguments) == {"_raw"} and isinstance(arguments["_raw"], str):
        return arguments["_raw"]
    return json.dumps(arguments, ensure_ascii=False)


def to_openai_message(message: ChatMessage) -> dict[str, Any]:
    """One ``ChatMessage`` as an OpenAI chat message dict.

    ``pinned`` is never sent; None fields are dropped; vision content arrays pass through;
    assistant ``reasoning_content`` is sent back (providers such as DeepSeek require it on
    tool-call turns; others ignore the extra field)."""
    out: dict[str, Any] = {"role": message.role}
    # Always send content: llama.cpp's function-calling template fails (HTTP 500) on an
    # assistant tool-call turn without it, and "" is what every server accepts.
    out["content"] = message.content if message.content is not None else ""
    if message.role == "tool":
        if message.tool_call_id is not None:
            out["tool_call_id"] = message.tool_call_id
        # `name` is not part of OpenAI's tool-message schema; strict servers reject it.
    elif message.name is not None:
        out["name"] = message.name
    if message.role == "assistant":
        if message.tool_calls:
            out["tool_calls"] = [
                {"id": tc.id, "type": "function",
                 "function": {"name": tc.name, "arguments": _arguments_json(tc.arguments)}}
                for tc in message.tool_calls
            ]
        if message.reasoning_content is not None:
            out["reasoning_content"] = message.reasoning_content
    return out


def _extra(obj: Any, key: str) -> Any:
    """A field the openai types do not declare (e.g. ``reasoning_content``)."""
    extra = getattr(obj, "model_extra", None) or {}
    if key in extra:
        return extra[key]
    return getattr(obj, key, None)


def _reasoning_of(obj: Any) -> str | None:
    # DeepSeek / llama.cpp / older vLLM say `reasoning_content`; OpenRouter and newer vLLM `reasoning`.
    for key in ("reasoning_content", "reasoning"):
        value = _extra(obj, key)
        if isinstance(value, str):
            return value
    return None


def _usage_dict(usage: Any) -> dict[str, Any]:
    if usage is None:
        return {}
    out: dict[str, Any] = {
        "prompt_tokens": int(getattr(usage, "prompt_tokens", 0) or 0),
        "completion_tokens": int(getattr(usage, "completion_tokens", 0) or 0),
        "total_tokens": int(getattr(usage, "total_tokens", 0) or 0),
    }
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    if cached is not None:
        out["cache_read_input_tokens"] = int(cached)
    return out


def _retry_after(exc: BaseException) -> float | None:
    """Seconds from a ``Retry-After`` / ``retry-after-ms`` header of an HTTP error, if any."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            return max(0.0, float(raw) * scale)
        except ValueError:
            continue  # an HTTP date: rare from LLM providers; treated as absent
    return None


@dataclass
class _Slot:
    index: int
    order: int
    id: str = ""
    name: str = ""
    parts: list[str] = field(default_factory=list)


class ToolCallAssembler:
    """Assembles streamed tool-call fragments into ``ToolCallRequest``s (SPEC §3 item 8).

    Fragments are grouped by ``index``. ``id`` and ``name`` are taken once per call (llama.cpp
    repeats them in every chunk; concatenating would give ``call_1call_1``). A *different* id
    or name on an index already in use starts a new call there (providers that put every
    call on index 0); later argument-only fragments go to that newest call. Output is sorted
    by index, then arrival; calls without an id get ``call_<n>``.
    """

    def __init__(self) -> None:
        self._slots: list[_Slot] = []
        self._current: dict[int, _Slot] = {}

    def add(self, index: int | None, id: str | None, name: str | None, arguments: str | None) -> None:
        """Feed one fragment (as found in ``delta.tool_calls[i]``)."""
        idx = index if index is not None else 0
        slot = self._current.get(idx)
        starts_new = slot is None or (
            (bool(id) and bool(slot.id) and id != slot.id)
            or (bool(name) and bool(slot.name) and name != slot.name)
        )
        if starts_new:
            slot = _Slot(index=idx, order=len(self._slots))
            self._slots.append(slot)
            self._current[idx] = slot
        assert slot is not None
        if id and not slot.id:
            slot.id = id
        if name and not slot.name:
            slot.name = name
        if arguments:
            slot.parts.append(arguments)

    def result(self) -> list[ToolCallRequest]:
        """The assembled calls (empty list when none were streamed)."""
        ordered = sorted(self._slots, key=lambda s: (s.index, s.order))
        return [
            ToolCallRequest(id=s.id or f"call_{n}", name=s.name,
                            arguments=parse_arguments("".join(s.parts)))
            for n, s in enumerate(ordered)
        ]


class OpenAILLM:
    """An OpenAI(-compatible) chat model.

    ``base_url=None`` means api.openai.com; ``api_key=None`` sends a placeholder key (fine for
    local servers). ``max_tokens`` / ``temperature`` given here are defaults for every call
    (a call's own value wins). One ``AsyncOpenAI`` client is kept per event loop, because
    its connection pool belongs to the loop that opened it (Celery steps may each run their
    own ``asyncio.run``).
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        abilities: Mapping[str, bool] | None = None,
        context_size: int | None = None,
        max_retries: int = 2,
        timeout: float = 60.0,
        name: str | None = None,
        extra_headers: Mapping[str, str] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        tool_results_as: str = "tool",
    ) -> None:
        self.model = model
        self.tool_results_as = tool_results_as
        self.name = name or model
        self.base_url = base_url
        self.abilities: dict[str, bool] = dict(abilities or {})
        self.context_size = context_size
        self.max_retries = max_retries
        self.timeout = timeout
        self.default_max_tokens = max_tokens
        self.default_temperature = temperature
        self._api_key = SecretStr(api_key) if api_key else None
        self._extra_headers = dict(extra_headers or {})
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, openai.AsyncOpenAI] = (
            weakref.WeakKeyDictionary())
        #: False when flow control (``reactq.shared.flow``) handles 429 / 503 for every worker:
        #: the SDK's own per-call retry would otherwise hammer a provider that said stop.
        self.retry_rate_limits = True

    def __repr__(self) -> str:
        return (f"OpenAILLM(name={self.name!r}, model={self.model!r}, base_url={self.base_url!r}, "
                f"abilities={self.abilities!r}, context_size={self.context_size!r})")

    __str__ = __repr__

    # -- plumbing -------------------------------------------------------------

    def _check_allowed(self) -> None:
        # Read the module attribute at call time: tests flip it after import.
        if not llm_base.ALLOW_REAL_LLM and not is_loopback_url(self.base_url):
            raise ConfigError(
                f"model {self.name!r}: real LLM endpoints are disabled (ALLOW_REAL_LLM=False) and "
                f"base_url {self.base_url or 'https://api.openai.com/v1'!r} is not a loopback address")

    def _client(self) -> openai.AsyncOpenAI:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = openai.AsyncOpenAI(
                api_key=self._api_key.get_secret_value() if self._api_key else _PLACEHOLDER_KEY,
                base_url=self.base_url,
                max_retries=self.max_retries,
                timeout=self.timeout,
                default_headers=self._extra_headers or None,
                # Our own pool instead of the SDK's default wrapper: that wrapper's __del__
                # schedules aclose() on whatever loop is running when it is collected, which
                # fails noisily ("Event loop is closed") once its own loop is gone.
                http_client=openai.DefaultAsyncHttpxClient(
                    timeout=self.timeout, event_hooks={"response": [self._no_rate_limit_retry]}),
            )
            self._clients[loop] = client
        return client

    async def _no_rate_limit_retry(self, response: Any) -> None:
        # The SDK obeys the (non-standard) `x-should-retry` header before its own rules.
        if not self.retry_rate_limits and response.status_code in (429, 503):
            response.headers["x-should-retry"] = "false"

    async def aclose(self) -> None:
        """Close the current event loop's HTTP client (optional; idempotent)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        client = self._clients.pop(loop, None)
        if client is not None:
            await client.close()

    def _request(self, messages: list[ChatMessage], **params: Any) -> dict[str, Any]:
        if params.get("temperature") is None:
            params["temperature"] = self.default_temperature
        if params.get("max_tokens") is None:
            params["max_tokens"] = self.default_max_tokens
        wire = [to_openai_message(m) for m in messages]
        if self.tool_results_as == "user":  # templates that drop tool messages (llm/shapes.py)
            wire = tool_results_as_user(wire)
        request: dict[str, Any] = {"model": self.model, "messages": wire}
        # Never send None: strict servers reject `tools: null`, and None would override
        # server-side defaults.
        request.update({k: v for k, v in params.items() if v is not None})
        return request

    async def _post(self, request: dict[str, Any], *, stream: bool) -> Any:
        """POST the request dict as built, with the client's retries and error types.

        ``chat.completions.create(**request)`` would first walk the whole request against
        the SDK's TypedDict annotations, which costs O(history) CPU on every call (≈ 10 ms of
        ≈ 18 ms for a 25-message request, measured in ``bench/``); the dict is already in
        wire form, so it goes out as it is.
        """
        return await self._client().post(
            "/chat/completions", body=request, cast_to=ChatCompletion, stream=stream,
            stream_cls=openai.AsyncStream[ChatCompletionChunk],
        )

    def _scrub(self, text: str) -> str:
        return scrub(text, [self._api_key.get_secret_value() if self._api_key else None])

    def _bad_reply(self, cause: str) -> LLMError:
        where = self.base_url or "api.openai.com"
        return LLMError(self._scrub(f"model {self.name!r} ({self.model} at {where}) sent {cause}"))

    def _wrap(self, exc: BaseException) -> LLMError:
        """An ``LLMError`` naming the model; ``exc`` (kept as the cause) is scrubbed in place,
        because a traceback prints the cause's text too."""
        exc.args = tuple(self._scrub(a) if isinstance(a, str) else a for a in exc.args)
        if isinstance(getattr(exc, "message", None), str):
            exc.message = self._scrub(exc.message)  # type: ignore[attr-defined]
        if hasattr(exc, "body"):
            exc.body = None  # type: ignore[attr-defined]  # the raw reply: may echo the key
        where = self.base_url or "api.openai.com"
        status: int | None = None
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            msg = (f"model {self.name!r} ({self.model} at {where}) failed with HTTP {status}: "
                   f"{exc.message}")
            ctype = exc.response.headers.get("content-type", "")
            if "json" not in ctype:  # an HTML error page from a proxy says nothing useful as is
                msg += f" — {describe_body(exc.response.text, ctype)}"
        elif isinstance(exc, openai.APITimeoutError):
            msg = f"model {self.name!r} ({self.model} at {where}) timed out after {self.timeout:g}s"
        elif isinstance(exc, openai.APIConnectionError):
            msg = f"model {self.name!r} ({self.model} at {where}) connection failed: {exc}"
        else:
            msg = f"model {self.name!r} ({self.model} at {where}) failed: {exc}"
        err = LLMError(self._scrub(msg))
        err.status_code = status  # type: ignore[attr-defined]  # survives pickling (in __dict__)
        err.retry_after = _retry_after(exc)  # type: ignore[attr-defined]
        return err

    # -- the LLM protocol -----------------------------------------------------

    async def chat(
        self,
        messages: list[ChatMessage],
        *,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: Any = None,
        response_format: dict[str, Any] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        reasoning_effort: str | None = None,
    ) -> LLMResult:
        """One non-streamed completion (see the module docstring for what it guarantees)."""
        self._check_allowed()
        request = self._request(messages, tools=tools, tool_choice=tool_choice,
                                response_format=response_format, temperature=temperature,
                                max_tokens=max_tokens, reasoning_effort=reasoning_effort)
        try:
            completion = await self._post(request, stream=False)
        except openai.APIError as exc:
            raise self._wrap(exc) from exc
        except ValueError as exc:  # a body that is not JSON, or JSON cut short
            raise self._bad_reply(f"a reply that is not JSON: {type(exc).__name__} ({exc})") from None
        if isinstance(completion, str):  # the SDK hands back the text it could not parse
            raise self._bad_reply(describe_body(completion))
        if not isinstance(completion, ChatCompletion):
            raise self._bad_reply(f"a reply that is not a chat completion ({type(completion).__name__})")
        if not completion.choices:
            raise LLMError(f"model {self.name!r} ({self.model}) returned no choices")
        msg = completion.choices[0].message
        calls: list[ToolCallRequest] = []
        for n, tc in enumerate(msg.tool_calls or []):
            fn = getattr(tc, "function", None)
            if fn is None:  # a non-function ("custom") tool call: nothing the engine can run
                continue
            calls.append(ToolCallRequest(id=tc.id or f"call_{n}", name=fn.name,
                                         arguments=parse_arguments(fn.arguments)))
        message = ChatMessage(role="assistant", content=msg.content,
                              tool_calls=calls or None, reasoning_content=_reasoning_of(msg))
        return LLMResult(message=message, usage=_usage_dict(completion.usage))

    def stream_chat(
        self,
        messages: list[ChatMessage],
        *,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: Any = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> AsyncIterator[StreamChunk]:
        """A streamed completion. Checks ``ALLOW_REAL_LLM`` now (not at first iteration)."""
        self._check_allowed()
        request = self._request(messages, tools=tools, tool_choice=tool_choice,
                                temperature=temperature, max_tokens=max_tokens)
        request["stream"] = True
        request["stream_options"] = {"include_usage": True}
        return self._stream(request)

    async def _stream(self, request: dict[str, Any]) -> AsyncIterator[StreamChunk]:
        try:
            stream = await self._post(request, stream=True)
        except openai.APIError as exc:
            raise self._wrap(exc) from exc
        ctype = stream.response.headers.get("content-type", "")
        if "event-stream" not in ctype:
            body = (await stream.response.aread()).decode("utf-8", "replace")
            await stream.close()
            raise self._bad_reply(f"{describe_body(body, ctype)} (asked for a stream)")
        assembler = ToolCallAssembler()
        finish_reason: str | None = None
        usage: dict[str, Any] | None = None
        try:
            async for chunk in stream:
                if chunk.usage is not None:
                    usage = _usage_dict(chunk.usage)
                for choice in chunk.choices:
                    if choice.index not in (0, None):
                        continue  # n > 1 is never requested
                    delta = choice.delta
                    if delta is not None:
                        reasoning = _reasoning_of(delta)
                        if reasoning:
                            yield StreamChunk(delta_reasoning=reasoning)
                        if delta.content:
                            yield StreamChunk(delta_content=delta.content)
                        for tc in delta.tool_calls or []:
                            fn = tc.function
                            assembler.add(tc.index, tc.id, fn.name if fn else None,
                                          fn.arguments if fn else None)
                    if choice.finish_reason:
                        finish_reason = choice.finish_reason
        except openai.APIError as exc:
            raise self._wrap(exc) from exc
        finally:
            await stream.close()
        if finish_reason is None:
            # The openai client treats a connection that ends before [DONE] as a normal end.
            raise StreamIncomplete(
                f"model {self.name!r} ({self.model}): stream ended without a finish_reason")
        calls = assembler.result()
        yield StreamChunk(finish_reason=finish_reason, tool_calls=calls or None, usage=usage)
