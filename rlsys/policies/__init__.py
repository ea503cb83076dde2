"""Policies behind the Policy contract (DESIGN.md §3).

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
    if kind == "autoui":
        from rlsys.policies.autoui import AutoUIPolicy

        return AutoUIPolicy
    if kind == "vlm":
        from rlsys.policies.vlm import VLMPolicy

        return VLMPolicy
    if kind == "api":
        from rlsys.policies.api_agent import ApiAgentPolicy

        return ApiAgentPolicy
    raise ValueError(f"unknown policy.kind {kind!r}")


def build_policy(cfg: PolicyConfig, seed: int = 0, device: str = "cpu"):
    return policy_class(cfg.kind).create(cfg, seed=seed, device=device)
