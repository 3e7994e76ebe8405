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

The wire format both ways is in ``messages.py``, the streamed tool calls are put together by
``assembly.py``, and provider failures become ``LLMError`` in ``failures.py``.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import AsyncIterator, Mapping
from typing import Any, Unpack

import openai
from openai.types.chat import ChatCompletionChunk
from pydantic import SecretStr

from reactq.shared.errors import LLMError, StreamIncomplete
from reactq.shared.llm.assembly import ToolCallAssembler
from reactq.shared.llm.base import ChatOptions, StreamOptions, check_allowed
from reactq.shared.llm.failures import wrap
from reactq.shared.llm.messages import reasoning_of, reply_message, to_openai_message, usage_dict
from reactq.shared.llm.scrub import describe_body, scrub
from reactq.shared.llm.pricing import Price, priced
from reactq.shared.llm.shapes import tool_results_as_user
from reactq.shared.models import ChatMessage, LLMResult, StreamChunk

__all__ = ["OpenAILLM"]


def _json_or_none(text: str) -> Any:
    """A body that is JSON although its content type did not say so (some gateways)."""
    try:
        return json.loads(text)
    except ValueError:
        return None


def _shape(value: Any) -> str:
    if isinstance(value, dict):
        return "a JSON object with " + (", ".join(sorted(map(str, value))[:6]) or "no fields")
    return type(value).__name__

# Local OpenAI-compatible servers (llama.cpp, vLLM without --api-key) accept any key, but
# the openai client refuses to start without one.
_PLACEHOLDER_KEY = "sk-no-key-required"


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
        json_schema_as: str = "json_schema",
        extra_body: Mapping[str, Any] | None = None,
        max_tool_turns: int | None = None,
        answer_synthesis: bool = True,
        price: Price | None = None,
    ) -> None:
        self.model = model
        #: USD per million tokens (the registry entry's ``price``): every usage carries ``cost_usd``.
        self.price = price
        self.tool_results_as = tool_results_as
        self.json_schema_as = json_schema_as
        self.extra_body: dict[str, Any] = dict(extra_body or {})
        # Read by the engine (llm/base.py: max_tool_turns(), answer_synthesis()).
        self.max_tool_turns = max_tool_turns
        self.answer_synthesis = answer_synthesis
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
        request: dict[str, Any] = {**self.extra_body, "model": self.model, "messages": wire}
        # Never send None: strict servers reject `tools: null`, and None would override
        # server-side defaults.
        request.update({k: v for k, v in params.items() if v is not None})
        fmt = request.get("response_format")
        if self.json_schema_as == "json_object" and isinstance(fmt, dict) and fmt.get("type") == "json_schema":
            # llama-cpp-python's server takes the schema as {"type": "json_object", "schema": …}.
            request["response_format"] = {"type": "json_object", "schema": fmt["json_schema"]["schema"]}
        return request

    async def _post(self, request: dict[str, Any], *, stream: bool) -> Any:
        """POST the request dict as built, with the client's retries and error types.

        ``chat.completions.create(**request)`` would first walk the whole request against
        the SDK's TypedDict annotations, which costs O(history) CPU on every call (≈ 10 ms of
        ≈ 18 ms for a 25-message request, measured in ``bench/``); the dict is already in
        wire form, so it goes out as it is. A non-streamed reply comes back as its JSON
        (``cast_to=object``) and is read once, into reactq's own message (``reply_message``),
        not first into the SDK's ``ChatCompletion`` models (≈ 0.2 ms a call).
        """
        return await self._client().post(
            "/chat/completions", body=request, cast_to=ChatCompletionChunk if stream else object,
            stream=stream, stream_cls=openai.AsyncStream[ChatCompletionChunk],
        )

    def _scrub(self, text: str) -> str:
        return scrub(text, [self._api_key.get_secret_value() if self._api_key else None])

    @property
    def _who(self) -> str:
        return f"model {self.name!r} ({self.model} at {self.base_url or 'api.openai.com'})"

    def _bad_reply(self, cause: str) -> LLMError:
        return LLMError(self._scrub(f"{self._who} sent {cause}"))

    def _wrap(self, exc: BaseException) -> LLMError:
        return wrap(exc, self._who, timeout=self.timeout, scrub=self._scrub)

    # -- the LLM protocol -----------------------------------------------------

    async def chat(self, messages: list[ChatMessage], **options: Unpack[ChatOptions]) -> LLMResult:
        """One non-streamed completion (see the module docstring for what it guarantees)."""
        check_allowed(self.name, self.base_url)
        request = self._request(messages, **options)
        try:
            completion = await self._post(request, stream=False)
        except openai.APIError as exc:
            raise self._wrap(exc) from exc
        except ValueError as exc:  # a body that is not JSON, or JSON cut short
            raise self._bad_reply(f"a reply that is not JSON: {type(exc).__name__} ({exc})") from None
        if isinstance(completion, str):  # not labelled JSON: the SDK hands back the text
            completion = _json_or_none(completion) or completion
        if isinstance(completion, str):
            raise self._bad_reply(describe_body(completion))
        choices = completion.get("choices") if isinstance(completion, dict) else None
        if not isinstance(choices, list):
            raise self._bad_reply(f"a reply that is not a chat completion ({_shape(completion)})")
        if not choices:
            raise LLMError(f"model {self.name!r} ({self.model}) returned no choices")
        message = choices[0].get("message") if isinstance(choices[0], dict) else None
        if not isinstance(message, dict):
            raise self._bad_reply("a chat completion whose first choice has no message")
        return LLMResult(message=reply_message(message), usage=priced(usage_dict(completion.get("usage")), self.price))

    def stream_chat(self, messages: list[ChatMessage],
                    **options: Unpack[StreamOptions]) -> AsyncIterator[StreamChunk]:
        """A streamed completion. Checks ``ALLOW_REAL_LLM`` now (not at first iteration)."""
        check_allowed(self.name, self.base_url)
        request = self._request(messages, **options)
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
                    usage = priced(usage_dict(chunk.usage), self.price)
                for choice in chunk.choices:
                    if choice.index not in (0, None):
                        continue  # n > 1 is never requested
                    delta = choice.delta
                    if delta is not None:
                        reasoning = reasoning_of(delta)
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
