"""CI installs from constraints.txt, and pyproject promises no version that CI does not test.

setup.sh installs every package at the version constraints.txt names (scripts/lock.py writes it), so
each lower bound in pyproject.toml must be the release CI runs: a bound below it would be a promise
nobody checks."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import lock  # noqa: E402


def test_lower_bounds_are_the_tested_releases():
    assert lock.bound_mismatches(lock.read_constraints()) == []


def test_a_bound_below_the_tested_release_is_reported():
    pins = lock.read_constraints()
    pins["ray"] = "2.99.0"
    assert any(line.startswith("ray:") for line in lock.bound_mismatches(pins))


def test_this_environment_runs_the_locked_versions():
    pins = lock.read_constraints()
    direct = {canonicalize_name(r.name) for r in lock.direct_requirements()} - set(lock.UNLOCKED)
    installed = {name: importlib.metadata.version(name) for name in direct}
    differ = {name: (v, pins[name]) for name, v in installed.items() if v != pins[name]}
    assert differ == {}, f"installed vs constraints.txt: {differ}; run bash scripts/setup.sh"
