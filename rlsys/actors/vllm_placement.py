"""`policy.placement: vllm` on the rlsys side: starting the engines (actors/vllm_engine.py) from the
vLLM environment, and `EnginePolicy`, a runner's view of an engine.

The runner builds the prompt's token ids (a vision-language policy's with the screenshot beside them)
and the action grammar's regular expression; the engine samples under the grammar (vLLM's structured
outputs, llguidance backend) and returns the text, the sampled ids and their log-prob. A model built
from config (no `policy.path`) is saved once here and kept in the weight store as bytes, so an engine
on another node, or one Ray restarted, needs no shared folder.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path

import ray

from rlsys.actors.vllm_engine import RemoteVLLMEngine, engine_name
from rlsys.config import Config, PolicyConfig
from rlsys.config.errors import ConfigError
from rlsys.core.types import ActionSample
from rlsys.policies.causal_lm import load_tokenizer, lora_settings, prompt_ids
from rlsys.policies.grammar_regex import grammar_regex_or_none
from rlsys.policies.lora_checkpoint import BASE_DIR
from rlsys.policies.resolve import resolve
from rlsys.policies.sampling import prompt_text
from rlsys.policies.vlm_engine_inputs import load_vision_inputs, vlm_lora_settings, vlm_prompt_ids

# scripts/setup-vllm.sh builds it beside the source tree
DEFAULT_VENV = Path(__file__).resolve().parents[2] / ".venv-vllm"  # rlsys/actors/ -> the checkout


def vllm_python(setting: str) -> str:
    """The interpreter the engines run on: `policy.vllm.python`, or (auto) the environment that
    scripts/setup-vllm.sh builds, or this one when it has vLLM itself."""
    if setting != "auto":
        if not Path(setting).is_file():
            raise ConfigError(f"policy.vllm.python: no interpreter at {setting!r}")
        return setting
    built = DEFAULT_VENV / "bin" / "python"
    if built.is_file():
        return str(built)
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    raise ConfigError(
        "policy.placement = 'vllm' needs vLLM: run scripts/setup-vllm.sh (it builds .venv-vllm), "
        "or set policy.vllm.python to a Python that has vllm and the same ray as this one"
    )


def engine_args(cfg: Config) -> dict:
    v = cfg.policy.vllm
    images = {"limit_mm_per_prompt": {"image": 1, "video": 0}} if cfg.policy.kind == "vlm" else {}
    return {
        **images,  # one screenshot a prompt; no video, which vLLM's CPU build could not process
        "dtype": cfg.policy.dtype,  # the same three names in vLLM
        "max_model_len": cfg.policy.max_prompt_tokens + cfg.policy.max_new_tokens + 1,
        "max_num_seqs": v.max_num_seqs,
        "tensor_parallel_size": v.tensor_parallel_size,
        "gpu_memory_utilization": v.gpu_memory_utilization,
        "enforce_eager": v.enforce_eager,
        "structured_outputs_config": {"backend": "guidance"},  # llguidance: the regexes are tested against it
    }


def engine_env(cfg: Config) -> dict[str, str]:
    return {"VLLM_CPU_KVCACHE_SPACE": str(cfg.policy.vllm.kv_cache_gib), "TOKENIZERS_PARALLELISM": "false"}


def engine_model(cfg: Config) -> tuple[str | None, dict[str, bytes] | None, dict | None]:
    """(what vLLM loads: a folder or Hub id, or the files of a model built from config; the adapter's
    settings when the learner publishes adapters). A checkpoint is named, never loaded here: of a LoRA
    checkpoint vLLM loads the base, and the learner publishes the adapter, as it does whenever its model has
    one (policy.lora.enabled, or a LoRA checkpoint) and policy.publish is not `full`."""
    policy = cfg.policy
    if policy.path:
        base, adapter = resolve(policy)
        if policy.publish == "full" or not (adapter or policy.lora.enabled):
            return base.name, None, None
        if adapter:
            return base.name, None, adapter.settings
        fresh = vlm_lora_settings(policy, base.folder) if policy.kind == "vlm" else lora_settings(policy)
        return base.name, None, fresh
    from rlsys.policies import build_policy

    built = build_policy(policy, seed=cfg.run.seed)  # what the learner starts from
    with tempfile.TemporaryDirectory() as tmp:
        built.save_pretrained(tmp)
        base = Path(tmp) / BASE_DIR if built.adapter_only else Path(tmp)
        files = {p.name: p.read_bytes() for p in base.iterdir() if p.is_file()}
    return None, files, adapter_settings(built.model) if built.adapter_only else None


def adapter_settings(model) -> dict:
    """A peft model's adapter shape, as the engine writes it into each published adapter's config."""
    lora = model.peft_config["default"]
    return {"r": lora.r, "lora_alpha": lora.lora_alpha, "target_modules": sorted(lora.target_modules)}


def start_engines(cfg: Config, weight_store, seed: int) -> list:
    """Start `policy.vllm.num_engines` engines and wait until each has loaded its model."""
    v = cfg.policy.vllm
    python = vllm_python(v.python)
    model_dir, model_files, lora = engine_model(cfg)
    if model_files is not None:
        ray.get(weight_store.put_model_files.remote(model_files), timeout=120)
    engines = [
        RemoteVLLMEngine.options(
            name=engine_name(i),
            num_cpus=v.num_cpus,
            num_gpus=v.num_gpus,
            max_restarts=v.max_restarts,
            max_task_retries=1,  # a request that met a dying engine is asked again of its successor
            max_concurrency=1000,
            runtime_env={"py_executable": python, "env_vars": engine_env(cfg)},
        ).remote(
            weight_store,
            {**engine_args(cfg), "seed": seed * 1000 + i},
            model_dir=model_dir,
            lora=lora,
            max_new_tokens=cfg.policy.max_new_tokens,
            temperature=cfg.policy.temperature,
        )
        for i in range(v.num_engines)
    ]
    try:
        ray.get([e.start.remote() for e in engines], timeout=v.start_timeout_s)
    except Exception as e:
        for engine in engines:
            ray.kill(engine, no_restart=True)
        raise RuntimeError(f"a vLLM engine failed to start (python {python}): {e}") from e
    return engines


class EnginePolicy:
    """A runner's view of a vLLM engine: `act` like a local replica; no weights here."""

    def __init__(self, engine, cfg: PolicyConfig, timeout_s: float = 600.0):
        self.engine = engine
        self.cfg = cfg
        self.vision = load_vision_inputs(cfg) if cfg.kind == "vlm" else None
        self.tokenizer = self.vision.tokenizer if self.vision else load_tokenizer(cfg)
        self.timeout_s = timeout_s
        self.version = -1

    def prompts(self, observations) -> tuple[list[list[int]], list[bytes] | None]:
        """Each observation's prompt ids, as the learner builds them, and the screenshots a VLM reads."""
        if self.vision is None:
            return [prompt_ids(self.tokenizer, o, self.cfg.max_prompt_tokens) for o in observations], None
        ids = [vlm_prompt_ids(self.vision, o, self.cfg.prompt) for o in observations]
        return ids, [o.screenshot_png for o in observations]

    def act(self, observations, greedy: bool = False) -> list[ActionSample]:
        prompts, images = self.prompts(observations)
        grammars = [o.extras.get("grammar") if self.cfg.constrained else None for o in observations]
        regexes = [grammar_regex_or_none(g) for g in grammars]
        results = ray.get(self.engine.generate.remote(prompts, regexes, greedy, images), timeout=self.timeout_s)
        samples = [
            ActionSample(
                r["text"],
                r["logprob"],
                r["version"],
                r["token_ids"],
                prompt=prompt_text(self.tokenizer, ids),
            )
            for r, ids in zip(results, prompts)
        ]
        self.version = min(s.version for s in samples)
        return samples

    def log_probs(self, observations, actions):
        raise NotImplementedError("an engine-served policy scores on the learner; runners only act")
