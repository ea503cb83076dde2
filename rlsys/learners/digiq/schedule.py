"""Digi-Q's schedule, which the algorithm registry reads: a critic phase, then an actor phase, both offline."""

from __future__ import annotations

from rlsys.config import DigiQConfig


def critic_iterations(q: DigiQConfig) -> int:
    """Iterations of the critic phase: none when a finished critic is reused."""
    return 0 if q.critic_path else q.critic_iterations


def offline_iterations(q: DigiQConfig) -> int:
    return critic_iterations(q) + q.actor_iterations
