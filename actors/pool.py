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


class RunnerPool:
    def __init__(self, cfg: Config, weight_store, seed: int = 0):
        self.cfg = cfg
        self.weight_store = weight_store
        self.seed = seed
        self.restarts = 0
        self._generation = [0] * cfg.runners.num
        self.runners = [self._create(i) for i in range(cfg.runners.num)]
        self._inflight: dict[ray.ObjectRef, _Episode] = {}
        self._idle = list(range(cfg.runners.num))

    def _create(self, slot: int):
        name = f"runner-{slot}" + (f"-r{self._generation[slot]}" if self._generation[slot] else "")
        return RemoteEnvRunner.options(
            name=name,
            num_cpus=self.cfg.runners.num_cpus,
            resources={self.cfg.runners.resource: 1},
            max_concurrency=2,  # answers pids()/ping() while an episode runs
        ).remote(name, self.cfg, self.weight_store, self.seed * 1000 + slot)

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
                traj = ray.get(ref, timeout=60)
            except (RayActorError, GetTimeoutError) as e:
                traj = self._lost(ep, f"runner died mid-episode: {type(e).__name__}")
                self._replace(ep.slot, str(e).splitlines()[0] if str(e) else type(e).__name__)
            self._idle.append(ep.slot)
            finished.append((traj, ep.explore))
        finished += self._reap_overdue()
        return finished

    def _reap_overdue(self) -> list[tuple[Trajectory, bool]]:
        limit = self.cfg.run.episode_timeout_s
        now = time.monotonic()
        out = []
        for ref, ep in list(self._inflight.items()):
            if now - ep.started > limit:
                del self._inflight[ref]
                self._replace(ep.slot, f"episode over run.episode_timeout_s={limit}")
                self._idle.append(ep.slot)
                out.append((self._lost(ep, f"episode exceeded {limit}s"), ep.explore))
        return out

    def _lost(self, ep: _Episode, why: str) -> Trajectory:
        return Trajectory(ep.task, [], "env_error", runner_id=f"runner-{ep.slot}", error=why)

    def drain(self, timeout_s: float = 30.0) -> list[tuple[Trajectory, bool]]:
        out = []
        deadline = time.monotonic() + timeout_s
        while self._inflight and time.monotonic() < deadline:
            out += self.wait(timeout_s=1.0)
        return out

    def shutdown(self) -> None:
        """Close every browser before the actors go: a killed actor would orphan its browser."""
        closing = [runner.close.remote() for runner in self.runners]
        ray.wait(closing, num_returns=len(closing), timeout=30)
        if self._inflight:  # episodes cut short by close() return promptly as env errors
            ray.wait(list(self._inflight), num_returns=len(self._inflight), timeout=30)
            self._inflight.clear()
        for runner in self.runners:
            ray.kill(runner, no_restart=True)
