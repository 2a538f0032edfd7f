"""The OpenAI-compatible chat endpoint shared by the model-backed providers: one POST per
request with a strict JSON-schema response format, the failure classes the queue acts on
(retryable, permanent, malformed), and a cost-ledger record for every call (never text)."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, Self, TypeVar

import httpx

from services.pipeline.domain.work import StageFailure
from services.platform.provider_http import error_message, retry_after

log = logging.getLogger(__name__)
T = TypeVar("T")

Outcome = Literal[
    "ok", "rate_limited", "server_error", "client_error", "timeout", "unreachable", "malformed", "refused",
]


@dataclass(frozen=True, slots=True)
class ChatCall:
    """One billable chat request, for the cost ledger. Never carries the text."""

    provider: str
    model: str
    tokens_in: int
    tokens_out: int
    latency_ms: float
    outcome: Outcome


OnCall = Callable[[ChatCall], Awaitable[None] | None]


def strict_object(properties: dict[str, Any]) -> dict[str, Any]:
    """A strict-mode object: every property required, nothing else allowed."""
    return {"type": "object", "additionalProperties": False, "required": list(properties), "properties": properties}


class _Malformed(Exception):
    pass


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _usage(payload: Any) -> tuple[int, int]:
    usage = payload.get("usage") if isinstance(payload, dict) else None
    if not isinstance(usage, dict):
        return 0, 0
    return _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))


def _message(payload: Any) -> dict[str, Any]:
    choices = payload.get("choices") if isinstance(payload, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _Malformed("no 'choices'")
    choice = choices[0]
    if choice.get("finish_reason") == "length":
        raise _Malformed("the reply was cut off (finish_reason=length)")
    message = choice.get("message")
    if not isinstance(message, dict):
        raise _Malformed("no 'message' in the first choice")
    return message


def _validate(value: Any, schema: dict[str, Any], path: str) -> None:
    """Check ``value`` against the subset of JSON Schema the providers' strict schemas use:
    closed objects (an unknown key breaks them), every property present, enums enforced."""
    if "anyOf" in schema:
        for option in schema["anyOf"]:
            try:
                _validate(value, option, path)
                return
            except _Malformed:
                continue
        raise _Malformed(f"{path} matches none of the allowed shapes")
    types = schema["type"]
    allowed: list[str] = types if isinstance(types, list) else [types]
    if not any(_is_type(value, t) for t in allowed):
        raise _Malformed(f"{path} should be {' or '.join(allowed)}, got {type(value).__name__}")
    if "enum" in schema and value not in schema["enum"]:
        raise _Malformed(f"{path} is {str(value)[:40]!r}, not one of the allowed values")
    if isinstance(value, dict) and "properties" in schema:
        missing = [key for key in schema["required"] if key not in value]
        if missing:
            raise _Malformed(f"{path} lacks {', '.join(missing)}")
        extra = [str(key)[:40] for key in value if key not in schema["properties"]]
        if extra and schema.get("additionalProperties") is False:
            raise _Malformed(f"{path} has unknown key(s) {', '.join(extra)}")
        for key, sub in schema["properties"].items():
            _validate(value[key], sub, f"{path}.{key}")
    if isinstance(value, list) and "items" in schema:
        for index, element in enumerate(value):
            _validate(element, schema["items"], f"{path}[{index}]")


def _is_type(value: Any, name: str) -> bool:
    if name == "object":
        return isinstance(value, dict)
    if name == "array":
        return isinstance(value, list)
    if name == "string":
        return isinstance(value, str)
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "null":
        return value is None
    return False


class ChatEndpoint:
    """``POST {base_url}/chat/completions`` with a bearer key and a deadline."""

    def __init__(self, base_url: str, api_key: str, model: str, *, provider: str, timeout_s: float,
                 on_call: OnCall | None, transport: httpx.AsyncBaseTransport | None) -> None:
        if not base_url:
            raise ValueError("base_url is required")
        if not model:
            raise ValueError("model is required")
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.provider = provider
        self.timeout_s = timeout_s
        self.on_call = on_call
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(timeout_s), headers=headers, transport=transport)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _record(self, started: float, outcome: Outcome, tokens: tuple[int, int] = (0, 0)) -> None:
        if self.on_call is None:
            return
        call = ChatCall(self.provider, self.model, tokens[0], tokens[1],
                        round((time.perf_counter() - started) * 1000, 3), outcome)
        try:
            result = self.on_call(call)
            if inspect.isawaitable(result):
                await result
        except Exception:  # the ledger must not turn a good answer into a failure
            log.exception("cost ledger callback failed")

    async def complete(self, body: dict[str, Any], check: Callable[[Any], T], *, what: str, refusal: str) -> T:
        """The reply content, parsed and checked by ``check`` (which raises :class:`_Malformed`),
        or a :class:`StageFailure` the queue knows how to treat."""
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.timeout_s):
                response = await self._client.post(f"{self.base_url}/chat/completions", json=body)
                await response.aread()
        except (TimeoutError, httpx.TimeoutException):
            await self._record(started, "timeout")
            raise StageFailure("provider_unavailable", f"chat request timed out after {self.timeout_s:g} s",
                               permanent=False) from None
        except httpx.HTTPError as exc:
            await self._record(started, "unreachable")
            raise StageFailure("provider_unavailable", f"chat endpoint unreachable: {type(exc).__name__}",
                               permanent=False) from None

        status = response.status_code
        if status in (408, 429) or status >= 500:
            outcome: Outcome = "rate_limited" if status == 429 else "server_error"
            await self._record(started, outcome)
            raise StageFailure("provider_unavailable", f"chat endpoint answered HTTP {status}", permanent=False,
                               retry_after_s=retry_after(response))
        if not 200 <= status < 300:
            await self._record(started, "client_error")
            detail = f"HTTP {status} {error_message(response)}".rstrip()
            raise StageFailure("provider_rejected", f"chat endpoint refused the request: {detail}", permanent=True)

        try:
            payload = response.json()
        except ValueError:
            await self._record(started, "malformed")
            raise StageFailure("extraction_failed", "chat reply is not JSON", permanent=False) from None
        tokens = _usage(payload)
        try:
            message = _message(payload)
            if isinstance(message.get("refusal"), str) and message["refusal"]:
                await self._record(started, "refused", tokens)
                raise StageFailure("provider_rejected", refusal, permanent=True)
            content = message.get("content")
            if not isinstance(content, str):
                raise _Malformed("the message has no text content")
            try:
                reply = json.loads(content)
            except ValueError:
                raise _Malformed("the message content is not JSON") from None
            checked = check(reply)
        except _Malformed as exc:
            await self._record(started, "malformed", tokens)
            raise StageFailure("extraction_failed", f"malformed {what} reply: {exc}", permanent=False) from None
        await self._record(started, "ok", tokens)
        return checked


class ChatProvider:
    """What the model-backed providers share: one :class:`ChatEndpoint`, closed with them,
    and a representation that never shows the key."""

    name: str = "openai"

    def __init__(self, base_url: str, api_key: str, model: str, *, timeout_s: float, on_call: OnCall | None,
                 transport: httpx.AsyncBaseTransport | None) -> None:
        self.model = model
        self._chat = ChatEndpoint(base_url, api_key, model, provider=self.name, timeout_s=timeout_s,
                                  on_call=on_call, transport=transport)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self._chat.base_url!r}, model={self.model!r})"

    async def aclose(self) -> None:
        await self._chat.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
