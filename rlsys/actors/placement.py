"""`policy.placement`: what acts for a runner. `runner`: a policy replica inside the runner itself; `server`: a
few shared inference servers (inference_server.py); `vllm`: vLLM engines (vllm_placement.py). The pool starts the
shared actors once and hands each runner one of them; the runner acts through its view of that actor. The rules a
placement puts on the rest of the config are checked when it loads (rlsys/config/checks.py, `check_placement`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rlsys.config import Config, PolicyConfig


def _start_servers(cfg: Config, weight_store, seed: int) -> list:
    from rlsys.actors.inference_server import start_servers

    return start_servers(cfg, weight_store, seed)


def _server_view(server, cfg: PolicyConfig):
    from rlsys.actors.inference_server import ServedPolicy

    return ServedPolicy(server)


def _start_engines(cfg: Config, weight_store, seed: int) -> list:
    from rlsys.actors.vllm_placement import start_engines  # imports the policy's tokenizer code

    return start_engines(cfg, weight_store, seed)


def _engine_view(engine, cfg: PolicyConfig):
    from rlsys.actors.vllm_placement import EnginePolicy

    return EnginePolicy(engine, cfg)


@dataclass(frozen=True)
class Placement:
    start: Callable[[Config, object, int], list]  # (cfg, weight store, seed) -> the shared actors that act
    view: Callable[[object, PolicyConfig], object]  # (one of them, policy config) -> a runner's policy


PLACEMENTS: dict[str, Placement | None] = {  # None: the runner holds its own replica
    "runner": None,
    "server": Placement(_start_servers, _server_view),
    "vllm": Placement(_start_engines, _engine_view),
}


def start_acting_actors(cfg: Config, weight_store, seed: int) -> list:
    """The actors that act for every runner (started once, by the pool); none for `runner`."""
    placement = PLACEMENTS[cfg.policy.placement]
    return placement.start(cfg, weight_store, seed) if placement else []


def runner_policy(cfg: Config, actor=None):
    """What a runner acts with: its view of `actor`, the shared actor the pool gave it, or (`runner`) its own
    replica, built like the learner's (the run seed), so that a frozen base matches when only adapters are
    published."""
    placement = PLACEMENTS[cfg.policy.placement]
    if placement is None:
        from rlsys.policies import build_policy

        return build_policy(cfg.policy, seed=cfg.run.seed)
    return placement.view(actor, cfg.policy)
