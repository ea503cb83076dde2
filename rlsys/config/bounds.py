"""The numbers no run can use: a count of zero that would spin or learn nothing, a negative size, a timeout that
never waits, and counts and sizes so large that they would exhaust the machine (each limit well above any real
run; the error says why it is there). Each is a config error naming the key, before Ray starts. (Floats are
finite: the loader refuses inf and nan for every float key.)"""

from __future__ import annotations

from typing import Any

from rlsys.config.errors import ConfigError

# key: (lowest allowed, whether the lowest itself is allowed); a key set to null is not checked
AT_LEAST_1 = (1, True)
AT_LEAST_0 = (0, True)
ABOVE_0 = (0, False)
BOUNDS: dict[str, tuple[float, bool]] = {
    "run.iterations": AT_LEAST_0,
    "run.max_env_steps": AT_LEAST_1,
    "run.rollout_size": AT_LEAST_1,
    "run.group_size": AT_LEAST_1,
    "run.eval_every": AT_LEAST_0,
    "run.eval_episodes": AT_LEAST_0,
    "run.checkpoint_every": AT_LEAST_0,
    "run.keep_checkpoints": AT_LEAST_1,
    "run.episode_timeout_s": ABOVE_0,
    "ray.num_cpus": AT_LEAST_1,
    "runners.num": AT_LEAST_1,
    "runners.num_cpus": AT_LEAST_0,
    "runners.max_restarts": AT_LEAST_0,
    "runners.restart_backoff_s": AT_LEAST_0,
    "runners.restart_backoff_max_s": AT_LEAST_0,
    "runners.health_interval_s": ABOVE_0,
    "runners.health_timeout_s": AT_LEAST_0,
    "runners.start_warning_s": AT_LEAST_0,
    "replay.capacity": AT_LEAST_1,
    "replay.max_bytes": AT_LEAST_1,
    "env.max_steps": AT_LEAST_1,
    "env.history": AT_LEAST_0,
    "env.step_timeout_s": ABOVE_0,
    "env.settle_quiet_ms": AT_LEAST_0,
    "env.settle_timeout_s": AT_LEAST_0,
    "env.wait_action_s": AT_LEAST_0,
    "env.max_elements": AT_LEAST_1,
    "env.browser_memory_mb": AT_LEAST_0,
    "env.browser_max_episodes": AT_LEAST_0,
    "env.download_max_mb": AT_LEAST_0,
    "env.instance_reset_every": AT_LEAST_0,
    "env.instance_reset_timeout_s": ABOVE_0,
    "env.episode_time_limit_s": ABOVE_0,
    "env.max_tabs": AT_LEAST_1,
    "env.task_area_scale": AT_LEAST_1,
    "env.synthweb.detour_links": AT_LEAST_0,
    "env.synthweb.slip_prob": AT_LEAST_0,
    "env.synthweb.reward_noise": AT_LEAST_0,
    "tasks.synthweb.num_tasks": AT_LEAST_1,
    "tasks.synthweb.min_depth": AT_LEAST_1,
    "tasks.synthweb.min_distractors": AT_LEAST_0,
    "tasks.synthweb.confusable": AT_LEAST_0,
    "tasks.synthweb.impossible": AT_LEAST_0,
    "policy.d_model": AT_LEAST_1,
    "policy.d_ff": AT_LEAST_1,
    "policy.num_layers": AT_LEAST_1,
    "policy.num_heads": AT_LEAST_1,
    "policy.image_size": AT_LEAST_1,
    "policy.temperature": AT_LEAST_0,
    "policy.max_new_tokens": AT_LEAST_1,
    "policy.max_prompt_tokens": AT_LEAST_1,
    "learner.lr": ABOVE_0,
    "learner.updates_per_iteration": AT_LEAST_0,
    "learner.sample_trajectories": AT_LEAST_1,
    "learner.max_history_fetch": AT_LEAST_1,
    "learner.grad_clip": ABOVE_0,
    "learner.digirl.feature_cache_mb": AT_LEAST_0,
    "learner.grpo.clip_low": AT_LEAST_0,
    "learner.grpo.clip_high": AT_LEAST_0,
    "learner.grpo.kl_coef": AT_LEAST_0,
    "learner.grpo.epochs": AT_LEAST_1,
    "learner.grpo.step_weight": AT_LEAST_0,
    "learner.grpo.step_gamma": AT_LEAST_0,
    "learner.grpo.replay_per_task": AT_LEAST_1,
    "learner.grpo.replay_tasks": AT_LEAST_1,
    "learner.grpo.replay_max_bytes": AT_LEAST_1,
    "learner.group_timeout_s": ABOVE_0,
    "learner.num_cpus": AT_LEAST_0,
}
PORTS = ("ray.dashboard_port", "env.android.first_console_port", "env.android.adb_server_port")
# key: (highest allowed, why); published recipes use at most a few hundred episodes and a few dozen runners
LIMITS: dict[str, tuple[int, str]] = {
    "run.rollout_size": (
        100_000,
        "an iteration's trajectories, screenshots included, are held in the driver's memory until the update",
    ),
    "run.group_size": (
        100_000,
        "a group's trajectories, screenshots included, are held in the driver's memory until all have arrived",
    ),
    "run.eval_episodes": (
        100_000,
        "an evaluation's episodes, screenshots included, are held in the driver's memory until it ends",
    ),
    "runners.num": (10_000, "each runner is a process with its own browser, emulator or model"),
    "env.sim.num_elements": (100_000, "every observation of the simulated env lists them all, in every runner"),
    "env.synthweb.detour_links": (30, "a detour page lists them all, one row each, on a small screenshot"),
    "tasks.synthweb.max_distractors": (30, "a page lists them all, one row each, on a small screenshot"),
    "tasks.synthweb.max_depth": (1000, "each page of a task's path is made and kept while its episode lasts"),
    "tasks.synthweb.num_tasks": (999_999, "held-out evaluation tasks are made from the seeds after the training ones"),
    "learner.grpo.replay_per_task": (1000, "a task's kept successes are held in the learner's memory and checkpoints"),
    "learner.grpo.replay_tasks": (1_000_000, "every kept task's successes are in the learner's memory and checkpoints"),
    "learner.grpo.replay_max_bytes": (1 << 36, "the kept successes are held in the learner's memory and checkpoints"),
}
MAX_VIEWPORT_SIDE = 8192  # pixels: above 8K (7680x4320); a screenshot is width x height x 4 bytes in every runner


