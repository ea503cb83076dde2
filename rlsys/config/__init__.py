"""Experiment configuration: YAML with `extends:`, dotted overrides, typed validation, secrets.

Everything is checked before any process starts: an unknown key names itself and the closest
valid key, a wrong type names the key path and the type expected. The schema is one module per
section (run.py, env.py, policy.py, learner.py, evaluator.py; schema.py holds the root), the
loader reads and validates files (UTF-8 only, text_files.py; yaml_load.py refuses alias bombs and keys given
twice), redaction.py keeps the fields the schema declares secret out of everything stored, checks.py holds the
rules that span sections, bounds.py the numbers no run can use, and run_dir.py run names, run folders and what a
resume may change.
"""

from rlsys.config.checks import check_consistency, check_extras, check_paths
from rlsys.config.env import AndroidConfig, EnvConfig, SimConfig, SynthWebConfig, SynthWebTasksConfig, TasksConfig
from rlsys.config.errors import ConfigError
from rlsys.config.evaluator import EvaluatorConfig, EvaluatorPoolConfig, JudgeConfig, ProposerConfig
from rlsys.config.learner import (
    DigiQCandidatesConfig,
    DigiQConfig,
    DigiQRepresentationConfig,
    DigiRLConfig,
    GRPOConfig,
    LearnerConfig,
)
from rlsys.config.loader import (
    build,
    config_path,
    load_config,
    packaged_configs,
    save_config,
    to_dict,
    unresolved_dict,
)
from rlsys.config.policy import ApiConfig, LoraConfig, PolicyConfig, ServerConfig
from rlsys.config.redaction import REDACTED, redacted_dict, secret_paths
from rlsys.config.run import MetricsConfig, OfflineConfig, RayConfig, ReplayConfig, RunConfig, RunnersConfig
from rlsys.config.schema import Config

__all__ = [
    "REDACTED",
    "AndroidConfig",
    "ApiConfig",
    "Config",
    "ConfigError",
    "DigiQCandidatesConfig",
    "DigiQConfig",
    "DigiQRepresentationConfig",
    "DigiRLConfig",
    "EnvConfig",
    "EvaluatorConfig",
    "EvaluatorPoolConfig",
    "GRPOConfig",
    "JudgeConfig",
    "LearnerConfig",
    "LoraConfig",
    "MetricsConfig",
    "OfflineConfig",
    "PolicyConfig",
    "ProposerConfig",
    "RayConfig",
    "ReplayConfig",
    "RunConfig",
    "RunnersConfig",
    "ServerConfig",
    "SimConfig",
    "SynthWebConfig",
    "SynthWebTasksConfig",
    "TasksConfig",
    "build",
    "check_consistency",
    "check_extras",
    "check_paths",
    "config_path",
    "load_config",
    "packaged_configs",
    "redacted_dict",
    "save_config",
    "secret_paths",
    "to_dict",
    "unresolved_dict",
]
