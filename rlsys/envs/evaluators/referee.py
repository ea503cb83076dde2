"""The runner's side of evaluation: which evaluator decides an episode, and what its verdict makes of it.

`evaluator.kind` (see `EvaluatorConfig`):
- `env`: the env's own outcome stands;
- `auto`: the env's outcome, and the judge for episodes the env could not score (`unknown`);
- `judge`: the judge decides every answered episode (one that ran out of steps is a timeout, no call),
  or, with `judge.every_step`, the screen after every step, a success verdict ending the episode;
- `function`: a user's check decides every episode that did not break.

A verdict's success ends as `success`; a failure as `failure` (or `timeout` when steps ran out);
no verdict as `unknown`, which is kept and counted but never trained on.
"""

from __future__ import annotations

import dataclasses
import time

from rlsys.config import EvaluatorConfig
from rlsys.core.evaluator import Verdict
from rlsys.core.types import Observation, Step, Task, Trajectory
from rlsys.envs.evaluators.checks import FunctionCheck
from rlsys.envs.evaluators.judges import screen_hash
from rlsys.envs.evaluators.pool import PoolJudge


class Referee:
    def __init__(self, cfg: EvaluatorConfig, pool=None):
        self.kind = cfg.kind
        self.judge = PoolJudge(pool, cfg.judge, cfg.pool.deadline_s) if pool is not None else None
        self.check = FunctionCheck(cfg.function, cfg.pool.deadline_s) if cfg.kind == "function" else None
        self.every_step = cfg.kind == "judge" and cfg.judge.every_step

    def episode(self) -> EpisodeReferee:
        return EpisodeReferee(self)


class EpisodeReferee:
    """One episode's judging: the calls it made, and the last screen judged with its verdict (the
    "screen did not change" shortcut lives here, never in a cache shared between episodes)."""

    def __init__(self, referee: Referee):
        self.referee = referee
        self.calls = 0
        self.judged = 0
        self.cached = 0
        self.shortcuts = 0
        self.seconds = 0.0
        self.unknown_steps = 0
        self._last: tuple[str, Verdict] | None = None

    @property
    def every_step(self) -> bool:
        return self.referee.every_step

    def after_step(self, task: Task, steps: list[Step], screen: Observation) -> Verdict:
        """Judge the screen the last step led to (every_step mode); records the verdict on the step."""
        h = screen_hash(screen.screenshot_png)
        if self._last is not None and self._last[0] == h:
            self.shortcuts += 1
            verdict = dataclasses.replace(self._last[1], calls=0, cached=True, latency_s=0.0)
        else:
            verdict = self._ask(self.referee.judge, task, Trajectory(task, steps, "unknown", final_observation=screen))
            self._last = (h, verdict)
        self.unknown_steps += verdict.success is None
        steps[-1].info["verdict"] = verdict.to_dict()
        return verdict

    def settle(self, trajectory: Trajectory) -> Trajectory:
        """The episode's final outcome under the configured evaluator."""
        referee, outcome = self.referee, trajectory.outcome
        if outcome == "env_error" or not trajectory.steps:
            return trajectory
        if self.every_step:
            if outcome != "success":  # no step was judged a success
                trajectory.steps[-1].reward = 0.0
                trajectory.outcome = "timeout" if outcome == "timeout" else "failure"
                if self.unknown_steps:
                    trajectory.outcome = "unknown"
                    trajectory.error = f"the judge gave no verdict on {self.unknown_steps} step(s)"
        elif referee.check is not None:
            _apply(trajectory, self._ask(referee.check, trajectory.task, trajectory))
        elif referee.judge is not None and (outcome == "unknown" or (referee.kind == "judge" and outcome != "timeout")):
            _apply(trajectory, self._ask(referee.judge, trajectory.task, trajectory))
        if self.judged:
            trajectory.steps[-1].info["judge"] = {
                "verdicts": self.judged,
                "calls": self.calls,
                "cached": self.cached,
                "shortcuts": self.shortcuts,
                "seconds": round(self.seconds, 4),
            }
        return trajectory

    def _ask(self, evaluator, task: Task, trajectory: Trajectory) -> Verdict:
        t0 = time.monotonic()
        verdict = evaluator.judge(task, trajectory)
        self.seconds += time.monotonic() - t0
        self.judged += 1
        self.calls += verdict.calls
        self.cached += verdict.cached
        return verdict


def _apply(trajectory: Trajectory, verdict: Verdict) -> None:
    last = trajectory.steps[-1]
    last.info["verdict"] = verdict.to_dict()
    if verdict.success is None:
        trajectory.outcome = "unknown"
        trajectory.error = f"no verdict from {verdict.source}: {verdict.reason}"
        last.reward = 0.0
    elif verdict.success:
        trajectory.outcome = "success"
        last.reward = float(verdict.reward)
    else:
        trajectory.outcome = "timeout" if trajectory.outcome == "timeout" else "failure"
        last.reward = 0.0
