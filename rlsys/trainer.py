"""The driver: wires runners, replay buffer, weight store and learner, and runs the loop.

`run.training`: `online` collects from the start; `offline` trains on `offline.data` for the
learner's offline phase and stops; `off2on` runs the offline phase, then online iterations with the
offline data still in the replay buffer. Iterations are numbered through both phases, so a resumed
run continues exactly where its checkpoint was taken.

`sync`: collect `rollout_size` trajectories, update, publish, evaluate (the papers' recipe).
`async`: runners never stop; the learner updates whenever `rollout_size` new trainable
trajectories arrived since its last update, dropping data older than `max_policy_lag` versions.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections import Counter
from pathlib import Path

import numpy as np
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rlsys.config import Config, redacted_dict, to_dict
from rlsys.core.types import Trajectory
from rlsys.dashboard import RunMetrics
from rlsys.data import checkpoint
from rlsys.data.shards import ShardWriter, read_trajectories
from rlsys.envs.tasks import TaskSource, eval_groups, eval_tasks, task_group
from rlsys.learners.registry import critic_stage_end, offline_phase_length, total_iterations
from rlsys.metrics import MetricsLogger, judge_costs, read_metrics, summarize_eval

log = logging.getLogger(__name__)


# The raylet then kills every process a crashed worker left behind (browsers, emulators):
# without it, a runner killed with SIGKILL orphans its Chromium.
SUBREAPER = "RAY_kill_child_processes_on_worker_exit_with_raylet_subreaper"


def init_ray(cfg: Config) -> tuple[bool, str | None]:
    """Connect to (or start) Ray. Returns whether this call started the connection (False when
    the process was already connected), and the dashboard address when there is one."""
    if ray.is_initialized():
        return False, None
    os.environ.setdefault(SUBREAPER, "true")
    if cfg.ray.address:
        ctx = ray.init(address=cfg.ray.address, log_to_driver=False)
    else:
        ctx = ray.init(
            address="local",
            num_cpus=cfg.ray.num_cpus,
            resources={cfg.runners.resource: cfg.runners.num},
            include_dashboard=cfg.ray.dashboard,
            dashboard_host=cfg.ray.dashboard_host,
            dashboard_port=cfg.ray.dashboard_port,
            log_to_driver=False,
        )
    return True, ctx.dashboard_url or None


class Trainer:
    def __init__(self, cfg: Config, run_dir: Path, resume: bool = False):
        from rlsys.actors.pool import RunnerPool
        from rlsys.actors.replay import ReplayBufferActor
        from rlsys.actors.weight_store import WeightStore
        from rlsys.learners.group import LearnerGroup

        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.iteration = 0
        self.counters: Counter = Counter()
        self.tasks = TaskSource(cfg.tasks, cfg.run.seed)
        self.writer = ShardWriter(self.run_dir / "trajectories")
        self.eval_writer = ShardWriter(self.run_dir / "trajectories" / "eval")

        # the buffer and the weights live beside the driver: losing a worker node must not lose either
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        self.weight_store = (
            ray.remote(WeightStore).options(name="weight-store", num_cpus=0, scheduling_strategy=here).remote()
        )
        self.buffer = ReplayBufferActor.options(name="replay-buffer", num_cpus=0, scheduling_strategy=here).remote(
            cfg.replay.capacity, cfg.replay.max_bytes, cfg.run.seed
        )
        self.learners = LearnerGroup(cfg, self.buffer, self.weight_store)
        # runners start (browser, model imports) while the learner builds and publishes weights; an offline
        # run without evaluation needs none
        needs_runners = cfg.run.training != "offline" or bool(cfg.run.eval_every)
        self.pool = RunnerPool(cfg, self.weight_store, seed=cfg.run.seed) if needs_runners else None
        self.offline_iterations = offline_phase_length(cfg)
        # Digi-Q's critic phase ends here; its critic and scores are written as a stage of their own
        self.critic_stage_end = critic_stage_end(cfg)
        self.total_iterations = total_iterations(cfg)
        if resume and checkpoint.latest(self.run_dir) is not None:
            self._restore()
        else:
            if resume:
                log.warning("no complete checkpoint in %s; starting from scratch", self.run_dir)
            if cfg.run.training != "online":
                self._load_offline_data()
        self.learners.publish()
        self.version = ray.get(self.weight_store.get_version.remote(), timeout=60)
        self._iteration_trajs: list[Trajectory] = []
        self._pending_update: list[ray.ObjectRef] | None = None
        self._new_since_update = 0
        self._proposer_client = None
        self.dashboard = RunMetrics(cfg.run.name)

    # ------------------------------------------------------------------ collection

    def _handle(self, finished: list[tuple[Trajectory, bool]], eval_sink: list | None) -> None:
        train = [t for t, explore in finished if explore]
        evals = [t for t, explore in finished if not explore]
        if eval_sink is not None:
            eval_sink.extend(evals)
        if not train:
            return
        min_version = self._min_version()
        fresh = [t for t in train if min_version is None or not t.trainable or t.policy_version >= min_version]
        self.counters["dropped_stale"] += len(train) - len(fresh)
        self.buffer.add.remote(fresh)  # actor calls from one caller run in order
        self._iteration_trajs += train
        steps = sum(len(t.steps) for t in train)
        self.counters["trajectories"] += len(train)
        self.counters["env_steps"] += steps
        for t in train:
            self.counters[f"outcome/{t.outcome}"] += 1
        self.dashboard.trajectories_finished(Counter(t.outcome for t in train), steps)
        self._new_since_update += sum(t.trainable for t in fresh)

    def _min_version(self) -> int | None:
        lag = self.cfg.run.max_policy_lag
        return None if lag is None else self.version - lag

    def _fill_runners(self, explore: bool, queue: list | None = None, budget: int | None = None) -> int:
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

    def _collect_sync(self) -> None:
        remaining = self.cfg.run.rollout_size
        while remaining > 0 or self.pool.num_inflight:
            if remaining > 0:
                remaining -= self._fill_runners(explore=True, budget=remaining)
            self._handle(self.pool.wait(1.0), None)

    def evaluate(self) -> dict:
        queue = eval_tasks(self.cfg.tasks, self.cfg.run.eval_episodes)
        groups = eval_groups(queue)
        results: list[Trajectory] = []
        while len(results) < self.cfg.run.eval_episodes:
            self._fill_runners(explore=False, queue=queue)
            # in async mode runners left idle by an empty queue keep collecting training data
            if self.cfg.run.mode == "async" and not queue:
                self._fill_runners(explore=True)
            self._handle(self.pool.wait(1.0), results)
        self.eval_writer.write(results)
        return summarize_eval(results, groups)

    # ------------------------------------------------------------------ learning

    def _poll_async_update(self) -> dict | None:
        if self._pending_update is None or not self.learners.finished(self._pending_update):
            return None
        metrics = self.learners.get(self._pending_update, "an update", 60)[0]
        self._pending_update = None
        self.version = metrics["policy_version"]
        return metrics

    def _iteration_record(self, learner_metrics: dict, started: float) -> dict:
        trajs, self._iteration_trajs = self._iteration_trajs, []
        self.writer.write(trajs)
        trainable = [t for t in trajs if t.trainable]
        elapsed = time.perf_counter() - started
        # how many versions behind the learner's weights the data it trained on was
        current = learner_metrics.get("learner/trained_from_version", self.version)
        record = {
            "iteration": self.iteration,
            "trajectories": self.counters["trajectories"],
            "env_steps": self.counters["env_steps"],
            "policy_version": self.version,
            "train/success_rate": float(np.mean([t.outcome == "success" for t in trainable])) if trainable else None,
            "train/trajectories": len(trajs),
            "train/env_errors": sum(t.outcome == "env_error" for t in trajs),
            "train/unknown": sum(t.outcome == "unknown" for t in trajs),
            "train/mean_steps": float(np.mean([len(t.steps) for t in trainable])) if trainable else None,
            "train/policy_lag": float(np.mean([current - t.policy_version for t in trainable])) if trainable else None,
            "runners/restarts": self.pool.restarts if self.pool else 0,
            "runners/alive": self.pool.num_alive if self.pool else 0,
            "dropped_stale": self.counters["dropped_stale"],
            "time/iteration_s": elapsed,
            "time/env_steps_per_s": sum(len(t.steps) for t in trajs) / elapsed,
        }
        record.update(per_group_success(trainable))
        record.update(judge_costs(trajs, "train"))
        if self.pool is not None and self.pool.evaluator is not None:
            record.update(ray.get(self.pool.evaluator.stats.remote(reset=True), timeout=60))
        record.update(learner_metrics)
        record.update({f"replay/{k}": v for k, v in ray.get(self.buffer.stats.remote(), timeout=60).items()})
        self.dashboard.iteration(record)
        return record

    def _after_update(self, record: dict, logger: MetricsLogger) -> None:
        cfg = self.cfg.run
        last = self.iteration == self.total_iterations
        if cfg.eval_every and (self.iteration % cfg.eval_every == 0 or last):
            record.update(self.evaluate())
        logger.log(record)
        if cfg.checkpoint_every and (self.iteration % cfg.checkpoint_every == 0 or last):
            self.save_checkpoint()

    def run(self) -> list[dict]:
        from rlsys.learners.group import LearnerFailed

        logger = MetricsLogger(
            self.cfg, self.run_dir, redacted_dict(to_dict(self.cfg)), total=self.total_iterations, start=self.iteration
        )
        try:
            self._loop(logger)
        except LearnerFailed as e:
            self.writer.write(self._iteration_trajs)  # what was collected since the last update is kept
            self._iteration_trajs = []
            raise LearnerFailed(f"{e}\n{self._resume_hint()}") from e
        finally:
            logger.close()
        return read_metrics(self.run_dir)

    def _resume_hint(self) -> str:
        found = checkpoint.latest(self.run_dir)
        if found is None:
            return f"The run stopped at iteration {self.iteration} with no checkpoint written (run.checkpoint_every)."
        return (
            f"The run stopped at iteration {self.iteration}; the newest checkpoint is {found}. "
            f"Continue with: python -m rlsys.train --resume {self.run_dir}"
        )

    def _loop(self, logger: MetricsLogger) -> None:
        cfg = self.cfg.run
        if self.iteration == 0 and cfg.eval_at_start and cfg.eval_every:
            logger.log({"iteration": 0, "policy_version": self.version, **self.evaluate()}, advance=False)
        started = time.perf_counter()
        while self.iteration < self.total_iterations:
            if self.iteration < self.offline_iterations:
                metrics = self.learners.update(None, self.iteration)
                self.version = metrics["policy_version"]
            elif cfg.mode == "sync":
                self._collect_sync()
                metrics = self.learners.update(self._min_version())
                self.version = metrics["policy_version"]
            else:
                metrics = self._async_step()
                if metrics is None:
                    continue
            self.iteration += 1
            if self.iteration == self.critic_stage_end:
                self.write_critic_stage()
            record = self._iteration_record(metrics, started)
            if self._proposal_due():
                record.update(self._propose_tasks())
            self._after_update(record, logger)
            started = time.perf_counter()

    def _async_step(self) -> dict | None:
        self._fill_runners(explore=True)
        self._handle(self.pool.wait(0.5), None)
        if self._pending_update is None and self._new_since_update >= self.cfg.run.rollout_size:
            self._new_since_update = 0
            self._pending_update = self.learners.start_update(self._min_version())
        return self._poll_async_update()

    # ------------------------------------------------------------------ proposed tasks (PAE)

    def _proposal_due(self) -> bool:
        every, online = self.cfg.proposer.every, self.iteration - self.offline_iterations
        return bool(every) and online > 0 and online % every == 0

    def _propose_tasks(self) -> dict:
        """New training tasks from the proposer LLM, one example per site (`proposer.examples`, or the
        first training task of each site); a failed call costs this round's proposals, not the run."""
        from rlsys.llm import make_client
        from rlsys.propose_tasks import load_examples, propose_new_tasks, site_examples

        cfg, tasks_cfg = self.cfg.proposer, self.cfg.tasks
        if cfg.examples:
            examples = load_examples(cfg.examples, tasks_cfg.url_map)
        else:
            examples = list(site_examples(self.tasks.pool, warn=False).values())
        if self._proposer_client is None:  # one client for the run, not one per round
            self._proposer_client = make_client(cfg.llm, key="proposer.llm")
        known, url_map = self.tasks.pool, tasks_cfg.url_map
        new = propose_new_tasks(cfg, self._proposer_client, examples, known, url_map=url_map, suite=tasks_cfg.suite)
        added = self.tasks.add(new)
        print(f"task proposer: {added} new training tasks ({len(self.tasks.pool)} in all)", flush=True)
        return {"tasks/proposed": added, "tasks/pool": len(self.tasks.pool)}

    # ------------------------------------------------------------------ checkpoints

    def save_checkpoint(self) -> Path:
        if self._pending_update is not None:
            raise RuntimeError("checkpoint requested while the learner is mid-update")
        learner_files = self.learners.save()

        def fill(folder: Path) -> None:
            checkpoint.write_files(folder, learner_files)
            buffer_state = ray.get(self.buffer.save.remote(str(folder)), timeout=600)
            checkpoint.write_json(
                folder / "state.json",
                {
                    "iteration": self.iteration,
                    "policy_version": self.version,
                    "counters": dict(self.counters),
                    "tasks": self.tasks.state_dict(),
                    "replay": buffer_state,
                },
            )

        return checkpoint.write(self.run_dir, self.iteration, fill, self.cfg.run.keep_checkpoints)

    def write_critic_stage(self) -> Path:
        """`critic/` (what `learner.digiq.critic_path` reuses) and `trajectories/scored/`: the offline data with
        Q, V and the advantage of every candidate in each step's `info["digiq"]`."""
        stage = self.learners.critic_stage()
        folder = self.run_dir / "critic"
        tmp = self.run_dir / ".critic-tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        checkpoint.write_files(tmp, stage["files"])
        shutil.rmtree(folder, ignore_errors=True)
        os.rename(tmp, folder)
        scored_dir = self.run_dir / "trajectories" / "scored"
        shutil.rmtree(scored_dir, ignore_errors=True)
        writer, scores = ShardWriter(scored_dir), stage["scores"]
        for path in self.cfg.offline.data:
            chunk = [t for t in read_trajectories(path) if t.id in scores]
            for t in chunk:
                for step, step_scores in zip(t.steps, scores[t.id]):
                    step.info["digiq"] = step.info.get("digiq", {}) | step_scores
            writer.write(chunk)
        print(f"critic stage: {folder}; scores of {len(scores)} trajectories in {scored_dir}", flush=True)
        return folder

    def _load_offline_data(self) -> None:
        trajectories = [t for path in self.cfg.offline.data for t in read_trajectories(path)]
        kept = ray.get(self.buffer.add.remote(trajectories), timeout=600)
        if len(trajectories) > self.cfg.replay.capacity:
            log.warning(
                "offline.data holds %d trajectories but replay.capacity is %d: only the newest are kept",
                len(trajectories),
                self.cfg.replay.capacity,
            )
        print(f"offline data: {len(trajectories)} trajectories read, {kept} trainable ones in the buffer", flush=True)
        self.counters["offline_trajectories"] = kept

    def _restore(self) -> None:
        found = checkpoint.latest(self.run_dir)
        state = checkpoint.read_json(found / "state.json")
        files = checkpoint.read_files(found / "policy", "policy")
        files["learner.pt"] = (found / "learner.pt").read_bytes()
        self.learners.load(files)
        ray.get(self.buffer.load.remote(str(found), state["replay"]), timeout=600)
        self.iteration = state["iteration"]
        self.counters = Counter(state["counters"])
        self.tasks.load_state_dict(state["tasks"])
        self._truncate_metrics(self.iteration)
        print(f"resumed from {found} at iteration {self.iteration}", flush=True)

    def _truncate_metrics(self, iteration: int) -> None:
        """Drop metric lines written after the checkpoint we resume from; they will be redone."""
        records = [r for r in read_metrics(self.run_dir) if r["iteration"] <= iteration]
        (self.run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))

    def shutdown(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()
        self.learners.kill()
        for actor in (self.buffer, self.weight_store):
            ray.kill(actor, no_restart=True)


def per_group_success(trajectories: list[Trajectory]) -> dict:
    """Training success rate per MiniWoB++ task or website (PAE reports it per site)."""
    groups: dict[str, list[bool]] = {}
    for t in trajectories:
        groups.setdefault(task_group(t.task), []).append(t.outcome == "success")
    return {f"train/success_rate/{g}": float(np.mean(v)) for g, v in sorted(groups.items())}
