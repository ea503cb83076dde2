"""Group-relative policy optimisation for multi-turn agents (docs/algorithms/grpo.md)."""
