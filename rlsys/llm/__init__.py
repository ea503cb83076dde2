"""Small chat clients for hosted models: an OpenAI-compatible endpoint (OpenAI, vLLM, SGLang, ...), Gemini,
and Anthropic Claude on Amazon Bedrock, one module each; `base` holds what they share.

One message shape for all: an optional system text and one user turn made of text parts and
images (PNG or JPEG bytes), in the order given. Used by the API-agent policy and by VLM judges.
"""

from __future__ import annotations

import os

from rlsys.llm.base import (
    ERROR_KINDS,
    RETRIED_KINDS,
    ChatClient,
    ChatReply,
    LLMError,
    MissingExtraError,
    backoff_delay,
    content_blocks,
    image_media_type,
    retry_delay,
    with_retries,
)
from rlsys.llm.bedrock import BedrockClaudeClient
from rlsys.llm.gemini import GeminiClient
from rlsys.llm.openai import OpenAIChatClient

__all__ = [
    "ERROR_KINDS",
    "RETRIED_KINDS",
    "BedrockClaudeClient",
    "ChatClient",
    "ChatReply",
    "GeminiClient",
    "LLMError",
    "MissingExtraError",
    "OpenAIChatClient",
    "backoff_delay",
    "content_blocks",
    "image_media_type",
    "make_client",
    "retry_delay",
    "with_retries",
]


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
        try:
            return BedrockClaudeClient(
                api_cfg.model_id,
                region=api_cfg.region,
                endpoint_url=api_cfg.endpoint_url,
                timeout_s=api_cfg.timeout_s,
                max_pool_connections=max_pool_connections,
            )
        except MissingExtraError as e:
            raise MissingExtraError(f"{key}.provider is 'bedrock', but {e}", extra=e.extra) from e
    raise ValueError(f"{key}.provider must be 'openai' or 'bedrock', got {api_cfg.provider!r}")
