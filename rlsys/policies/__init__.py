"""Policies behind the Policy contract (docs/architecture.md#contracts).

Every policy offers `act(observations, greedy=False) -> [ActionSample]` (batched; the behaviour
log-prob of what was sampled, or None for hosted models), `token_logprobs` / `log_probs` by
teacher forcing, `parameters()`, `train()`, `state_dict()` / `load_state_dict(state, version)`
(what a runner needs to match the learner: the adapter alone when the base is frozen),
`save_pretrained(path)` and a `version`.
"""

from rlsys.config import PolicyConfig


def policy_class(kind: str):
    if kind == "tiny_t5":
        from rlsys.policies.tiny_t5 import TinyT5Policy

        return TinyT5Policy
    if kind == "causal_lm":
        from rlsys.policies.causal_lm import CausalLMPolicy

        return CausalLMPolicy
    if kind == "element_pointer":
        from rlsys.policies.element_pointer import ElementPointerPolicy

        return ElementPointerPolicy
    if kind == "learned_pointer":
        from rlsys.policies.learned_pointer import LearnedPointerPolicy

        return LearnedPointerPolicy
    if kind == "autoui":
        from rlsys.policies.autoui import AutoUIPolicy

        return AutoUIPolicy
    if kind == "vlm":
        from rlsys.policies.vlm import VLMPolicy

        return VLMPolicy
    if kind == "api":
        from rlsys.policies.api_agent import ApiAgentPolicy

        return ApiAgentPolicy
    if kind == "random":
        from rlsys.policies.random_agent import RandomPolicy

        return RandomPolicy
    raise ValueError(f"unknown policy.kind {kind!r}")


# Policies without PyTorch or weights: a runner holding one never imports torch (a small process) and takes
# only the version of what a learner publishes, never the state dict.
TORCH_FREE_KINDS = frozenset({"api", "random"})


def needs_torch(kind: str) -> bool:
    return kind not in TORCH_FREE_KINDS


def build_policy(cfg: PolicyConfig, seed: int = 0, device: str = "cpu"):
    return policy_class(cfg.kind).create(cfg, seed=seed, device=device)