def check_bounds(cfg: Any) -> None:
    for key, (low, inclusive) in BOUNDS.items():
        value = _get(cfg, key)
        if value is None or value > low or (inclusive and value == low):
            continue
        wanted = f"at least {low}" if inclusive else f"above {low}"
        raise ConfigError(f"{key} must be {wanted}, got {value}")
    for key, (high, why) in LIMITS.items():
        value = _get(cfg, key)
        if value is not None and value > high:
            raise ConfigError(f"{key} must be at most {high}, got {value}: {why}")
    check_viewport(cfg.env.viewport)
    for key in PORTS:
        port = _get(cfg, key)
        if not 0 < port < 65536:
            raise ConfigError(f"{key} must be a TCP port (1 to 65535), got {port}")


def check_viewport(viewport: list[int]) -> None:
    if len(viewport) != 2 or min(viewport) <= 0:
        raise ConfigError(f"env.viewport must be [width, height] in pixels, got {viewport}")
    if max(viewport) > MAX_VIEWPORT_SIDE:
        raise ConfigError(
            f"env.viewport sides must be at most {MAX_VIEWPORT_SIDE} pixels, got {viewport}: every screenshot is "
            "width x height x 4 bytes in each runner (8K is 7680x4320)"
        )


def _get(cfg: Any, dotted: str) -> Any:
    node = cfg
    for part in dotted.split("."):
        node = getattr(node, part)
    return node
