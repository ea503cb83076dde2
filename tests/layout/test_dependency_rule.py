"""The dependency rule (docs/architecture.md#layout): import-linter's contracts hold, a breach is caught, and every
package and module directly in rlsys/ has its place in the layers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
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


LAYERS = next(c for c in CONTRACTS if c["type"] == "layers")


def layered_packages() -> set[str]:
    return {name.strip() for layer in LAYERS["layers"] for name in layer.replace(":", "|").split("|")}


def test_the_contracts_hold():
    result = lint()
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in result.stdout


def test_a_learner_importing_an_actor_breaks_the_rule(tmp_path):
    result = lint({"rlsys/learners/shortcut.py": "from rlsys.actors.runner import EnvRunner\n"}, tmp_path)
    assert result.returncode != 0
    assert f"{LAYERS['name']} BROKEN" in " ".join(result.stdout.split())
    assert "rlsys.learners.shortcut -> rlsys.actors.runner" in result.stdout


def test_a_library_module_importing_the_driver_breaks_the_rule(tmp_path):
    result = lint({"rlsys/core/shortcut.py": "def f():\n    from rlsys.driver.trainer import Trainer\n"}, tmp_path)
    assert result.returncode != 0
    assert "rlsys.core.shortcut -> rlsys.driver.trainer" in result.stdout


def test_the_driver_importing_a_command_breaks_the_rule(tmp_path):
    result = lint({"rlsys/driver/shortcut.py": "from rlsys.cli.train import main\n"}, tmp_path)
    assert result.returncode != 0
    assert "rlsys.driver.shortcut -> rlsys.cli.train" in result.stdout


def test_every_package_and_module_of_rlsys_has_its_layer():
    """A new folder or module directly in rlsys/ must be placed in the layers, or nothing would check it."""
    found = {f"rlsys.{p.parent.name}" for p in (ROOT / "rlsys").glob("*/__init__.py")}
    found |= {f"rlsys.{p.stem}" for p in (ROOT / "rlsys").glob("*.py") if p.stem != "__init__"}
    data_only = {"rlsys.configs"}  # the packaged YAML files: no code to place
    assert found - data_only == layered_packages()


def test_nothing_points_outside_the_repository():
    notes = ["REFERENCE", "DESIGN"]  # the design notes the project started from live outside it
    found = subprocess.run(
        ["git", "grep", "-n", "-e", f"{notes[0]}.md", "-e", f"{notes[1]}.md"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert found.stdout == "", found.stdout
