"""Android in the Wild task files: plain text, one instruction per line (repeats are kept, as released).

The suite sets the start state: `aitw-general` tasks start on the home screen, `aitw-webshop` tasks in
the browser (env.android.browser_url).
"""

from __future__ import annotations

from pathlib import Path

from rlsys.core.types import Task
from rlsys.envs.web.task_files import TaskFileError

START = {"aitw-general": "home", "aitw-webshop": "browser"}


def load_aitw_file(path: str | Path, suite: str, split: str) -> list[Task]:
    if suite not in START:
        raise ValueError(f"unknown AitW suite {suite!r}; expected one of {sorted(START)}")
    path = Path(path)
    try:
        lines = path.read_bytes().decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        line = path.read_bytes()[: e.start].count(b"\n") + 1
        raise TaskFileError(f"{path}:{line}: not UTF-8 text ({e.reason})") from None
    tasks = []
    for lineno, line in enumerate(lines, start=1):
        instruction = line.strip()
        if not instruction:
            continue
        if instruction.startswith("{"):
            raise TaskFileError(
                f"{path}:{lineno}: looks like JSON; an AitW task file has one plain instruction per line "
                "(JSONL task files are for the web suites)"
            )
        task_id = f"{suite}/{path.stem}:{lineno}"
        tasks.append(Task(task_id, instruction, suite, split, start=START[suite], meta={"line": lineno}))
    if not tasks:
        raise TaskFileError(f"{path}: no instructions in the file")
    return tasks
