"""The algorithms a learner runs (`learner.algorithm`), how each is built, and its schedule: how many
offline iterations it takes, and where a phase ends that the run records (Digi-Q's critic). The
driver asks this module, so an algorithm's schedule lives with the algorithms, not in the config
or the driver's loop."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rlsys.config import Config, LearnerConfig
from rlsys.learners.digiq import schedule as digiq_schedule


@dataclass(frozen=True)
class Algorithm:
    build: Callable  # (LearnerConfig, policy, seed, device, correct_off_policy) -> the algorithm
    offline_iterations: Callable[[LearnerConfig], int]  # the offline phase's length
    critic_stage_end: Callable[[LearnerConfig], int] = lambda cfg: 0  # 0: no critic stage of its own


def _filtered_bc(cfg, policy, seed, device, correct_off_policy):
    from rlsys.learners.filtered_bc import FilteredBC

    return FilteredBC(cfg, policy, seed=seed, correct_off_policy=correct_off_policy)


def _digirl(cfg, policy, seed, device, correct_off_policy):
    from rlsys.learners.digirl.algorithm import DigiRL

    return DigiRL(cfg, policy, seed=seed, device=device, correct_off_policy=correct_off_policy)


def _digiq(cfg, policy, seed, device, correct_off_policy):
    from rlsys.learners.digiq.algorithm import DigiQ

    return DigiQ(cfg, policy, seed=seed, device=device, correct_off_policy=correct_off_policy)


def _grpo(cfg, policy, seed, device, correct_off_policy):
    from rlsys.learners.grpo.algorithm import GRPO

    return GRPO(cfg, policy, seed=seed)  # its behaviour weight is part of its objective, in either mode


def _digirl_offline(cfg: LearnerConfig) -> int:
    d = cfg.digirl
    return d.offline_instruction_critic_iterations + d.offline_step_critic_iterations + d.offline_actor_iterations


ALGORITHMS: dict[str, Algorithm] = {
    "filtered_bc": Algorithm(_filtered_bc, lambda cfg: cfg.offline_iterations),
    "sft": Algorithm(_filtered_bc, lambda cfg: cfg.offline_iterations),
    "digirl": Algorithm(_digirl, _digirl_offline),
    "grpo": Algorithm(_grpo, lambda cfg: cfg.offline_iterations),
    "digiq": Algorithm(
        _digiq,
        lambda cfg: digiq_schedule.offline_iterations(cfg.digiq),
        critic_stage_end=lambda cfg: digiq_schedule.critic_iterations(cfg.digiq),
    ),
}


def build_algorithm(cfg: Config, policy, device: str):
    """The configured algorithm around `policy`."""
    correct = cfg.learner.off_policy_correction == "on" or (
        cfg.learner.off_policy_correction == "auto" and cfg.run.mode == "async"
    )
    return ALGORITHMS[cfg.learner.algorithm].build(cfg.learner, policy, cfg.run.seed, device, correct)


def offline_phase_length(cfg: Config) -> int:
    """Iterations of the offline phase (0 when training online)."""
    if cfg.run.training == "online":
        return 0
    return ALGORITHMS[cfg.learner.algorithm].offline_iterations(cfg.learner)


def total_iterations(cfg: Config) -> int:
    return offline_phase_length(cfg) + (cfg.run.iterations if cfg.run.training != "offline" else 0)


def critic_stage_end(cfg: Config) -> int:
    """The iteration after which the run writes the algorithm's critic stage (0: it has none)."""
    return ALGORITHMS[cfg.learner.algorithm].critic_stage_end(cfg.learner)
