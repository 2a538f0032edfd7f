"""The gateway, as the people's commands see it: JSON routes, Connect streams, and one
error type that says what went wrong in a line and which exit code it deserves."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from services.platform.envelopes import END_STREAM, end_stream_error, envelope, read_frames

DEFAULT_URL = "http://127.0.0.1:8000"
USAGE, FAILED = 2, 1


class CommandError(Exception):
    """One clear line for the person, and the exit code (1 the request failed, 2 usage)."""

    def __init__(self, message: str, code: int = FAILED) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Remote:
    url: str
    key: str | None
    timeout_s: float = 60.0

    @classmethod
    def from_args(cls, api_url: str | None, key: str | None) -> Remote:
        return cls((api_url or os.environ.get("TESTAMENT_API_URL") or DEFAULT_URL).rstrip("/"),
                   key or os.environ.get("TESTAMENT_API_KEY") or None)

    @property
    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.key}"} if self.key else {}

    def call(self, method: str, path: str, *, json_body: Any = None, params: Any = None,
             content: bytes | None = None, headers: Mapping[str, str] | None = None) -> Any:
        try:
            reply = httpx.request(method, f"{self.url}{path}", json=json_body, params=params, content=content,
                                  headers={**self.headers, **(headers or {})}, timeout=self.timeout_s)
        except httpx.HTTPError as exc:
            raise CommandError(f"cannot reach Testament at {self.url} ({type(exc).__name__}); is it running? "
                               "(`make run`, or set --api-url / TESTAMENT_API_URL)") from None
        if reply.status_code >= 400:
            raise CommandError(f"{method} {path}: {reply.status_code} {_detail(reply)}")
        return reply.json() if reply.content else None

    def stream(self, rpc: str, request: Mapping[str, Any], *, timeout_s: float | None = None) -> Iterator[Any]:
        """A server stream through the gateway's Connect face: each message as JSON."""
        payload = json.dumps(request).encode()
        headers = {**self.headers, "content-type": "application/connect+json"}
        if timeout_s is not None:
            headers["connect-timeout-ms"] = str(max(1, int(timeout_s * 1000)))
        try:
            with httpx.stream("POST", f"{self.url}/{rpc}", content=envelope(payload),
                              headers=headers, timeout=None if timeout_s is None else timeout_s + 10) as reply:
                if reply.status_code != 200:
                    raise CommandError(f"{rpc}: {reply.status_code} {reply.read().decode(errors='replace')[:200]}")
                for flags, body in read_frames(reply.iter_bytes()):
                    if flags & END_STREAM:
                        error = end_stream_error(body)
                        if error:
                            raise CommandError(f"{rpc}: {error.get('code')}: {error.get('message')}")
                        return
                    yield json.loads(body)
        except httpx.HTTPError as exc:
            raise CommandError(f"cannot reach Testament at {self.url} ({type(exc).__name__})") from None


def _detail(reply: httpx.Response) -> str:
    try:
        detail = reply.json().get("detail", reply.text)
    except ValueError:
        return reply.text[:200]
    if isinstance(detail, list):  # the 422 validation list
        return "; ".join(f"{'.'.join(str(p) for p in d.get('loc', [])[1:]) or 'request'}: {d.get('msg')}"
                         for d in detail)
    if isinstance(detail, dict):
        return f"{detail.get('code')}: {detail.get('message', '')}".rstrip(": ")
    return str(detail)
