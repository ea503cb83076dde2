"""A client for Anthropic Claude on Amazon Bedrock. It needs boto3 (the `bedrock` extra), which is imported
only when a client is created."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from http.client import HTTPException

from rlsys.llm.base import ChatReply, LLMError, MissingExtraError, _int_or_none, _retry_after, _snippet, content_blocks

BOTO3_MISSING = "the Bedrock client needs boto3: pip install 'rlsys[bedrock]'"


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
        try:
            import boto3
            from botocore.config import Config
        except ImportError as e:
            raise MissingExtraError(BOTO3_MISSING, extra="bedrock") from e

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
