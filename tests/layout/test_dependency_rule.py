"""The dependency rule (README "Layout"): import-linter's contracts hold, a breach is caught, and the
contracts' list of roof modules is every module directly in rlsys/."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
LIBRARY = {"rlsys.core", "rlsys.config", "rlsys.data", "rlsys.policies", "rlsys.llm"}
LINT_IMPORTS = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def lint(extra_files: dict[str, str] | None = None, tmp_path: Path | None = None) -> subprocess.CompletedProcess:
    """`lint-imports` on the repository; with `extra_files` (path -> source), on a copy of the package that
    also holds them."""
    where, env = ROOT, dict(os.environ)
    if extra_files:
        shutil.copytree(ROOT / "rlsys", tmp_path / "rlsys", ignore=shutil.ignore_patterns("__pycache__"))
        for rel, text in extra_files.items():
            (tmp_path / rel).write_text(text)
        where, env["PYTHONPATH"] = tmp_path, str(tmp_path)
    command = [sys.executable, "-c", LINT_IMPORTS, "--config", str(ROOT / "pyproject.toml"), "--no-cache"]
    return subprocess.run(command, cwd=where, env=env, capture_output=True, text=True, timeout=300)


def test_the_contracts_hold():
    result = lint()
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in result.stdout


def test_a_learner_importing_an_actor_breaks_the_rule(tmp_path):
    result = lint({"rlsys/learners/shortcut.py": "from rlsys.actors.runner import EnvRunner\n"}, tmp_path)
    assert result.returncode != 0
    assert "Learners import only the library BROKEN" in result.stdout
    assert "rlsys.learners.shortcut -> rlsys.actors.runner" in result.stdout


def test_a_library_module_importing_the_driver_breaks_the_rule(tmp_path):
    result = lint({"rlsys/core/shortcut.py": "def f():\n    from rlsys.trainer import Trainer\n"}, tmp_path)
    assert result.returncode != 0
    assert "Library subpackages import only the library BROKEN" in result.stdout


def test_every_roof_module_is_forbidden_to_the_layers_below():
    roof = {f"rlsys.{p.stem}" for p in (ROOT / "rlsys").glob("*.py") if p.stem not in ("__init__", "__main__")}
    linked = {"rlsys.actors", "rlsys.learners", "rlsys.envs", "rlsys.configs"}  # the folders beside rlsys/
    subpackages = {f"rlsys.{p.parent.name}" for p in (ROOT / "rlsys").glob("*/__init__.py")} - linked
    assert subpackages == LIBRARY, "a new library subpackage needs its place in pyproject's contracts"
    for contract in CONTRACTS:
        forbidden = set(contract["forbidden_modules"])
        assert roof <= forbidden, f"{contract['name']!r} does not forbid {sorted(roof - forbidden)}"


def test_nothing_points_outside_the_repository():
    notes = ["REFERENCE", "DESIGN"]  # the design notes the project started from live outside it
    found = subprocess.run(
        ["git", "grep", "-n", "-e", f"{notes[0]}.md", "-e", f"{notes[1]}.md"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert found.stdout == "", found.stdout
