"""What every client shares: the error and reply types, the client protocol, the retry loop, the
message-content helpers, and a small JSON-over-HTTP base.

Every failure is raised as an `LLMError` whose `kind` says what went wrong:

    rate_limited  HTTP 429, Bedrock ThrottlingException                     retried
    server        HTTP 5xx, the endpoint unreachable or the connection dropped  retried
    timeout       no reply within `timeout_s`                                 retried
    bad_reply     a reply that is not the JSON expected (or has no text)      not retried
    client        any other 4xx, missing credentials, an invalid request      not retried

The clients never retry by themselves (Bedrock's own retries are switched off); `with_retries`
is the one retry loop. An error is never turned into an empty reply, and an API key never
appears in an error message.
"""

from __future__ import annotations

import base64
import json
import random
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.client import HTTPException
from typing import Any, Protocol, TypeVar

ERROR_KINDS = ("rate_limited", "server", "timeout", "bad_reply", "client")
RETRIED_KINDS = frozenset({"rate_limited", "server", "timeout"})

_BODY_SNIPPET = 300  # characters of an error body quoted in a message

T = TypeVar("T")


class LLMError(RuntimeError):
    """A failed model call. `kind` is one of ERROR_KINDS; `status` the HTTP status when there was one;
    `retry_after_s` the server's Retry-After hint; `retries` how many retries `with_retries` made
    before giving up (0 when raised by a client directly)."""

    def __init__(self, kind: str, message: str, status: int | None = None, retry_after_s: float | None = None) -> None:
        if kind not in ERROR_KINDS:
            raise ValueError(f"LLMError kind must be one of {ERROR_KINDS}, got {kind!r}")
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.retry_after_s = retry_after_s
        self.retries = 0

    @property
    def retryable(self) -> bool:
        return self.kind in RETRIED_KINDS

    def __str__(self) -> str:
        return f"[{self.kind}] {super().__str__()}"


class MissingExtraError(ImportError, ValueError):
    """A client whose optional dependency is not installed; the message names the pip extra.
    Also a ValueError, so callers that report a bad config on ValueError report this one the same way."""

    def __init__(self, message: str, extra: str) -> None:
        super().__init__(message)
        self.extra = extra


@dataclass
class ChatReply:
    text: str
    latency_s: float
    raw: dict = field(repr=False)
    input_tokens: int | None = None
    output_tokens: int | None = None


class ChatClient(Protocol):
    provider: str
    model_id: str

    def chat(
        self, system: str | None, parts: Sequence[str | bytes], max_tokens: int, temperature: float
    ) -> ChatReply: ...


# ---------------------------------------------------------------------------------- retries


def backoff_delay(attempt: int, base_delay_s: float, max_delay_s: float, rng: random.Random) -> float:
    """Full jitter: uniform in [0, min(max_delay_s, base_delay_s * 2**attempt)] (attempt counts from 0)."""
    cap = min(max_delay_s, base_delay_s * (2**attempt))
    return rng.uniform(0.0, cap)


def retry_delay(error: LLMError, attempt: int, base_delay_s: float, max_delay_s: float, rng: random.Random) -> float:
    """The wait before retry `attempt` (from 0): full-jitter backoff, raised to the server's Retry-After
    hint when it gave one, never above `max_delay_s`."""
    delay = backoff_delay(attempt, base_delay_s, max_delay_s, rng)
    if error.retry_after_s:
        delay = min(max(delay, error.retry_after_s), max_delay_s)
    return delay


