"""A stand-alone process that speaks the OpenAI chat API over real HTTP, for tests that want
a model server outside their own process.

    python tests/integration/pipeline/openai_chat_process.py REPLIES.json

``REPLIES.json`` is a list of message contents (each a JSON value, sent as the assistant's
``content`` string); ``POST /v1/chat/completions`` answers them in order, then ``{}``. Every
request body is appended, one JSON line each, to ``REPLIES.json.requests``. The process prints
its port on the first line of stdout once it listens on 127.0.0.1.
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def main(path: str) -> None:
    replies = list(json.loads(Path(path).read_text()))
    log = Path(path + ".requests")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 - the http.server hook
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path.rstrip("/") != "/v1/chat/completions":
                self.send_response(404)
                self.end_headers()
                return
            with log.open("a") as out:
                out.write(body.decode() + "\n")
            content = json.dumps(replies.pop(0)) if replies else "{}"
            answer = json.dumps({"id": "chatcmpl-1", "object": "chat.completion", "model": "local",
                                 "choices": [{"index": 0, "finish_reason": "stop",
                                              "message": {"role": "assistant", "content": content}}],
                                 "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1])
