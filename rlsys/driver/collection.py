"""Collection: keeps the env runners busy and routes what they return.

Training trajectories go to the replay buffer (those from policies more than `run.max_policy_lag`
versions old are dropped and counted) and, at the end of each iteration, to the run's shards in
`trajectories/`; evaluation episodes go to shards of their own in `eval/`, beside it, so that
reading `trajectories/` gives training data alone. The counters here (trajectories, env steps,
outcomes) are what a checkpoint records and a resumed run restores.

A rollout group (`run.group_size` > 1) goes to the buffer whole, once all its members have arrived
(`rlsys/driver/groups.py` says what goes, and when).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from rlsys.actors.pool import RunnerPool
from rlsys.config import Config
from rlsys.core.types import Trajectory, task_group
from rlsys.data.shards import ShardWriter
from rlsys.driver.dashboard import RunMetrics
from rlsys.driver.groups import RolloutGroups
from rlsys.driver.metrics import judge_costs, summarize_eval
from rlsys.envs.tasks import TaskSource, eval_groups, eval_tasks


class Collector:
    def __init__(self, cfg: Config, buffer, weight_store, run_dir: Path, tasks: TaskSource):
        self.cfg = cfg
        self.buffer = buffer
        self.tasks = tasks
        # an offline run without evaluation starts no runner (no browser, no model in a runner)
        needs_runners = cfg.run.training != "offline" or bool(cfg.run.eval_every)
        self.pool = RunnerPool(cfg, weight_store, seed=cfg.run.seed) if needs_runners else None
        self.writer = ShardWriter(run_dir / "trajectories", split="train")
        self.eval_writer = ShardWriter(run_dir / "eval", split="eval")
        self.counters: Counter = Counter()
        self.trajectories: list[Trajectory] = []  # this iteration's training trajectories
        self.new_trainable = 0  # trainable trajectories that reached the buffer since the last update
        self.groups = RolloutGroups(cfg.run.broken_groups)
        self.last_eval: list[Trajectory] = []  # the latest evaluation's episodes
        self.dashboard = RunMetrics(cfg.run.name)

    def collect(self, episodes: int, min_version: int | None) -> None:
        """`sync`: play `episodes` training episodes and wait until every one has finished."""
        remaining = episodes
        while remaining > 0 or self.pool.num_inflight:
            if remaining > 0:
                remaining -= self._fill(explore=True, budget=remaining)
            self._route(self.pool.wait(1.0), min_version)

    def keep_busy(self, min_version: int | None) -> None:
        """`async`: give every idle runner a training task, and route what finished meanwhile."""
        self._fill(explore=True)
        self._route(self.pool.wait(0.5), min_version)

    def evaluate(self, min_version: int | None, iteration: int) -> dict:
        """Play the fixed evaluation problems greedily; their episodes go to eval/."""
        queue = eval_tasks(self.cfg.tasks, self.cfg.run.eval_episodes)
        groups = eval_groups(queue)
        results: list[Trajectory] = []
        while len(results) < self.cfg.run.eval_episodes:
            self._fill(explore=False, queue=queue)
            # in async mode runners left idle by an empty queue keep collecting training data
            if self.cfg.run.mode == "async" and not queue:
                self._fill(explore=True)
            self._route(self.pool.wait(1.0), min_version, results)
        self.eval_writer.write(results, iteration)
        self.last_eval = results
        return summarize_eval(results, groups)

    def end_iteration(self, iteration: int, elapsed_s: float) -> dict:
        """Write this iteration's training trajectories and summarise them."""
        trajs = self.trajectories
        self.writer.write(trajs, iteration)
        self.trajectories = []  # after the write: an interrupted write leaves them to save_unwritten
        trainable = [t for t in trajs if t.trainable]

        def mean(values):
            return float(np.mean(values)) if trainable else None

        record = {
            "trajectories": self.counters["trajectories"],
            "env_steps": self.counters["env_steps"],
            "train/success_rate": mean([t.outcome == "success" for t in trainable]),
            "train/trajectories": len(trajs),
            "train/env_errors": sum(t.outcome == "env_error" for t in trajs),
            "train/unknown": sum(t.outcome == "unknown" for t in trajs),
            "train/mean_steps": mean([len(t.steps) for t in trainable]),
            "runners/restarts": self.pool.restarts if self.pool else 0,
            "runners/alive": self.pool.num_alive if self.pool else 0,
            "dropped_stale": self.counters["dropped_stale"],
            "time/iteration_s": elapsed_s,
            "time/env_steps_per_s": sum(len(t.steps) for t in trajs) / elapsed_s,
        }
        if self.cfg.run.group_size > 1:
            record.update(self.groups.take_counts())
        record.update(per_group_success(trainable))
        record.update(judge_costs(trajs, "train"))
        return record

    def save_unwritten(self, iteration: int) -> None:
        """Write what was collected during `iteration`, which will not end (the run is stopping)."""
        self.writer.write(self.trajectories, iteration)
        self.trajectories = []

    def _fill(self, explore: bool, queue: list | None = None, budget: int | None = None) -> int:
        submitted = 0
        while self.pool.num_idle and (budget is None or submitted < budget):
            if queue is not None:
                if not queue:
                    break
                task = queue.pop(0)
            else:
                task = self.tasks.next()
            self.pool.submit(task, explore)
            submitted += 1
        return submitted

    def _route(self, finished: list[tuple[Trajectory, bool]], min_version: int | None, eval_sink=None) -> None:
        train = [t for t, explore in finished if explore]
        if eval_sink is not None:
            eval_sink.extend(t for t, explore in finished if not explore)
        if not train:
            return
        fresh = self.groups.settle(train, min_version, self.counters)
        self.buffer.add.remote(fresh)  # actor calls from one caller run in order
        self.trajectories += train
        steps = sum(len(t.steps) for t in train)
        self.counters["trajectories"] += len(train)
        self.counters["env_steps"] += steps
        for t in train:
            self.counters[f"outcome/{t.outcome}"] += 1
        self.dashboard.trajectories_finished(Counter(t.outcome for t in train), steps)
        self.new_trainable += sum(t.trainable for t in fresh)

    def shutdown(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()


def per_group_success(trajectories: list[Trajectory]) -> dict:
    """Training success rate per MiniWoB++ task or website (PAE reports it per site)."""
    groups: dict[str, list[bool]] = {}
    for t in trajectories:
        groups.setdefault(task_group(t.task), []).append(t.outcome == "success")
    return {f"train/success_rate/{g}": float(np.mean(v)) for g, v in sorted(groups.items())}
