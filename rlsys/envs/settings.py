"""The env settings an env reads from its config when it is built, read by the same code before Ray starts: a
value the env cannot use (an `env.allowed_origins` entry that is no origin, a viewport too small for MiniWoB++'s
task area) is then one config error naming the key, instead of every runner failing at start, being replaced and
failing again."""

from __future__ import annotations

from rlsys.config import ConfigError, EnvConfig
from rlsys.core.env import EnvSetupError


def check_env_settings(cfg: EnvConfig) -> None:
    """Each env's own `check_settings` for `cfg.kind`, as a ConfigError (the Android env's needs are checked by
    `envs.android.emulator.check_local_setup`; the simulated env reads nothing that can fail)."""
    try:
        if cfg.kind in ("web", "miniwob"):
            from rlsys.envs.web.webenv import check_settings

            check_settings(cfg)
        if cfg.kind == "miniwob":
            from rlsys.envs.web.miniwob import check_settings as check_miniwob_settings

            check_miniwob_settings(cfg)
    except EnvSetupError as e:
        raise ConfigError(str(e)) from None
