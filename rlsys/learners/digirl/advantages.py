"""DigiRL's actor data: step advantages and the instruction-level curriculum (docs/algorithms/digirl.md#update).

Values are success probabilities p(s) from the step critic; p(s') of the last step is the critic's
value of the final observation.
"""

from __future__ import annotations

import numpy as np


def doubly_robust(rewards, values, next_values, lam: float) -> np.ndarray:
    """The paper's estimator: A_t = lam^(H-t) r_H + (1 - lam^(H-t)) (r_t + V(s_{t+1}) - V(s_t)),
    H the last step. The outcome dominates near the end of the episode, the critic early on."""
    rewards, values, next_values = (np.asarray(x, dtype=np.float64) for x in (rewards, values, next_values))
    last = len(rewards) - 1
    weight = lam ** (last - np.arange(len(rewards)))
    return weight * rewards[last] + (1 - weight) * (rewards + next_values - values)


def digirl_compat(rewards, returns, values, next_values, threshold: float) -> np.ndarray:
    """The released code's estimator: A_t = 1[p(s_{t+1}) - p(s_t) + r_t + G_t > threshold] (0 or 1)."""
    score = np.asarray(next_values) - np.asarray(values) + np.asarray(rewards) + np.asarray(returns)
    return (score > threshold).astype(np.float64)


def keep_mask(advantages: np.ndarray, kind: str, threshold: float) -> np.ndarray:
    """Hard filtering: doubly_robust keeps A_t > threshold; digirl_compat already applied it (A_t = 1)."""
    return advantages > (0.0 if kind == "digirl_compat" else threshold)


def curriculum_scores(trajectory_rewards, instruction_values) -> np.ndarray:
    """score = trajectory reward - p_instr(task): successes on tasks the critic finds hard score highest."""
    return np.asarray(trajectory_rewards, dtype=np.float64) - np.asarray(instruction_values, dtype=np.float64)


def top_quantile(scores: np.ndarray, quantile: float) -> np.ndarray:
    """Scores at or above their `quantile` (0.9 keeps roughly the top 10%)."""
    if len(scores) == 0:
        return np.zeros(0, dtype=bool)
    return scores >= np.quantile(scores, quantile)