def with_retries(
    call: Callable[[], T],
    max_retries: int,
    base_delay_s: float = 0.5,
    max_delay_s: float = 20.0,
    rng: random.Random | None = None,
    sleep: Callable[[float], None] = time.sleep,
    on_retry: Callable[[LLMError, float], None] | None = None,
) -> tuple[T, int]:
    """Run `call`, retrying rate_limited / server / timeout errors up to `max_retries` times with
    full-jitter exponential backoff. A server's Retry-After raises the delay (never above
    `max_delay_s`). Returns `(result, retries)`; on giving up re-raises the last error with its
    `retries` attribute set. bad_reply and client errors are raised at once."""
    rng = rng or random.Random()
    retries = 0
    while True:
        try:
            return call(), retries
        except LLMError as e:
            e.retries = retries
            if not e.retryable or retries >= max_retries:
                raise
            delay = retry_delay(e, retries, base_delay_s, max_delay_s, rng)
            if on_retry is not None:
                on_retry(e, delay)
            sleep(delay)
            retries += 1


# ---------------------------------------------------------------------------------- helpers


def image_media_type(data: bytes) -> str:
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "image/png"
    if data[:3] == b"\xff\xd8\xff":
        return "image/jpeg"
    raise ValueError("image parts must be PNG or JPEG bytes")


def content_blocks(
    parts: Sequence[str | bytes], text: Callable[[str], dict], image: Callable[[str, str], dict]
) -> list[dict]:
    """A provider's content blocks for `parts`, in order: `text(str)` for text, `image(media_type,
    base64 data)` for PNG or JPEG bytes."""
    return [
        image(image_media_type(p), base64.b64encode(p).decode("ascii"))
        if isinstance(p, (bytes, bytearray))
        else text(str(p))
        for p in parts
    ]


def _snippet(body: bytes | str) -> str:
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    text = " ".join(text.split())
    return text[:_BODY_SNIPPET] + ("..." if len(text) > _BODY_SNIPPET else "")


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:  # an HTTP date: not worth parsing, the backoff covers it
        return None


def _kind_for_status(status: int) -> str:
    if status == 429:
        return "rate_limited"
    if status == 408:
        return "timeout"
    if status >= 500:
        return "server"
    return "client"


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# ---------------------------------------------------------------------------------- HTTP JSON


class _JsonHTTPClient:
    """POSTs JSON with urllib; the secret (an API key) never appears in errors or repr.
    `timeout_s` bounds connecting and each wait for data (a server that trickles bytes can take longer)."""

    def __init__(self, timeout_s: float, secret: str | None):
        self.timeout_s = timeout_s
        self._secret = secret or None

    def _redact(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret else text

    def _error(self, kind: str, message: str, **kw) -> LLMError:
        return LLMError(kind, self._redact(message), **kw)

    def _post(self, url: str, headers: dict, body: dict, where: str) -> tuple[bytes, float]:
        """The reply body and the seconds it took; every failure an LLMError naming `where`."""
        headers = {"Content-Type": "application/json", "Accept": "application/json", **headers}
        request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
        t0 = time.monotonic()
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return response.read(), time.monotonic() - t0
        except urllib.error.HTTPError as e:
            try:
                err_body = e.read()
            except (OSError, HTTPException):
                err_body = b""
            status = e.code
            raise self._error(
                _kind_for_status(status),
                f"{where} answered HTTP {status}: {_snippet(err_body) or e.reason}",
                status=status,
                retry_after_s=_retry_after(e.headers.get("Retry-After") if e.headers else None),
            ) from None
        except urllib.error.URLError as e:
            if isinstance(e.reason, (TimeoutError, socket.timeout)):
                raise self._error("timeout", f"{where}: no connection within {self.timeout_s:g}s") from None
            raise self._error("server", f"{where} cannot be reached: {e.reason}") from None
        except (TimeoutError, socket.timeout):
            raise self._error("timeout", f"{where}: no reply within {self.timeout_s:g}s") from None
        except (OSError, HTTPException) as e:  # connection reset, remote closed, incomplete read
            raise self._error("server", f"{where}: connection failed: {type(e).__name__}: {e}") from None

    def _json(self, body: bytes) -> Any:
        try:
            return json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise self._error("bad_reply", f"reply is not JSON: {_snippet(body)!r}") from None
