"""The driver: one loop of collect → update → publish → record / evaluate / checkpoint.

`run.training`: `online` collects from the start; `offline` trains on `offline.data` for the
learner's offline phase and stops; `off2on` runs the offline phase, then online iterations with the
offline data still in the replay buffer. Iterations are numbered through both phases, so a resumed
run continues exactly where its checkpoint was taken.

`sync`: collect `rollout_size` trajectories, update, publish, evaluate (the papers' recipe).
`async`: runners never stop; the learner updates whenever `rollout_size` new trainable
trajectories arrived since its last update, dropping data older than `max_policy_lag` versions.

The runners and what they return are `rlsys/driver/collection.py`'s; what an algorithm adds between
iterations (Digi-Q's critic stage, PAE's new tasks) is in `rlsys/driver/hooks.py`; checkpoints, resuming and a
remote run folder in `rlsys/driver/checkpointing.py`; the learner publishes each new version to the weight store
itself.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path

import ray

from rlsys.config import Config, redacted_dict, to_dict
from rlsys.core.failures import RunFailed
from rlsys.data.shards import read_trajectories
from rlsys.driver.checkpointing import RunCheckpoints
from rlsys.driver.collection import Collector
from rlsys.driver.hooks import IterationContext, hooks_for
from rlsys.driver.metrics import MetricsLogger, read_metrics
from rlsys.driver.run_info import record_session
from rlsys.driver.stores import dead_store, start_stores
from rlsys.envs.tasks import TaskSource
from rlsys.learners.registry import offline_phase_length, total_iterations
from rlsys.learners.runtime.group import LearnerFailed, LearnerGroup
from rlsys.report.run_report import RunReport

log = logging.getLogger(__name__)


class Trainer:
    """The loop (`_loop`, and `run` around it) comes first; how the trainer is built, what each step does and how
    a run is saved follow."""

    def _loop(self, logger: MetricsLogger) -> None:
        if self.iteration == 0 and self.cfg.run.eval_at_start and self.cfg.run.eval_every:
            self._log(logger, {"iteration": 0, "policy_version": self.version, **self.evaluate()}, advance=False)
        started = time.perf_counter()
        while self.iteration < self.total_iterations and not self._env_steps_spent():
            metrics = self._collect_and_update()  # the learner publishes the version it trained
            if metrics is None:  # async: no update has finished yet
                continue
            self.iteration += 1
            record = self._record(metrics, started)
            for hook in self.hooks:  # Digi-Q's critic stage, PAE's new tasks
                record.update(hook.after_iteration(self._hook_context()))
            if self._due(self.cfg.run.eval_every):
                record.update(self.evaluate())
            self._log(logger, record)
            if self._due(self.cfg.run.checkpoint_every):
                self.save_checkpoint()
            started = time.perf_counter()

    def run(self) -> list[dict]:
        logger = MetricsLogger(
            self.cfg, self.run_dir, redacted_dict(to_dict(self.cfg)), total=self.total_iterations, start=self.iteration
        )
        try:
            self._loop(logger)
        except Exception as e:
            # a dead store fails whatever used it (an update, a sample, a runner's pull): name the store
            dead = dead_store({"replay-buffer": self.buffer, "weight-store": self.weight_store})
            if dead is None and not isinstance(e, LearnerFailed):
                raise
            self.collector.save_unwritten(self.iteration + 1)  # what was collected since the last update is kept
            if dead is not None:
                raise RunFailed(f"the {dead} actor died; the run cannot go on without it\n{self.resume_hint()}") from e
            raise LearnerFailed(f"{e}\n{self.resume_hint()}") from e
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM (rlsys.driver.interrupt): keep what finished
            kept = len(self.collector.trajectories)
            self.collector.save_unwritten(self.iteration + 1)
            print(
                f"the {kept} finished episodes of iteration {self.iteration + 1} were written to "
                f"{self.run_dir / 'trajectories'}; episodes in flight are lost",
                file=sys.stderr,
                flush=True,
            )
            raise
        finally:
            logger.close()
        written = self._write_report()
        if written is not None:
            print(f"run report: {written}", flush=True)
        return read_metrics(self.run_dir)

    def __init__(
        self, cfg: Config, run_dir: Path, resume: Path | bool = False, on_record: Callable[[dict], None] | None = None
    ):
        """`resume`: the checkpoint folder to continue from, verified already (`rlsys-train --resume`
        chooses it before Ray starts), or True for the run's newest intact checkpoint, chosen here (a remote run's
        once it is pulled). `on_record` is given each metrics record once it is written (`rlsys.api.train`)."""
        self.cfg, self.run_dir, self.on_record = cfg, Path(run_dir), on_record
        self.checkpoints = RunCheckpoints(cfg, self.run_dir, resume=bool(resume))
        record_session(self.run_dir, resumed=bool(resume))  # run_info.json: what produced this session
        self.iteration = 0
        self.offline_iterations = offline_phase_length(cfg)
        self.total_iterations = total_iterations(cfg)
        self.tasks = TaskSource(cfg.tasks, cfg.run.seed, cfg.run.group_size)
        self.buffer, self.weight_store = start_stores(cfg, self.run_dir)
        self.learners = LearnerGroup(cfg, self.buffer, self.weight_store)
        # runners start (browser, model imports) while the learner builds and publishes weights
        self.collector = Collector(cfg, self.buffer, self.weight_store, self.run_dir, self.tasks)
        self.hooks = hooks_for(cfg)
        self.report = RunReport(self.run_dir) if cfg.metrics.report else None
        try:  # a checkpoint that does not load (or Ctrl-C meanwhile) leaves no actor behind
            found = self.checkpoints.resume_point() if resume is True else resume
            if found:  # absolute: the actors, whose working directory is not ours, read it
                restored = self.checkpoints.restore(Path(found).absolute(), self.learners, self.buffer, self.tasks)
                self.iteration, self.collector.counters = restored
            elif cfg.run.training != "online":
                self._load_offline_data()
            self.learners.publish()
            self.version = ray.get(self.weight_store.get_version.remote(), timeout=60)
        except BaseException:
            self.shutdown()
            raise
        self._pending_update: list[ray.ObjectRef] | None = None

    def _hook_context(self) -> IterationContext:
        online = self.iteration - self.offline_iterations
        return IterationContext(self.cfg, self.run_dir, self.iteration, online, self.tasks, self.learners.critic_stage)

    @property
    def pool(self):
        """The runner pool (None for an offline run that does not evaluate)."""
        return self.collector.pool

    def _collect_and_update(self) -> dict | None:
        if self.iteration < self.offline_iterations:
            metrics = self.learners.update(None, self.iteration)
        elif self.cfg.run.mode == "sync":
            self.collector.collect(self.cfg.run.rollout_size, self._min_version())
            metrics = self.learners.update(self._min_version())
        else:
            metrics = self._async_step()
            if metrics is None:
                return None
        self.version = metrics["policy_version"]
        return metrics

    def _async_step(self) -> dict | None:
        """Keep the runners busy; start an update once `rollout_size` new trainable trajectories arrived,
        and return its metrics when it has finished."""
        self.collector.keep_busy(self._min_version())
        if self._pending_update is None and self.collector.new_trainable >= self.cfg.run.rollout_size:
            self.collector.new_trainable = 0
            self._pending_update = self.learners.start_update(self._min_version())
        if self._pending_update is None or not self.learners.finished(self._pending_update):
            return None
        metrics = self.learners.get(self._pending_update, "an update", 60)[0]
        self._pending_update = None
        return metrics

    def _min_version(self) -> int | None:
        lag = self.cfg.run.max_policy_lag
        return None if lag is None else self.version - lag

    def _env_steps_spent(self) -> bool:
        """`run.max_env_steps`: the online phase ends at the iteration that reaches this many env steps."""
        budget = self.cfg.run.max_env_steps
        return budget is not None and self.collector.counters["env_steps"] >= budget

    def _due(self, every: int) -> bool:
        last = self.iteration == self.total_iterations or self._env_steps_spent()
        return bool(every) and (self.iteration % every == 0 or last)

    def evaluate(self) -> dict:
        return self.collector.evaluate(self._min_version(), self.iteration)

    def _log(self, logger: MetricsLogger, record: dict, advance: bool = True) -> None:
        """The record to metrics.jsonl (and wandb, with the episodes of an evaluation); after an
        evaluation, the run report too."""
        evaluated = "eval/episodes" in record
        written = logger.log(record, advance, episodes=self.collector.last_eval if evaluated else None)
        if evaluated:
            self._write_report()
        if self.on_record is not None:
            self.on_record(written)

    def _write_report(self) -> Path | None:
        """The run report, when `metrics.report` is on; a report that cannot be written costs a warning,
        never the run (rlsys-report RUN_DIR writes it again later)."""
        if self.report is None:
            return None
        try:
            return self.report.write()
        except Exception as e:  # noqa: BLE001 - whatever broke the page, training goes on
            log.warning("the run report could not be written (%s: %s); training goes on", type(e).__name__, e)
            return None

    def _record(self, learner_metrics: dict, started: float) -> dict:
        record = {"iteration": self.iteration, "policy_version": self.version}
        record.update(self.collector.end_iteration(self.iteration, time.perf_counter() - started))
        if self.pool is not None and self.pool.evaluator is not None:
            record.update(ray.get(self.pool.evaluator.stats.remote(reset=True), timeout=60))
        record.update(learner_metrics)
        record.update({f"replay/{k}": v for k, v in ray.get(self.buffer.stats.remote(), timeout=60).items()})
        self.collector.dashboard.iteration(record)
        return record

    # ------------------------------------------------------------------ checkpoints, offline data, shutdown

    def save_checkpoint(self) -> Path:
        if self._pending_update is not None:
            raise RuntimeError("checkpoint requested while the learner is mid-update")
        counters = self.collector.counters
        return self.checkpoints.save(self.iteration, self.version, counters, self.learners, self.buffer, self.tasks)

    def resume_hint(self) -> str:
        return self.checkpoints.hint(self.iteration)

    def _load_offline_data(self) -> None:
        trajectories = [t for path in self.cfg.offline.data for t in read_trajectories(path)]
        kept = ray.get(self.buffer.add.remote(trajectories), timeout=600)
        print(f"offline data: {len(trajectories)} trajectories read, {kept} trainable ones in the buffer", flush=True)
        self.collector.counters["offline_trajectories"] = kept

    def shutdown(self) -> None:
        self.collector.shutdown()
        self.learners.kill()
        for actor in (self.buffer, self.weight_store):
            ray.kill(actor, no_restart=True)
        self.checkpoints.publish_last()
