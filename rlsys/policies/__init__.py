"""Policies behind the Policy contract (DESIGN.md §3)."""

from rlsys.config import PolicyConfig


def build_policy(cfg: PolicyConfig, seed: int = 0, device: str = "cpu"):
    if cfg.kind == "tiny_t5":
        from rlsys.policies.tiny_t5 import TinyT5Policy

        return TinyT5Policy.create(cfg, seed=seed, device=device)
    raise ValueError(f"unknown policy.kind {cfg.kind!r}")
