"""What an algorithm adds to the driver's loop between iterations, kept out of the loop itself.

- Digi-Q ends its critic phase with a stage of its own: `critic/` (the trained critic, which
  `learner.digiq.critic_path` reuses) and `scored/` (the offline data with the Q, V and advantage of
  every candidate).
- PAE proposes new training tasks every `proposer.every` online iterations.

A hook's `after_iteration(context)` runs once per finished iteration and returns metrics for its record; the
context is what a hook may see of the run, not the trainer.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rlsys.config import Config
from rlsys.data import checkpoint
from rlsys.data.shards import ShardWriter, read_trajectories
from rlsys.envs.tasks import TaskSource
from rlsys.learners.registry import critic_stage_end


@dataclass(frozen=True)
class IterationContext:
    cfg: Config
    run_dir: Path
    iteration: int
    online_iteration: int  # iterations since the offline phase ended (0 or less during it)
    tasks: TaskSource  # the training tasks, to which a hook may add
    critic_stage: Callable[[], dict]  # Digi-Q's finished critic: its files and every offline step's scores


class IterationHook(Protocol):
    def after_iteration(self, context: IterationContext) -> dict: ...


def hooks_for(cfg: Config) -> list[IterationHook]:
    hooks: list[IterationHook] = []
    if critic_stage_end(cfg):
        hooks.append(CriticStage(critic_stage_end(cfg)))
    if cfg.proposer.every:
        hooks.append(TaskProposals(cfg.proposer.every))
    return hooks


class CriticStage:
    """Digi-Q: after iteration `end`, write the finished critic and the scored dataset."""

    def __init__(self, end: int):
        self.end = end

    def after_iteration(self, context: IterationContext) -> dict:
        if context.iteration == self.end:
            write_critic_stage(context)
        return {}


def write_critic_stage(context: IterationContext) -> Path:
    stage = context.critic_stage()
    run_dir = context.run_dir
    folder, tmp = run_dir / "critic", run_dir / ".critic-tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    checkpoint.write_files(tmp, stage["files"])
    shutil.rmtree(folder, ignore_errors=True)
    os.rename(tmp, folder)
    scored_dir = run_dir / "scored"
    shutil.rmtree(scored_dir, ignore_errors=True)
    writer, scores = ShardWriter(scored_dir, split="scored"), stage["scores"]
    for path in context.cfg.offline.data:
        chunk = [t for t in read_trajectories(path) if t.id in scores]
        for t in chunk:
            for step, step_scores in zip(t.steps, scores[t.id]):
                step.info["digiq"] = step.info.get("digiq", {}) | step_scores
        writer.write(chunk, context.iteration)
    print(f"critic stage: {folder}; scores of {len(scores)} trajectories in {scored_dir}", flush=True)
    return folder


class TaskProposals:
    """PAE: every `every` online iterations, new training tasks from the proposer LLM, one example per
    site (`proposer.examples`, or the first training task of each site). A failed call costs this
    round's proposals, not the run."""

    def __init__(self, every: int):
        self.every = every
        self.client = None  # one client for the run, not one per round

    def after_iteration(self, context: IterationContext) -> dict:
        online = context.online_iteration
        if online <= 0 or online % self.every:
            return {}
        from rlsys.envs.web.task_proposer import load_examples, propose_new_tasks, site_examples
        from rlsys.llm import make_client

        cfg, tasks_cfg, tasks = context.cfg.proposer, context.cfg.tasks, context.tasks
        if cfg.examples:
            examples = load_examples(cfg.examples, tasks_cfg.url_map)
        else:
            examples = list(site_examples(tasks.pool, warn=False).values())
        if self.client is None:
            self.client = make_client(cfg.llm, key="proposer.llm")
        url_map, suite = tasks_cfg.url_map, tasks_cfg.suite
        new = propose_new_tasks(cfg, self.client, examples, tasks.pool, url_map=url_map, suite=suite)
        added = tasks.add(new)
        print(f"task proposer: {added} new training tasks ({len(tasks.pool)} in all)", flush=True)
        return {"tasks/proposed": added, "tasks/pool": len(tasks.pool)}
