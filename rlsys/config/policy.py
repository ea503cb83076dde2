"""The policy: its family, model files, LoRA, placement, and hosted-model (API) settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class LoraConfig:
    enabled: bool = False
    r: int = 256  # PAE: r = alpha = 256, dropout 0.05
    alpha: int = 256
    dropout: float = 0.05
    target_modules: list[str] | None = None  # None: every linear layer of the language model
    merge_for_acting: bool = True  # act with the adapter merged into the base weights (exactly undone to train)


@dataclass
class ApiConfig:
    """A hosted model acting as the policy (zero-shot collection and evaluation)."""

    provider: Literal["bedrock", "openai"] = "openai"
    model_id: str = ""
    endpoint_url: str | None = None  # openai: required (e.g. http://127.0.0.1:8000/v1); bedrock: optional
    region: str = "us-east-1"  # bedrock
    auth_env: str | None = "OPENAI_API_KEY"  # openai: the environment variable holding the bearer key
    max_tokens: int = 512
    timeout_s: float = 60.0
    max_retries: int = 3


@dataclass
class ServerConfig:
    """`placement: server`: shared inference actors that batch requests from every runner."""

    num_replicas: int = 1
    max_batch: int = 32
    max_wait_ms: float = 5.0  # how long a request waits for others to fill a batch
    num_gpus: float = 0.0
    num_cpus: float = 1.0


@dataclass
class VLLMConfig:
    """`placement: vllm`: vLLM engines that batch requests from every runner (docs/inference.md)."""

    python: str = "auto"  # the engines' interpreter; auto: .venv-vllm (scripts/setup-vllm.sh), else this one
    num_engines: int = 1
    num_gpus: float = 0.0  # per engine: tensor_parallel_size GPUs for a sharded one
    num_cpus: float = 1.0
    tensor_parallel_size: int = 1
    max_num_seqs: int = 64  # requests one engine runs at once
    gpu_memory_utilization: float = 0.9
    kv_cache_gib: int = 1  # CPU build: memory for the KV cache (whole GiB)
    enforce_eager: bool = False  # True: no CUDA graphs (faster start, slower steps)
    max_restarts: int = 3  # engine actors Ray may restart after a crash
    start_timeout_s: float = 600.0


@dataclass
class PolicyConfig:
    kind: Literal["tiny_t5", "causal_lm", "element_pointer", "learned_pointer", "autoui", "vlm", "api", "random"] = (
        "tiny_t5"
    )
    path: str | None = None  # a save_pretrained folder to start from; None: a fresh model built from config
    arch: Literal["llava", "qwen2_vl"] = "llava"  # vlm built from config (tiny preset) when path is None
    # sizes of models built from config
    d_model: int = 64
    d_ff: int = 128
    num_layers: int = 2
    num_heads: int = 4
    image_size: int = 32  # input resolution of vision towers built from config
    # autoui
    image_feature_dim: int = 1408  # pooled BLIP-2 ViT-g feature
    vision_path: str | None = None  # a Blip2VisionModel folder; None: a tiny one built from config
    # decoding
    temperature: float = 1.0
    max_new_tokens: int = 32
    max_prompt_tokens: int = 384
    constrained: bool = True  # decode inside the env's action grammar when it publishes one
    prompt: str = "auto"  # vlm/api: a template name (pae_agent, element_agent) or a .txt file; auto: by action space
    # training and memory
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"  # auto: bf16 on GPU, fp32 on CPU
    load_in_4bit: bool = False
    gradient_checkpointing: bool = False
    # transformers' attention; auto: flash_attention_2 on a GPU that has the flash-attn package, else the model's
    # default (SDPA)
    attn_implementation: Literal["auto", "sdpa", "eager", "flash_attention_2", "flash_attention_3"] = "auto"
    # causal_lm / vlm scoring: a batch as one packed sequence without padding; auto: on where the attention has
    # a variable-length kernel (flash attention), where SDPA's dense mask would cost the square of the pack
    packing: Literal["auto", "on", "off"] = "auto"
    lora: LoraConfig = field(default_factory=LoraConfig)
    publish: Literal["auto", "full", "adapter"] = "auto"  # auto: adapter-only when LoRA freezes the base
    placement: Literal["runner", "server", "vllm"] = "runner"
    server: ServerConfig = field(default_factory=ServerConfig)
    vllm: VLLMConfig = field(default_factory=VLLMConfig)
    api: ApiConfig = field(default_factory=ApiConfig)
