"""RunnerPool: keeps EnvRunner actors busy, notices when one dies, hangs or cannot be placed, and
replaces it.

A runner is `starting` until it answers its first status() (its actor may wait for a free resource:
the run goes on with the others, and a warning names the resource), then `idle` or `busy`. Every
runner is probed with status() each `runners.health_interval_s`; one that dies, overruns the episode
deadline or leaves a probe unanswered for `runners.health_timeout_s` is killed and re-created, after a
backoff that doubles while its slot keeps failing. The episode it was playing is reported as an
`env_error` trajectory, counted and stored but never trained on. `runners.max_restarts` bounds the
re-creations over a run. Each replacement is a warning on the driver's console with the runner's name and
the error's text (its exception, or why Ray says it died); so is each `env_error` a runner survived (a
broken browser), at most three a minute per slot (`rlsys.core.remote_errors`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from rlsys.actors.placement import start_acting_actors
from rlsys.actors.runner import RemoteEnvRunner
from rlsys.config import Config
from rlsys.core.remote_errors import FailureLog, cause_text
from rlsys.core.types import Task, Trajectory
from rlsys.envs.evaluators.pool import start_pool

log = logging.getLogger(__name__)


class TooManyRestarts(RuntimeError):
    pass


@dataclass
class _Episode:
    slot: int
    task: Task
    explore: bool
    started: float


@dataclass
class _Probe:
    slot: int
    runner: object  # the handle probed: a reply from a runner since replaced is ignored
    sent: float


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
        n = cfg.runners.num
        self._generation = [0] * n
        self._failures = [0] * n  # consecutive failures per slot, for the backoff
        self.placement: list[dict] = [{} for _ in range(n)]  # each slot's runner's status() when it started
        self.servers = start_acting_actors(cfg, weight_store, seed)
        self.evaluator = start_pool(cfg.evaluator, seed) if cfg.evaluator.uses_judge else None
        self.emulator_pools = []
        if cfg.env.kind == "android":
            from rlsys.actors.emulators import start_node_pools

            self.emulator_pools = start_node_pools(cfg, str((cfg.output_dir / "emulators").resolve()))
        self.episode_limit_s = cfg.run.episode_timeout_s + judging_allowance_s(cfg)
        self._inflight: dict[ray.ObjectRef, _Episode] = {}
        self._starting: dict[ray.ObjectRef, _Probe] = {}
        self._probes: dict[ray.ObjectRef, _Probe] = {}
        self._cooling: dict[int, float] = {}  # slot -> when its next runner may be created
        self._warned_unplaced: set[int] = set()
        self.failures = FailureLog(log)
        self._idle: list[int] = []
        self._next_probe = time.monotonic() + cfg.runners.health_interval_s
        self.runners = [None] * n
        for slot in range(n):
            self._start(slot)

    # ------------------------------------------------------------------ runner life cycle

    def _name(self, slot: int) -> str:
        return f"runner-{slot}" + (f"-r{self._generation[slot]}" if self._generation[slot] else "")

    def _start(self, slot: int) -> None:
        name = self._name(slot)
        runner = RemoteEnvRunner.options(
            name=name,
            num_cpus=self.cfg.runners.num_cpus,
            resources={self.cfg.runners.resource: 1},
            max_concurrency=2,  # answers status()/pids() while an episode runs
        ).remote(name, self.cfg, self.weight_store, self.seed * 1000 + slot, self._server_for(slot), self.evaluator)
        self.runners[slot] = runner
        self._starting[runner.status.remote()] = _Probe(slot, runner, time.monotonic())

    def _where(self, slot: int) -> str:
        status = self.placement[slot]
        return f" (node {status['node']}, pid {status['pid']})" if status else ""

    def alive_slots(self) -> list[int]:
        """Slots whose runner has started and is not being replaced."""
        waiting = {probe.slot for probe in self._starting.values()} | set(self._cooling)
        return [slot for slot in range(len(self.runners)) if slot not in waiting]

    @property
    def num_alive(self) -> int:
        return len(self.alive_slots())

    def _server_for(self, slot: int):
        return self.servers[slot % len(self.servers)] if self.servers else None

    def _replace(self, slot: int, why: str) -> None:
        """Kill the slot's runner; a new one is started after the slot's backoff."""
        self._raise_if_the_weight_store_died(why)
        self.restarts += 1
        where = self._where(slot)
        if self.restarts > self.cfg.runners.max_restarts:
            raise TooManyRestarts(
                f"runners were restarted {self.restarts} times (runners.max_restarts); "
                f"last: {self._name(slot)}{where}: {why}"
            )
        self._failures[slot] += 1
        backoff = self.cfg.runners.restart_backoff_s * 2 ** (self._failures[slot] - 1)
        delay = min(self.cfg.runners.restart_backoff_max_s, backoff)
        log.warning("%s%s replaced in %.1fs: %s", self._name(slot), where, delay, why)  # max_restarts bounds these
        ray.kill(self.runners[slot], no_restart=True)
        if slot in self._idle:
            self._idle.remove(slot)
        self._generation[slot] += 1
        self._cooling[slot] = time.monotonic() + delay

    def _raise_if_the_weight_store_died(self, why: str) -> None:
        """A runner that failed because the weight store died would fail so after every restart: end the run now
        (the trainer names the dead store) rather than restart runners until `max_restarts`."""
        try:
            ray.get(self.weight_store.__ray_ready__.remote(), timeout=10)
        except RayActorError as e:
            raise RuntimeError(f"the weight store died; a runner failed with it: {why}") from e
        except GetTimeoutError:  # busy, not dead: the runner's own failure
            pass

    def _tick(self, now: float) -> None:
        """Start the runners whose backoff ended, warn about unplaced ones, send due health probes."""
        for slot, due in list(self._cooling.items()):
            if now >= due:
                del self._cooling[slot]
                self._start(slot)
        for probe in self._starting.values():
            if now - probe.sent > self.cfg.runners.start_warning_s and probe.slot not in self._warned_unplaced:
                self._warned_unplaced.add(probe.slot)
                resource = self.cfg.runners.resource
                free = ray.available_resources().get(resource, 0)
                log.warning(
                    "%s has not started after %.0fs: %g of %g '%s' free in the cluster; the run goes on without it",
                    self._name(probe.slot), now - probe.sent, free, ray.cluster_resources().get(resource, 0), resource,
                )  # fmt: skip
        if self.cfg.runners.health_timeout_s and now >= self._next_probe:
            self._next_probe = now + self.cfg.runners.health_interval_s
            probed = {probe.slot for probe in self._probes.values()}
            for slot in [s for s in self.alive_slots() if s not in probed]:
                self._probes[self.runners[slot].status.remote()] = _Probe(slot, self.runners[slot], now)

    # ------------------------------------------------------------------ episodes

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
        self._tick(time.monotonic())
        refs = [*self._inflight, *self._starting, *self._probes]
        if not refs:
            time.sleep(min(timeout_s, max(0.0, min(self._cooling.values(), default=0.0) - time.monotonic())))
            return []
        ready, _ = ray.wait(refs, num_returns=1, timeout=timeout_s)
        if ready:  # take everything else that is done too
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        finished = []
        for ref in ready:
            if ref in self._inflight:
                finished.append(self._finish(ref, self._inflight.pop(ref)))
            elif ref in self._starting:
                self._started(ref, self._starting.pop(ref))
            else:
                self._probed(ref, self._probes.pop(ref))
        finished += self._overdue(time.monotonic())
        return finished

    def _finish(self, ref, ep: _Episode) -> tuple[Trajectory, bool]:
        try:
            trajectory = ray.get(ref, timeout=60)
        except RayTaskError as e:  # an exception no env or policy handler knew: a fresh runner is safest
            return self._fail(ep, f"runner raised mid-episode: {cause_text(e)}")
        except RayActorError as e:
            return self._fail(ep, f"runner died mid-episode: {cause_text(e)}")
        except GetTimeoutError as e:
            return self._fail(ep, f"runner died mid-episode: {type(e).__name__}")
        self._idle.append(ep.slot)
        if trajectory.outcome != "env_error":
            self._failures[ep.slot] = 0
        else:  # the runner caught it (a broken browser, a hosted policy without an answer) and goes on
            where = f"{self._name(ep.slot)}{self._where(ep.slot)}"
            self.failures.warn(
                f"runner-{ep.slot}", f"{where}: episode {ep.task.id} ended as env_error: {trajectory.error}"
            )
        return trajectory, ep.explore

    def _started(self, ref, probe: _Probe) -> None:
        if probe.runner is not self.runners[probe.slot]:
            return
        try:
            self.placement[probe.slot] = ray.get(ref, timeout=60)
        except (RayActorError, GetTimeoutError) as e:
            self._replace(probe.slot, f"runner failed to start: {cause_text(e)}")
            return
        if probe.slot in self._warned_unplaced:
            log.warning("%s started%s", self._name(probe.slot), self._where(probe.slot))
            self._warned_unplaced.discard(probe.slot)
        self._idle.append(probe.slot)

    def _probed(self, ref, probe: _Probe) -> None:
        """A dead runner's episode fails by itself; an idle runner found dead is replaced here."""
        if probe.runner is not self.runners[probe.slot]:
            return
        try:
            ray.get(ref, timeout=60)
        except (RayActorError, GetTimeoutError) as e:
            if probe.slot in self._idle:
                self._replace(probe.slot, f"runner died while idle: {cause_text(e)}")

    def _overdue(self, now: float) -> list[tuple[Trajectory, bool]]:
        failed, limit, probe_limit = [], self.episode_limit_s, self.cfg.runners.health_timeout_s
        for ref, ep in list(self._inflight.items()):
            if now - ep.started > limit:
                del self._inflight[ref]
                why = f"episode exceeded run.episode_timeout_s={self.cfg.run.episode_timeout_s:g}"
                if limit > self.cfg.run.episode_timeout_s:
                    why += f" plus {limit - self.cfg.run.episode_timeout_s:g}s allowed for judging"
                failed.append(self._fail(ep, why))
        for ref, probe in list(self._probes.items()):
            if now - probe.sent <= probe_limit:
                continue
            del self._probes[ref]
            if probe.runner is not self.runners[probe.slot]:
                continue
            why = f"no answer to a health probe within runners.health_timeout_s={probe_limit:g}"
            episode = next(((r, ep) for r, ep in self._inflight.items() if ep.slot == probe.slot), None)
            if episode is not None:
                del self._inflight[episode[0]]
                failed.append(self._fail(episode[1], why))
            else:
                self._replace(probe.slot, why)
        return failed

    def _fail(self, ep: _Episode, why: str) -> tuple[Trajectory, bool]:
        """Replace the runner that lost `ep`; the episode becomes an `env_error` trajectory."""
        where = self._where(ep.slot)
        self._replace(ep.slot, why)
        return Trajectory(ep.task, [], "env_error", runner_id=f"runner-{ep.slot}", error=why + where), ep.explore

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
            from rlsys.actors.emulators import shutdown_node_pools

            shutdown_node_pools()
