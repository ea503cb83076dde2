"""Every command in the README's Commands table runs as written: its program (console script, benchmark or
example) starts and takes each flag the row shows, every packaged config the row names exists, the Python rows
import, and their Gymnasium ids are registered. Running each command in full is the job of its own tests."""

import concurrent.futures
import functools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlsys.config.loader import packaged_configs

ROOT = Path(__file__).resolve().parents[1]
PLACEHOLDER = re.compile(r"^[A-Z_./]+$|^runs/|^s3:|^OUT|^\.\.\.$")


def table_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Commands\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [re.match(r"\| `([^`]+)`", row).group(1) for row in rows]


COMMANDS = table_commands()


def test_the_table_is_read():
    assert len(COMMANDS) > 20 and "lint-imports" in COMMANDS


def flags(words: list[str]) -> list[str]:
    return [w.split("=")[0] for w in words if w.startswith("--")]


@functools.cache
def run_help(argv: tuple[str, ...]) -> subprocess.CompletedProcess:
    return subprocess.run([*argv, "--help"], capture_output=True, text=True, timeout=120, cwd=ROOT)


def help_text(argv: list[str]) -> str:
    done = run_help(tuple(argv))
    assert done.returncode == 0, f"{' '.join(argv)} --help: {done.stderr[-2000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def helps_started_together():
    """Each program's --help once, two at a time (each start is mostly imports on one core of two): a program
    that several rows show starts once. A program not on PATH is left to its own row to report."""
    rows = [c.replace("[", " ").replace("]", " ").split() for c in SHELL_COMMANDS]
    found = [w for w in rows if w != ["lint-imports"] and (w[0] == "python" or shutil.which(w[0]))]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(run_help, sorted({tuple(program(w)) for w in found})))


def program(words: list[str]) -> list[str]:
    """The argv that starts the command's program (with its subcommand, if it has one)."""
    if words[0] == "python":
        return [sys.executable, words[1]]
    assert shutil.which(words[0]), f"{words[0]} is not on PATH (pip install -e . installs the console scripts)"
    subcommand = words[1:2] if len(words) > 1 and re.fullmatch(r"[a-z][a-z0-9-]+", words[1]) else []
    return [words[0], *subcommand]


SHELL_COMMANDS = [c for c in COMMANDS if not c.startswith(("import ", "from "))]


@pytest.mark.usefixtures("helps_started_together")
@pytest.mark.parametrize("command", SHELL_COMMANDS)
def test_shell_command_starts_and_takes_its_flags(command):
    words = command.replace("[", " ").replace("]", " ").split()
    if words == ["lint-imports"]:
        done = subprocess.run(words, capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert done.returncode == 0, done.stdout[-2000:]
        return
    shown = help_text(program(words))
    for flag in flags(words):
        assert flag in shown, f"{command}: {flag} is not an option of the program"
    for i, word in enumerate(words[:-1]):
        named = words[i + 1]
        if word == "--config" and not PLACEHOLDER.match(named) and "/" not in named:
            assert named in packaged_configs(), f"{command}: no packaged config {named!r}"
        elif word in ("--config", "--print-config") and named.startswith("configs/"):
            assert (ROOT / named).is_file(), f"{command}: {named} does not exist"


@pytest.mark.parametrize("command", [c for c in COMMANDS if c.startswith(("import ", "from "))])
def test_python_row_imports_and_names_registered_ids(command):
    imports = [s.strip() for s in command.split(";") if s.strip().startswith(("import ", "from "))]
    ids = re.findall(r'gymnasium\.make\("([^"]+)"', command)
    script = "\n".join(imports + ["import gymnasium"] * bool(ids) + [f"gymnasium.spec({i!r})" for i in ids])
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env=os.environ | {"PYTHONPATH": str(ROOT)})  # fmt: skip
    assert done.returncode == 0, f"{command}: {done.stderr[-2000:]}"
