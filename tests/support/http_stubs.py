"""Local stand-ins for hosted model endpoints: real HTTP servers on 127.0.0.1 with scripted replies.

Each stub records every request (path, headers, raw and decoded body) and answers from a queue of
`Reply(status, body, delay_s, headers)`, or from `responder(request)` when the queue is empty.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Reply:
    status: int = 200
    body: dict | str | bytes = b""
    delay_s: float = 0.0
    headers: dict = field(default_factory=dict)


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict
    body: bytes
    json: dict | None
    t_start: float
    t_end: float | None = None


class StubServer:
    path_pattern = re.compile(r".*")

    def __init__(self, responder: Callable[[Recorded], Reply] | None = None):
        self.replies: deque[Reply] = deque()
        self.responder = responder
        self.requests: list[Recorded] = []
        self.unexpected: list[str] = []  # requests the stub refused (wrong path, unsigned, nothing scripted)
        self._lock = threading.Lock()
        self._in_flight = 0
        self.peak_in_flight = 0
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802
                stub._handle(self)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.handle_error = lambda request, client_address: None  # a client that timed out hung up
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    # -- lifecycle

    def start(self) -> StubServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)

    def __enter__(self) -> StubServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def script(self, *replies: Reply) -> StubServer:
        self.replies.extend(replies)
        return self

    # -- serving

    def check(self, handler: BaseHTTPRequestHandler, rec: Recorded) -> Reply | None:
        """A reply that refuses the request, or None to answer it from the script."""
        if not self.path_pattern.fullmatch(rec.path):
            return Reply(404, {"error": f"stub: no route {rec.path}"})
        return None

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        try:
            decoded = json.loads(body) if body else None
        except ValueError:
            decoded = None
        rec = Recorded("POST", handler.path, dict(handler.headers.items()), body, decoded, time.monotonic())
        with self._lock:
            self.requests.append(rec)
            self._in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self._in_flight)
        try:
            reply = self.check(handler, rec)
            if reply is not None:
                with self._lock:
                    self.unexpected.append(f"{reply.status} {rec.path}")
            else:
                with self._lock:
                    reply = self.replies.popleft() if self.replies else None
                if reply is None and self.responder is not None:
                    reply = self.responder(rec)
                if reply is None:
                    with self._lock:
                        self.unexpected.append(f"nothing scripted for {rec.path}")
                    reply = Reply(500, {"error": "stub: no scripted reply left"})
            if reply.delay_s:
                time.sleep(reply.delay_s)
            self._send(handler, reply)
        finally:
            with self._lock:
                self._in_flight -= 1
                rec.t_end = time.monotonic()

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, reply: Reply) -> None:
        body = reply.body
        headers = {"Content-Type": "application/json", **reply.headers}
        if isinstance(body, dict):
            body = json.dumps(body).encode()
        elif isinstance(body, str):
            body = body.encode()
        try:
            handler.send_response(reply.status)
            for k, v in headers.items():
                handler.send_header(k, v)
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)
            handler.wfile.flush()
        except OSError:  # the client gave up (timed out) and closed the connection
            handler.close_connection = True


class OpenAIStub(StubServer):
    """`POST /v1/chat/completions`; `base_url + "/v1"` is the endpoint_url to configure."""

    path_pattern = re.compile(r"/v1/chat/completions")

    @property
    def endpoint_url(self) -> str:
        return self.base_url + "/v1"

    @staticmethod
    def completion(text: str, prompt_tokens: int = 11, completion_tokens: int = 7) -> dict:
        return {
            "id": "chatcmpl-stub",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
        }


class BedrockStub(StubServer):
    """`POST /model/<model_id>/invoke`, refusing requests that are not SigV4-signed."""

    path_pattern = re.compile(r"/model/([^/]+)/invoke")

    def check(self, handler: BaseHTTPRequestHandler, rec: Recorded) -> Reply | None:
        refused = super().check(handler, rec)
        if refused is not None:
            return refused
        if not rec.headers.get("Authorization", "").startswith("AWS4-HMAC-SHA256 "):
            return Reply(403, {"message": "stub: request is not SigV4-signed"}, headers=_error_type("AccessDenied"))
        return None

    @staticmethod
    def model_id(rec: Recorded) -> str:
        return urllib.parse.unquote(BedrockStub.path_pattern.fullmatch(rec.path).group(1))

    @staticmethod
    def message(text: str, input_tokens: int = 13, output_tokens: int = 5) -> dict:
        return {
            "id": "msg_stub",
            "type": "message",
            "role": "assistant",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
        }

    @staticmethod
    def error(status: int, code: str, message: str = "stub error", delay_s: float = 0.0) -> Reply:
        return Reply(status, {"message": message}, delay_s, headers=_error_type(code))


def _error_type(code: str) -> dict:
    return {"x-amzn-ErrorType": f"{code}:http://internal.amazon.com/coral/com.amazon.bedrock/"}


class GeminiStub(StubServer):
    """`POST /v1beta/models/<model_id>:generateContent`, refusing requests without an `x-goog-api-key`."""

    path_pattern = re.compile(r"/v1beta/models/([^/:]+):generateContent")

    def check(self, handler: BaseHTTPRequestHandler, rec: Recorded) -> Reply | None:
        refused = super().check(handler, rec)
        if refused is not None:
            return refused
        if not api_key(rec):
            return Reply(403, {"error": {"code": 403, "message": "stub: no API key", "status": "PERMISSION_DENIED"}})
        return None

    @staticmethod
    def reply(text: str, prompt_tokens: int = 17, output_tokens: int = 9) -> dict:
        return {
            "candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": prompt_tokens, "candidatesTokenCount": output_tokens},
        }

    @staticmethod
    def error(status: int, code: str, delay_s: float = 0.0) -> Reply:
        return Reply(status, {"error": {"code": status, "message": "stub error", "status": code}}, delay_s)


def api_key(rec: Recorded) -> str | None:
    """The `x-goog-api-key` header, however the client spelled its case."""
    return next((v for k, v in rec.headers.items() if k.lower() == "x-goog-api-key"), None)
