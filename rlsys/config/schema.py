"""The whole config: one section per top-level key; every key and its default is in the section modules."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from rlsys.config.env import EnvConfig, TasksConfig
from rlsys.config.evaluator import EvaluatorConfig, ProposerConfig
from rlsys.config.learner import LearnerConfig
from rlsys.config.policy import PolicyConfig
from rlsys.config.run import MetricsConfig, OfflineConfig, RayConfig, ReplayConfig, RunConfig, RunnersConfig
from rlsys.config.run_dir import is_remote_uri


@dataclass
class Config:
    run: RunConfig = field(default_factory=RunConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    runners: RunnersConfig = field(default_factory=RunnersConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    tasks: TasksConfig = field(default_factory=TasksConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    offline: OfflineConfig = field(default_factory=OfflineConfig)
    evaluator: EvaluatorConfig = field(default_factory=EvaluatorConfig)
    proposer: ProposerConfig = field(default_factory=ProposerConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)

    @property
    def output_dir(self) -> Path:
        """The run's folder on this machine; for a remote run.output_dir (s3://, gs://) its local copy."""
        if is_remote_uri(self.run.output_dir):
            return Path(self.run.scratch_dir or os.path.join("runs", self.run.name))
        return Path(self.run.output_dir or os.path.join("runs", self.run.name))
