"""Small chat clients for hosted models: an OpenAI-compatible endpoint (OpenAI, vLLM, SGLang, ...) and
Anthropic Claude on Amazon Bedrock.

One message shape for both: an optional system text and one user turn made of text parts and
images (PNG or JPEG bytes), in the order given. Used by the API-agent policy and by VLM judges.

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
import os
import random
import socket
import time
import urllib.error
import urllib.parse
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


# ---------------------------------------------------------------------------------- OpenAI-compatible


class OpenAIChatClient(_JsonHTTPClient):
    """POST `{endpoint_url}/chat/completions` (OpenAI's API, or a self-hosted vLLM/SGLang server).
    The bearer header is sent only when `api_key` is given."""

    provider = "openai"

    def __init__(self, endpoint_url: str, model_id: str, api_key: str | None = None, timeout_s: float = 60.0):
        if not endpoint_url:
            raise ValueError("endpoint_url is required for provider 'openai'")
        if not model_id:
            raise ValueError("model_id is empty")
        super().__init__(timeout_s, api_key)
        self.endpoint_url = endpoint_url.rstrip("/")
        self.model_id = model_id

    def __repr__(self) -> str:
        auth = "bearer" if self._secret else "none"
        return f"OpenAIChatClient(endpoint_url={self.endpoint_url!r}, model_id={self.model_id!r}, auth={auth})"

    def request_body(
        self, system: str | None, parts: Sequence[str | bytes], max_tokens: int, temperature: float
    ) -> dict:
        content = content_blocks(
            parts,
            text=lambda t: {"type": "text", "text": t},
            image=lambda media, data: {"type": "image_url", "image_url": {"url": f"data:{media};base64,{data}"}},
        )
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": content}]
        return {"model": self.model_id, "messages": messages, "max_tokens": max_tokens, "temperature": temperature}

    def chat(self, system: str | None, parts: Sequence[str | bytes], max_tokens: int, temperature: float) -> ChatReply:
        url = f"{self.endpoint_url}/chat/completions"
        headers = {"Authorization": f"Bearer {self._secret}"} if self._secret else {}
        body, latency = self._post(url, headers, self.request_body(system, parts, max_tokens, temperature), url)
        return self._parse(body, latency)

    def _parse(self, body: bytes, latency: float) -> ChatReply:
        raw = self._json(body)
        try:
            content = raw["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise self._error("bad_reply", f"reply has no choices[0].message.content: {_snippet(body)!r}") from None
        if isinstance(content, list):  # some servers answer with content parts
            texts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
            content = "".join(t for t in texts if isinstance(t, str)) if texts else None
        if not isinstance(content, str):
            raise self._error("bad_reply", f"reply message has no text content: {_snippet(body)!r}")
        usage = raw.get("usage") if isinstance(raw.get("usage"), dict) else {}
        return ChatReply(
            text=content,
            latency_s=latency,
            raw=raw,
            input_tokens=_int_or_none(usage.get("prompt_tokens")),
            output_tokens=_int_or_none(usage.get("completion_tokens")),
        )


# ---------------------------------------------------------------------------------- Gemini


class GeminiClient(_JsonHTTPClient):
    """Google's Gemini REST API: POST `{endpoint_url}/v1beta/models/{model_id}:generateContent`,
    the key in the `x-goog-api-key` header (never in the URL, so it cannot leak into logs)."""

    provider = "gemini"
    DEFAULT_ENDPOINT = "https://generativelanguage.googleapis.com"

    def __init__(self, model_id: str, api_key: str | None, endpoint_url: str | None = None, timeout_s: float = 60.0):
        if not model_id:
            raise ValueError("model_id is empty")
        super().__init__(timeout_s, api_key)
        self.model_id = model_id
        self.endpoint_url = (endpoint_url or self.DEFAULT_ENDPOINT).rstrip("/")

    def __repr__(self) -> str:
        return f"GeminiClient(endpoint_url={self.endpoint_url!r}, model_id={self.model_id!r})"

    def request_body(
        self, system: str | None, parts: Sequence[str | bytes], max_tokens: int, temperature: float
    ) -> dict:
        content = content_blocks(
            parts,
            text=lambda t: {"text": t},
            image=lambda media, data: {"inline_data": {"mime_type": media, "data": data}},
        )
        body = {
            "contents": [{"role": "user", "parts": content}],
            "generationConfig": {"maxOutputTokens": max_tokens, "temperature": temperature},
        }
        if system:
            body["system_instruction"] = {"parts": [{"text": system}]}
        return body

    def chat(self, system: str | None, parts: Sequence[str | bytes], max_tokens: int, temperature: float) -> ChatReply:
        url = f"{self.endpoint_url}/v1beta/models/{urllib.parse.quote(self.model_id)}:generateContent"
        headers = {"x-goog-api-key": self._secret} if self._secret else {}
        where = f"gemini {self.model_id}"
        body, latency = self._post(url, headers, self.request_body(system, parts, max_tokens, temperature), where)
        return self._parse(body, latency)

    def _parse(self, body: bytes, latency: float) -> ChatReply:
        raw = self._json(body)
        candidates = raw.get("candidates") if isinstance(raw, dict) else None
        if not candidates:
            blocked = (raw.get("promptFeedback") or {}).get("blockReason") if isinstance(raw, dict) else None
            why = f"the prompt was blocked ({blocked})" if blocked else "no candidates"
            raise self._error("bad_reply", f"gemini reply has {why}: {_snippet(body)!r}")
        try:
            texts = [p["text"] for p in candidates[0]["content"]["parts"] if isinstance(p.get("text"), str)]
        except (KeyError, TypeError, AttributeError):
            texts = []
        if not texts:
            reason = candidates[0].get("finishReason") if isinstance(candidates[0], dict) else None
            raise self._error("bad_reply", f"gemini reply has no text (finishReason {reason}): {_snippet(body)!r}")
        usage = raw.get("usageMetadata") if isinstance(raw.get("usageMetadata"), dict) else {}
        return ChatReply(
            text="".join(texts),
            latency_s=latency,
            raw=raw,
            input_tokens=_int_or_none(usage.get("promptTokenCount")),
            output_tokens=_int_or_none(usage.get("candidatesTokenCount")),
        )


# ---------------------------------------------------------------------------------- Bedrock


def _claude_image(media_type: str, data: str) -> dict:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}


_THROTTLED = {"ThrottlingException", "TooManyRequestsException", "Throttling", "RequestLimitExceeded"}
_UNAVAILABLE = {"ServiceUnavailableException", "InternalServerException", "ModelNotReadyException"}
_MODEL_TIMEOUT = {"ModelTimeoutException", "RequestTimeout", "RequestTimeoutException"}


class BedrockClaudeClient:
    """Anthropic Claude through Bedrock's `InvokeModel` (messages API body).

    Credentials come from the standard AWS chain (environment, profile, instance role). botocore's
    own retries are off (`total_max_attempts=1`) so `with_retries` is the only retry loop.
    """

    provider = "bedrock"
    ANTHROPIC_VERSION = "bedrock-2023-05-31"

    def __init__(
        self,
        model_id: str,
        region: str = "us-east-1",
        endpoint_url: str | None = None,
        timeout_s: float = 60.0,
        max_pool_connections: int = 16,
    ):
        if not model_id:
            raise ValueError("model_id is empty")
        import boto3
        from botocore.config import Config

        self.model_id = model_id
        self.region = region
        self.endpoint_url = endpoint_url
        self.timeout_s = timeout_s
        config = Config(
            read_timeout=timeout_s,
            connect_timeout=min(timeout_s, 10.0),
            retries={"total_max_attempts": 1, "mode": "standard"},
            max_pool_connections=max_pool_connections,
        )
        # a session per client: boto3's default session is not thread-safe, its clients are
        session = boto3.session.Session(region_name=region)
        self._client = session.client("bedrock-runtime", region_name=region, endpoint_url=endpoint_url, config=config)

    def __repr__(self) -> str:
        return f"BedrockClaudeClient(model_id={self.model_id!r}, region={self.region!r})"

    def request_body(
        self, system: str | None, parts: Sequence[str | bytes], max_tokens: int, temperature: float
    ) -> dict:
        content = content_blocks(
            parts,
            text=lambda t: {"type": "text", "text": t},
            image=_claude_image,
        )
        body = {
            "anthropic_version": self.ANTHROPIC_VERSION,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "messages": [{"role": "user", "content": content}],
        }
        if system:
            body["system"] = system
        return body

    def chat(self, system: str | None, parts: Sequence[str | bytes], max_tokens: int, temperature: float) -> ChatReply:
        body = json.dumps(self.request_body(system, parts, max_tokens, temperature))
        t0 = time.monotonic()
        try:
            response = self._client.invoke_model(
                modelId=self.model_id, body=body, contentType="application/json", accept="application/json"
            )
            payload = response["body"].read()
        except Exception as e:  # noqa: BLE001 - every botocore failure becomes a typed LLMError
            raise self._classify(e) from None
        latency = time.monotonic() - t0
        return self._parse(payload, latency)

    def _classify(self, e: Exception) -> LLMError:
        from botocore import exceptions as bx

        where = f"bedrock {self.model_id} ({self.region})"
        if isinstance(e, bx.ClientError):
            error = e.response.get("Error", {})
            code = str(error.get("Code", ""))
            message = _snippet(str(error.get("Message", "")))
            meta = e.response.get("ResponseMetadata", {})
            status = meta.get("HTTPStatusCode")
            retry_after = _retry_after((meta.get("HTTPHeaders") or {}).get("retry-after"))
            if code in _THROTTLED or (status == 429 and code not in _UNAVAILABLE):
                kind = "rate_limited"
            elif code in _MODEL_TIMEOUT:
                kind = "timeout"
            elif code in _UNAVAILABLE or (isinstance(status, int) and status >= 500):
                kind = "server"
            else:
                kind = "client"
            return LLMError(kind, f"{where}: {code or 'error'} (HTTP {status}): {message}", status, retry_after)
        if isinstance(e, (bx.ReadTimeoutError, bx.ConnectTimeoutError)):
            return LLMError("timeout", f"{where}: no reply within {self.timeout_s:g}s ({type(e).__name__})")
        if isinstance(e, (bx.NoCredentialsError, bx.PartialCredentialsError)):
            return LLMError("client", f"{where}: no usable AWS credentials in the standard chain ({type(e).__name__})")
        if isinstance(e, (bx.ParamValidationError, ValueError, TypeError)):
            return LLMError("client", f"{where}: invalid request: {e}")
        if isinstance(e, (bx.BotoCoreError, OSError, HTTPException)):  # endpoint unreachable, connection dropped
            return LLMError("server", f"{where}: {type(e).__name__}: {e}")
        return LLMError("server", f"{where}: unexpected {type(e).__name__}: {e}")

    def _parse(self, payload: bytes, latency: float) -> ChatReply:
        try:
            raw = json.loads(payload)
        except (ValueError, UnicodeDecodeError):
            raise LLMError("bad_reply", f"bedrock reply is not JSON: {_snippet(payload)!r}") from None
        content = raw.get("content") if isinstance(raw, dict) else None
        if not isinstance(content, list):
            raise LLMError("bad_reply", f"bedrock reply has no content list: {_snippet(payload)!r}")
        texts = [b.get("text") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        if not texts or not all(isinstance(t, str) for t in texts):
            raise LLMError("bad_reply", f"bedrock reply has no text block: {_snippet(payload)!r}")
        usage = raw.get("usage") if isinstance(raw.get("usage"), dict) else {}
        return ChatReply(
            text="".join(texts),
            latency_s=latency,
            raw=raw,
            input_tokens=_int_or_none(usage.get("input_tokens")),
            output_tokens=_int_or_none(usage.get("output_tokens")),
        )


# ---------------------------------------------------------------------------------- factory


def make_client(api_cfg, max_pool_connections: int = 16, key: str = "policy.api") -> ChatClient:
    """The client an `ApiConfig` (at config key `key`) describes. For openai the bearer key is read from
    the environment variable `auth_env` names, when it is set and present; otherwise no key is sent."""
    if not api_cfg.model_id:
        raise ValueError(f"{key}.model_id must name the model to call (provider {api_cfg.provider!r})")
    if api_cfg.provider == "openai":
        if not api_cfg.endpoint_url:
            raise ValueError(f"{key}.endpoint_url is required for provider 'openai' (e.g. http://127.0.0.1:8000/v1)")
        secret = os.environ.get(api_cfg.auth_env) if api_cfg.auth_env else None
        return OpenAIChatClient(api_cfg.endpoint_url, api_cfg.model_id, api_key=secret, timeout_s=api_cfg.timeout_s)
    if api_cfg.provider == "bedrock":
        return BedrockClaudeClient(
            api_cfg.model_id,
            region=api_cfg.region,
            endpoint_url=api_cfg.endpoint_url,
            timeout_s=api_cfg.timeout_s,
            max_pool_connections=max_pool_connections,
        )
    raise ValueError(f"{key}.provider must be 'openai' or 'bedrock', got {api_cfg.provider!r}")
