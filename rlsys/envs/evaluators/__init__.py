"""Evaluators: programmatic checks and VLM judges, all returning a `rlsys.core.evaluator.Verdict`."""

from __future__ import annotations

from rlsys.config import ConfigError, EvaluatorConfig


def check_setup(cfg: EvaluatorConfig) -> None:
    """Load what the configured evaluator needs (prompt, exemplars, credentials, hook), so that a problem
    is a ConfigError naming its key before any process starts."""
    from rlsys.envs.evaluators.checks import load_hook
    from rlsys.envs.evaluators.judges import VLMJudge, make_judge_clients

    try:
        if cfg.kind == "function":
            load_hook(cfg.function)
        if cfg.uses_judge:
            VLMJudge(cfg.judge)
            make_judge_clients(cfg.judge)
    except (ValueError, OSError) as e:
        raise ConfigError(str(e)) from None
