"""Candidate actions for Digi-Q (docs/algorithms/digiq.md): K per state, index 0 the dataset action, the rest
sampled from a policy at a raised temperature. A sample the action space cannot parse is drawn again,
at most `max_redraws` times per slot; a slot still invalid after that stays out of the set."""

from __future__ import annotations

from collections.abc import Sequence

from rlsys.core.types import Observation, Validator


def sample_candidates(
    policy,
    observations: Sequence[Observation],
    dataset_actions: Sequence[str],
    k: int,
    valid: Validator,
    max_redraws: int,
    batch_size: int = 16,
) -> tuple[list[list[str]], dict]:
    """K candidates per observation (the policy samples at its own temperature). Returns them and counts:
    `samples` drawn, `invalid` ones, and `unfilled` slots."""
    candidates = [[a] for a in dataset_actions]
    open_slots = {i: k - 1 for i in range(len(observations))}
    stats = {"samples": 0, "invalid": 0, "unfilled": 0}
    for _ in range(1 + max_redraws):
        wanted = [i for i, n in open_slots.items() for _ in range(n)]
        if not wanted:
            break
        for start in range(0, len(wanted), batch_size):
            chunk = wanted[start : start + batch_size]
            for i, sample in zip(chunk, policy.act([observations[i] for i in chunk])):
                stats["samples"] += 1
                if valid(observations[i], sample.text) is None:
                    candidates[i].append(sample.text)
                    open_slots[i] -= 1
                else:
                    stats["invalid"] += 1
    stats["unfilled"] = sum(open_slots.values())
    return candidates, stats
