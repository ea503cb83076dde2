"""Returns, success labels and the hand-checkable per-step quantities every algorithm starts from."""

from __future__ import annotations

import numpy as np


def discounted_returns(rewards, gamma: float) -> list[float]:
    """G_t = sum_{k>=t} gamma^(k-t) r_k."""
    out = [0.0] * len(rewards)
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = float(rewards[t]) + gamma * running
        out[t] = running
    return out


def success_labels(returns) -> np.ndarray:
    """DigiRL's critic label y = 1[G_t > 0]: with a terminal sparse reward, "this trajectory succeeds"."""
    return (np.asarray(returns) > 0).astype(np.int64)
