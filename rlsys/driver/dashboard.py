"""The run's numbers as Ray metrics, shown in the Ray dashboard's metrics view (and exported to
Prometheus by Ray's metrics agent). Every series carries the run's name as the `run` tag.

Counters grow as trajectories arrive; gauges are set once per iteration from the same record that
goes to metrics.jsonl, so the dashboard and the run folder never disagree.
"""

from __future__ import annotations

from ray.util.metrics import Counter, Gauge

# gauge name -> the iteration-record key it shows
GAUGES = {
    "rlsys_env_steps_per_s": "time/env_steps_per_s",
    "rlsys_success_rate": "train/success_rate",
    "rlsys_policy_lag": "train/policy_lag",
    "rlsys_policy_version": "policy_version",
    "rlsys_buffer_trajectories": "replay/size",
    "rlsys_buffer_bytes": "replay/bytes",
    "rlsys_judge_latency_p50_s": "judge/latency_p50_s",
    "rlsys_judge_seconds_per_trajectory": "train/judge_seconds_per_trajectory",
    "rlsys_runner_restarts": "runners/restarts",
    "rlsys_runners_alive": "runners/alive",
    "rlsys_learner_train_s": "time/train_s",
}


class RunMetrics:
    def __init__(self, run_name: str):
        self.tags = {"run": run_name}
        self.trajectories = Counter("rlsys_trajectories", "finished episodes, by outcome", tag_keys=("run", "outcome"))
        self.env_steps = Counter("rlsys_env_steps", "env steps taken by training episodes", tag_keys=("run",))
        self.gauges = {name: Gauge(name, f"iteration record: {key}", tag_keys=("run",)) for name, key in GAUGES.items()}

    def trajectories_finished(self, outcomes: dict[str, int], steps: int) -> None:
        for outcome, n in outcomes.items():
            self.trajectories.inc(n, tags=self.tags | {"outcome": outcome})
        if steps:
            self.env_steps.inc(steps, tags=self.tags)

    def iteration(self, record: dict) -> None:
        for name, key in GAUGES.items():
            value = record.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self.gauges[name].set(float(value), tags=self.tags)
