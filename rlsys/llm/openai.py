"""A client for any OpenAI-compatible chat endpoint: OpenAI's API, or a self-hosted vLLM or SGLang server."""

from __future__ import annotations

from collections.abc import Sequence

from rlsys.llm.base import ChatReply, _int_or_none, _JsonHTTPClient, _snippet, content_blocks


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
