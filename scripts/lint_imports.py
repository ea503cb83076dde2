"""Check the dependency rule with import-linter (`lint-imports`, contracts in pyproject.toml).

import-linter reads a package from one folder on disk, but rlsys installs actors/, learners/ and
envs/ from beside rlsys/ (pyproject's package-dir). So this lays out the installed namespace in a
temporary folder, one symbolic link per source file, and runs `lint-imports` on that.

    python scripts/lint_imports.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAPPED = {"rlsys": "rlsys", "actors": "rlsys/actors", "learners": "rlsys/learners", "envs": "rlsys/envs"}


def mirror(dest: Path) -> None:
    """`dest/rlsys/...` as the wheel lays it out: every .py file, linked to its source."""
    for source, target in MAPPED.items():
        for path in (ROOT / source).rglob("*.py"):
            link = dest / target / path.relative_to(ROOT / source)
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(path)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="rlsys-layout-") as tmp:
        mirror(Path(tmp))
        env = {**os.environ, "PYTHONPATH": tmp}
        run_cli = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
        command = [sys.executable, "-c", run_cli, "--config", str(ROOT / "pyproject.toml"), "--no-cache"]
        return subprocess.run(command, cwd=tmp, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
