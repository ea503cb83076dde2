"""A client for Google's Gemini REST API."""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence

from rlsys.llm.base import ChatReply, _int_or_none, _JsonHTTPClient, _snippet, content_blocks


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
