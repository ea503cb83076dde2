"""rlsys: distributed actor-learner reinforcement learning for agents that operate phones and browsers.

The library (core, config, llm, policies, data), the environments (envs), the Ray actors (actors), the algorithms
(learners), and above them the driver, the report and the console scripts (driver, report, cli); api.py is the
Python API. See docs/architecture.md#layout."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("rlsys")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
