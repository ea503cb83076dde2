"""RunnerPool: keeps EnvRunner actors busy, notices when one dies or hangs, and replaces it.

A runner that dies (its process killed, its node lost) or overruns the episode deadline is
killed and re-created; the episode it was playing is reported as an `env_error` trajectory,
which is counted and stored but never trained on.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from actors.evaluator_pool import start_pool
from actors.inference_server import start_servers
from actors.runner import RemoteEnvRunner
from rlsys.config import Config
from rlsys.types import Task, Trajectory

log = logging.getLogger(__name__)


class TooManyRestarts(RuntimeError):
    pass


@dataclass
class _Episode:
    slot: int
    task: Task
    explore: bool
    started: float


def judging_allowance_s(cfg: Config) -> float:
    """How long a runner may wait on the judge in one episode, on top of run.episode_timeout_s: the
    pool answers every verdict within its deadline, and every_step asks once per step."""
    if not cfg.evaluator.uses_judge:
        return 0.0
    verdicts = cfg.env.max_steps if cfg.evaluator.judge.every_step else 1
    return verdicts * cfg.evaluator.pool.deadline_s


class RunnerPool:
    def __init__(self, cfg: Config, weight_store, seed: int = 0):
        self.cfg = cfg
        self.weight_store = weight_store
        self.seed = seed
        self.restarts = 0
        self._generation = [0] * cfg.runners.num
        self.servers = start_servers(cfg, weight_store, seed) if cfg.policy.placement == "server" else []
        self.evaluator = start_pool(cfg.evaluator, seed) if cfg.evaluator.uses_judge else None
        self.emulator_pools = []
        if cfg.env.kind == "android":
            from actors.emulators import start_node_pools

            self.emulator_pools = start_node_pools(cfg, str((cfg.output_dir / "emulators").resolve()))
        self.episode_limit_s = cfg.run.episode_timeout_s + judging_allowance_s(cfg)
        self.runners = [self._create(i) for i in range(cfg.runners.num)]
        self._inflight: dict[ray.ObjectRef, _Episode] = {}
        self._idle = list(range(cfg.runners.num))

    def _create(self, slot: int):
        name = f"runner-{slot}" + (f"-r{self._generation[slot]}" if self._generation[slot] else "")
        return RemoteEnvRunner.options(
            name=name,
            num_cpus=self.cfg.runners.num_cpus,
            resources={self.cfg.runners.resource: 1},
            max_concurrency=2,  # answers status()/pids() while an episode runs
        ).remote(name, self.cfg, self.weight_store, self.seed * 1000 + slot, self._server_for(slot), self.evaluator)

    def _server_for(self, slot: int):
        return self.servers[slot % len(self.servers)] if self.servers else None

    def _replace(self, slot: int, why: str) -> None:
        self.restarts += 1
        if self.restarts > self.cfg.runners.max_restarts:
            raise TooManyRestarts(f"runners were restarted {self.restarts} times (runners.max_restarts); last: {why}")
        log.warning("runner %d replaced: %s", slot, why)
        ray.kill(self.runners[slot], no_restart=True)
        self._generation[slot] += 1
        self.runners[slot] = self._create(slot)

    @property
    def num_idle(self) -> int:
        return len(self._idle)

    @property
    def num_inflight(self) -> int:
        return len(self._inflight)

    def submit(self, task: Task, explore: bool = True) -> bool:
        if not self._idle:
            return False
        slot = self._idle.pop(0)
        ref = self.runners[slot].run_episode.remote(task, explore)
        self._inflight[ref] = _Episode(slot, task, explore, time.monotonic())
        return True

    def wait(self, timeout_s: float = 1.0) -> list[tuple[Trajectory, bool]]:
        """Finished episodes as (trajectory, explore); never raises for a runner's failure."""
        if not self._inflight:
            return []
        ready, _ = ray.wait(list(self._inflight), num_returns=1, timeout=timeout_s)
        if ready:  # take everything else that is done too
            ready, _ = ray.wait(list(self._inflight), num_returns=len(self._inflight), timeout=0)
        finished = []
        for ref in ready:
            ep = self._inflight.pop(ref)
            try:
                finished.append((ray.get(ref, timeout=60), ep.explore))
                self._idle.append(ep.slot)
            except (RayActorError, GetTimeoutError) as e:
                finished.append(self._fail(ep, f"runner died mid-episode: {type(e).__name__}"))
        limit = self.episode_limit_s
        now = time.monotonic()
        for ref, ep in list(self._inflight.items()):
            if now - ep.started > limit:
                del self._inflight[ref]
                why = f"episode exceeded run.episode_timeout_s={self.cfg.run.episode_timeout_s:g}"
                if limit > self.cfg.run.episode_timeout_s:
                    why += f" plus {limit - self.cfg.run.episode_timeout_s:g}s allowed for judging"
                finished.append(self._fail(ep, why))
        return finished

    def _fail(self, ep: _Episode, why: str) -> tuple[Trajectory, bool]:
        """Replace the runner that lost `ep`; the episode becomes an `env_error` trajectory."""
        self._replace(ep.slot, why)
        self._idle.append(ep.slot)
        return Trajectory(ep.task, [], "env_error", runner_id=f"runner-{ep.slot}", error=why), ep.explore

    def play(self, tasks: list[Task], explore: bool = False) -> list[Trajectory]:
        """Play every task once, keeping all runners busy; returns when all have finished."""
        queue = list(tasks)
        results: list[Trajectory] = []
        while len(results) < len(tasks):
            while self.num_idle and queue:
                self.submit(queue.pop(0), explore)
            results += [t for t, _ in self.wait(1.0)]
        return results

    def shutdown(self) -> None:
        """Close every browser before the actors go: a killed actor would orphan its browser."""
        closing = [runner.close.remote() for runner in self.runners]
        ray.wait(closing, num_returns=len(closing), timeout=30)
        if self._inflight:  # episodes cut short by close() return promptly as env errors
            ray.wait(list(self._inflight), num_returns=len(self._inflight), timeout=30)
            self._inflight.clear()
        for actor in self.runners + self.servers + ([self.evaluator] if self.evaluator else []):
            ray.kill(actor, no_restart=True)
        if self.cfg.env.kind == "android":
            from actors.emulators import shutdown_node_pools

            shutdown_node_pools()
