"""A user's check on the Evaluator contract.

The env's own checks (MiniWoB++'s page reward, WebArena's string/url/program_html checks) need the
live page, so the env runs them as the episode ends and records their `Verdict` in the last step's
info. `FunctionCheck` calls a user's hook (`package.module:callable`) on the finished trajectory,
e.g. an Android check of the foreground activity.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from rlsys.core.evaluator import Verdict
from rlsys.core.types import Task, Trajectory


def load_hook(spec: str, key: str = "evaluator.function") -> Callable:
    """`package.module:callable` imported and checked; errors name the config key."""
    module_name, sep, attr = (spec or "").partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{key} must look like 'package.module:callable', got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"{key}: cannot import {module_name!r}: {e}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ValueError(f"{key}: {module_name!r} has no callable {attr!r}")
    return fn


class FunctionCheck:
    """A user's check `fn(task, trajectory) -> Verdict | bool | None`. An exception, a result of another
    type, or no answer within `timeout_s` is an unknown verdict that says why."""

    def __init__(self, spec: str, timeout_s: float = 60.0):
        self.fn = load_hook(spec)
        self.source = f"function:{spec}"
        self.timeout_s = timeout_s
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="check")

    def judge(self, task: Task, trajectory: Trajectory) -> Verdict:
        t0 = time.monotonic()
        future = self._executor.submit(self.fn, task, trajectory)
        try:
            result = future.result(timeout=self.timeout_s)
        except FutureTimeout:
            # the stuck call keeps its thread; later checks get a fresh one
            self._executor.shutdown(wait=False)
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="check")
            return Verdict(None, self.source, f"the check gave no answer within {self.timeout_s:g}s")
        except Exception as e:  # noqa: BLE001 - a failing check is an unknown verdict, never a crash or a 0
            return Verdict(None, self.source, f"the check raised {type(e).__name__}: {e}", latency_s=_since(t0))
        if isinstance(result, Verdict):
            return result
        if isinstance(result, bool):
            return Verdict(result, self.source, "the check returned " + str(result), latency_s=_since(t0))
        return Verdict(None, self.source, f"the check returned {result!r}, not a bool or Verdict", latency_s=_since(t0))


def _since(t0: float) -> float:
    return time.monotonic() - t0
