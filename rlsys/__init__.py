"""rlsys: distributed actor-learner reinforcement learning for agents that operate phones and browsers.

The library lives in subpackages (core, config, data, policies, llm, and, installed from beside this
folder, envs, learners and actors); the modules directly in this folder are the CLIs and the driver.
See docs/architecture.md."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("rlsys")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
