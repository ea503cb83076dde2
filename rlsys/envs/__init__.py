"""Environments: the front door builds one from its config (`make_env`) and says which action texts
are valid in it (`action_validator`). web/ is headless Chromium (any site, MiniWoB++, WebArena
checks), android/ drives emulators through adb, sim.py is a latency model for scale tests, synthweb.py a fast
synthetic web-like suite for controlled learning experiments, tasks.py
loads task suites, and evaluators/ decides episode outcomes (programmatic checks and VLM judges).
"""

from __future__ import annotations

if __name__ != "rlsys.envs":  # the top-level envs/ is a link to this folder: one name per file
    raise ImportError("import rlsys.envs, not envs: the top-level envs/ folder is a link into rlsys/")

import typing

from rlsys.config import EnvConfig
from rlsys.core.types import Observation, Validator

if typing.TYPE_CHECKING:
    from rlsys.envs.android.emulator import Leases


def make_env(cfg: EnvConfig, env_id: str, fuzzy_judge=None, *, emulators: Leases | None = None):
    """The env `cfg.kind` names. `fuzzy_judge` answers WebArena's fuzzy_match checks on the web; `emulators` lends
    an Android env its device (an EmulatorPool here, or a runner's node pool: rlsys.actors.emulators.NodePool) and
    gets it back when the env closes. Other kinds ignore what they do not use."""
    if cfg.kind == "miniwob":
        from rlsys.envs.web.miniwob import MiniWoBEnv

        return MiniWoBEnv(cfg, env_id)
    if cfg.kind == "web":
        from rlsys.envs.web.webenv import WebEnv

        return WebEnv(cfg, env_id, fuzzy_judge)
    if cfg.kind == "sim":
        from rlsys.envs.sim import SimEnv

        return SimEnv(cfg, env_id)
    if cfg.kind == "synthweb":
        from rlsys.envs.synthweb import SynthWebEnv

        return SynthWebEnv(cfg, env_id)
    if cfg.kind == "android":
        if emulators is None:
            raise ValueError("env.kind 'android' plays on a leased device: make_env needs emulators= to lease it from")
        from rlsys.envs.android.env import leased_env

        return leased_env(cfg, env_id, emulators)
    kinds = typing.get_args(typing.get_type_hints(EnvConfig)["kind"])
    raise ValueError(f"unknown env.kind {cfg.kind!r}: one of {', '.join(kinds)}")


def action_validator(env: EnvConfig) -> Validator:
    """Whether a text is an action of the configured space, as the env itself would parse it."""
    if env.kind == "android":
        from rlsys.envs.android.actions import SCREEN, ActionParseError, parse_action

        def valid_android(obs: Observation, text: str) -> str | None:
            try:
                parse_action(text, env.action_space, tuple(obs.extras.get("screen_size") or SCREEN))
            except ActionParseError as e:
                return str(e)
            return None

        return valid_android
    from rlsys.envs.web import spaces

    space = spaces.get(env.action_space)

    def valid_web(obs: Observation, text: str) -> str | None:
        return spaces.try_parse(space, text, len(obs.extras.get("elements") or []))[1]

    return valid_web
