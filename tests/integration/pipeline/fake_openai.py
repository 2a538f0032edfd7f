"""A scripted stand-in for an OpenAI-compatible server, over real HTTP.

It listens on 127.0.0.1 (a free port) in a background thread and answers
``POST /v1/embeddings`` and ``POST /v1/chat/completions``. Each request (of either
kind) takes the next mode from the script (``script("rate_limited", "ok")``); once
the script runs out it answers "ok".

Modes: ``ok`` (vectors in order), ``shuffled`` (same vectors, ``data`` in
reverse order with true ``index`` values), ``rate_limited`` (429 with
Retry-After), ``server_error`` (500), ``bad_request`` (400 with an OpenAI error
body), ``malformed`` (200 with a body that is not JSON), ``bad_shape`` (200 JSON
without ``data``), ``wrong_dimension`` (vectors one element short) and ``hang``
(accepts, never answers until the server stops), ``unauthorized`` (401) and
``refusal`` (chat only: a message with ``refusal`` and no content).

Chat replies: an "ok" chat request answers with the next queued message content
(:meth:`reply_with`; a ``str`` is sent verbatim, anything else as JSON), or ``"{}"``
when none is queued, with ``usage`` counting the words in and out.

The vector for a text is a fixed function of the text (:meth:`vector_for`),
deliberately not unit length, so a client's normalisation can be checked.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

Mode = Literal[
    "ok", "shuffled", "rate_limited", "server_error", "bad_request", "malformed", "bad_shape", "wrong_dimension",
    "hang", "unauthorized", "refusal",
]
CHAT_PATH = "/v1/chat/completions"
EMBEDDINGS_PATH = "/v1/embeddings"


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: Any
    mode: Mode


@dataclass
class FakeOpenAI:
    dimension: int = 8
    hang_limit_s: float = 30.0
    requests: list[RecordedRequest] = field(default_factory=list)
    _script: deque[Mode] = field(default_factory=deque)
    _chat_replies: deque[Any] = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _release: threading.Event = field(default_factory=threading.Event)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    # ------------------------------------------------------------- control

    @property
    def port(self) -> int:
        assert self._server is not None, "server not started"
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *modes: Mode) -> None:
        with self._lock:
            self._script.clear()
            self._script.extend(modes)

    def reply_with(self, *contents: Any) -> None:
        """Queue chat message contents (``str`` verbatim, anything else JSON-encoded), one per "ok" chat request."""
        with self._lock:
            self._chat_replies.clear()
            self._chat_replies.extend(contents)

    def reset(self) -> None:
        with self._lock:
            self._script.clear()
            self._chat_replies.clear()
            self.requests.clear()

    def vector_for(self, text: str) -> list[float]:
        raw = hashlib.blake2b(text.encode("utf-8"), digest_size=self.dimension).digest()
        return [(b - 127.5) / 10.0 for b in raw]

    def start(self) -> FakeOpenAI:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                fake._handle(self)

        self._release.clear()
        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        server.block_on_close = False
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="fake-openai", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._release.set()  # let hanging handlers finish
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------- serving

    def _next_mode(self) -> Mode:
        with self._lock:
            return self._script.popleft() if self._script else "ok"

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        if handler.path not in (EMBEDDINGS_PATH, CHAT_PATH):
            self._send(handler, 404, {"error": {"message": "not found", "type": "invalid_request_error"}})
            return
        mode = self._next_mode()
        try:
            body: Any = json.loads(raw or b"null")
        except ValueError:
            body = None
        with self._lock:
            self.requests.append(RecordedRequest(handler.path, dict(handler.headers.items()), body, mode))

        if mode == "hang":
            self._release.wait(self.hang_limit_s)
            handler.close_connection = True
            return  # close without answering
        if mode == "rate_limited":
            self._send(handler, 429, {"error": {"message": "rate limited", "type": "rate_limit_error"}},
                       {"Retry-After": "2"})
            return
        if mode == "server_error":
            self._send(handler, 500, {"error": {"message": "boom", "type": "server_error"}})
            return
        if mode == "unauthorized":
            self._send(handler, 401, {"error": {"message": "Incorrect API key provided",
                                                "type": "invalid_request_error", "code": "invalid_api_key"}})
            return
        if mode == "bad_request":
            self._send(handler, 400, {"error": {"message": "input is invalid", "type": "invalid_request_error"}})
            return
        if mode == "malformed":
            self._send_raw(handler, 200, b"<html>definitely not json", "text/html")
            return
        if mode == "bad_shape":
            self._send(handler, 200, {"object": "list", "embeddings": []})
            return
        if handler.path == CHAT_PATH:
            self._answer_chat(handler, body, mode)
            return

        texts = body.get("input") if isinstance(body, dict) else None
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list):
            self._send(handler, 400, {"error": {"message": "'input' is required", "type": "invalid_request_error"}})
            return
        data = []
        for i, text in enumerate(texts):
            vector = self.vector_for(str(text))
            if mode == "wrong_dimension":
                vector = vector[:-1]
            data.append({"object": "embedding", "index": i, "embedding": vector})
        if mode == "shuffled":
            data.reverse()
        tokens = sum(len(str(t).split()) for t in texts)
        self._send(handler, 200, {
            "object": "list",
            "data": data,
            "model": body.get("model"),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        })

    def _answer_chat(self, handler: BaseHTTPRequestHandler, body: Any, mode: Mode) -> None:
        messages = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(messages, list):
            self._send(handler, 400, {"error": {"message": "'messages' is required", "type": "invalid_request_error"}})
            return
        message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None}
        if mode == "refusal":
            message["refusal"] = "I can't help with that."
        else:
            with self._lock:
                reply = self._chat_replies.popleft() if self._chat_replies else "{}"
            message["content"] = reply if isinstance(reply, str) else json.dumps(reply)
        tokens_in = sum(len(str(m.get("content", "")).split()) for m in messages if isinstance(m, dict))
        tokens_out = len(str(message["content"] or message["refusal"]).split())
        self._send(handler, 200, {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "model": body.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": tokens_in, "completion_tokens": tokens_out,
                      "total_tokens": tokens_in + tokens_out},
        })

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, payload: Any,
              headers: dict[str, str] | None = None) -> None:
        FakeOpenAI._send_raw(handler, status, json.dumps(payload).encode(), "application/json", headers)

    @staticmethod
    def _send_raw(handler: BaseHTTPRequestHandler, status: int, body: bytes, content_type: str,
                  headers: dict[str, str] | None = None) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(body)
        handler.wfile.flush()
