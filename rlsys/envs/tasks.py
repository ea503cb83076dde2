"""Task sources: which task an env runner plays next, and the fixed evaluation problems."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

from rlsys.config import ConfigError, TasksConfig
from rlsys.core.types import Task, task_group

EVAL_SEED_BASE = 1_000_000  # evaluation problems never share a seed with training ones


def miniwob_task(name: str, seed: int, split: str) -> Task:
    return Task(id=f"{name}#{seed}", instruction="", suite="miniwob", split=split, start=name, meta={"seed": seed})


def miniwob_names(names: list[str]) -> list[str]:
    """`["all"]` means every task the installed `miniwob` package ships; unknown names are an error."""
    from rlsys.envs.web.miniwob import available_tasks

    available = available_tasks()
    if names == ["all"]:
        return available
    unknown = [n for n in names if n not in available]
    if unknown:
        raise ConfigError(f"tasks: unknown MiniWoB++ task(s) {unknown}; see envs.web.miniwob.available_tasks()")
    return list(names)


def load_suite(cfg: TasksConfig, split: str) -> list[Task]:
    """The tasks of a web or AitW suite from its file (`tasks.eval_file` for evaluation, if set); the synthetic
    suite's are made from `tasks.synthweb`."""
    if cfg.suite == "synthweb":
        from rlsys.envs.synthweb import suite_tasks

        return suite_tasks(cfg.synthweb, split)
    path = (cfg.eval_file or cfg.file) if split == "eval" else cfg.file
    kind = "an AitW text file, one instruction per line" if is_aitw(cfg.suite) else "a JSONL task file"
    if not path:
        raise ConfigError(f"tasks.suite = {cfg.suite!r} needs tasks.file ({kind})")
    if not Path(path).is_file():
        key = "tasks.eval_file" if split == "eval" and cfg.eval_file else "tasks.file"
        raise ConfigError(f"{key}: {path} does not exist")
    if is_aitw(cfg.suite):
        from rlsys.envs.android.tasks import load_aitw_file

        tasks = load_aitw_file(path, cfg.suite, split)
    else:
        from rlsys.envs.web.task_files import load_task_file

        tasks = load_task_file(path, split=split, url_map=cfg.url_map, suite=cfg.suite)
    for task in tasks:
        check_task_size(task, path)
    return tasks


# bytes (UTF-8) a task's fields may take: a task is shown to the policy and stored with every trajectory
MAX_TASK_FIELDS = {"instruction": 4096, "id": 1024, "start": 4096, "checks": 65536, "meta": 65536}


def check_task_size(task: Task, source: str) -> None:
    for name, limit in MAX_TASK_FIELDS.items():
        value = getattr(task, name)
        size = len((value if isinstance(value, str) else json.dumps(value, default=str)).encode())
        if size > limit:
            raise ConfigError(
                f"{source}: task {task.id[:100]!r}: {name} is {size} bytes, more than the {limit} a task may hold"
            )


def is_aitw(suite: str) -> bool:
    return suite.startswith("aitw-")


class TaskSource:
    """Training tasks, drawn at random (or in order); MiniWoB++ problems get fresh seeds.
    Its state is checkpointed, so a resumed run draws the tasks it would have drawn.

    With `group_size` G > 1 each drawn task is issued G times in a row, every copy from the same start (the same
    MiniWoB++ seed), as a rollout group for GRPO: each copy's `meta` holds the group's id (`rollout_group`, the
    draw's index as a string, unique within the run) and `group_size`. `drawn` counts draws, not copies. A resumed
    source starts a new group: the rest of a group cut by the checkpoint is never issued, as the episodes in
    flight are lost anyway."""

    def __init__(self, cfg: TasksConfig, seed: int = 0, group_size: int = 1):
        self.suite = cfg.suite
        self.sampling = cfg.sampling
        self.group_size = group_size
        if cfg.suite == "miniwob":
            self.pool: list = miniwob_names(cfg.train)
        else:
            self.pool = load_suite(cfg, "train")
        if not self.pool:
            raise ConfigError("tasks: the training task list is empty")
        self._rng = random.Random(seed)
        self.drawn = 0
        self._base = list(self.pool)
        self.added: list[Task] = []  # tasks added after loading (e.g. proposed ones), in order
        self._group: Task | None = None  # the task of the group being issued
        self._copies_left = 0

    def next(self) -> Task:
        if self.group_size == 1:
            return self._draw()
        if not self._copies_left:
            self._group = self._draw()
            self._group.meta.update(rollout_group=str(self.drawn - 1), group_size=self.group_size)
            self._copies_left = self.group_size
        self._copies_left -= 1
        return dataclasses.replace(self._group, meta=dict(self._group.meta))

    def _draw(self) -> Task:
        if self.sampling == "sequential":
            item = self.pool[self.drawn % len(self.pool)]
        else:
            item = self._rng.choice(self.pool)
        self.drawn += 1
        if self.suite == "miniwob":
            return miniwob_task(item, self._rng.randrange(EVAL_SEED_BASE), "train")
        return dataclasses.replace(item, meta=dict(item.meta))

    def add(self, tasks: list[Task]) -> int:
        """Add web tasks (such as proposed ones) to the training pool, after the others; a task whose id
        is already in the pool is skipped. Returns how many were added. Added tasks are checkpointed."""
        if self.suite == "miniwob":
            raise ValueError("TaskSource.add: the miniwob suite's tasks are MiniWoB++ names; tasks cannot be added")
        ids = {task.id for task in self.pool}
        added = 0
        for task in tasks:
            if not isinstance(task, Task):
                raise TypeError(f"TaskSource.add takes Tasks, got {type(task).__name__}")
            if task.id in ids:
                continue
            task = dataclasses.replace(task, meta=dict(task.meta))
            self.pool.append(task)
            self.added.append(task)
            ids.add(task.id)
            added += 1
        return added

    def state_dict(self) -> dict:
        version, internal, gauss = self._rng.getstate()
        return {
            "drawn": self.drawn,
            "rng": [version, list(internal), gauss],
            "added": [dataclasses.asdict(task) for task in self.added],
        }

    def load_state_dict(self, state: dict) -> None:
        version, internal, gauss = state["rng"]
        self._rng.setstate((version, tuple(internal), gauss))
        self.drawn = state["drawn"]
        self._copies_left = 0
        self.pool = list(self._base)
        self.added = []
        if state.get("added"):
            self.add([Task(**task) for task in state["added"]])


def eval_tasks(cfg: TasksConfig, episodes: int) -> list[Task]:
    """The same problems at every evaluation: MiniWoB++ tasks spread evenly with fixed seeds; a web or
    AitW suite's evaluation tasks in file order (at most `episodes`, repeated if there are fewer): AitW's
    protocol is the first 96 of the test file."""
    if cfg.suite == "miniwob":
        names = miniwob_names(cfg.eval or cfg.train)
        return [miniwob_task(names[i % len(names)], EVAL_SEED_BASE + i, "eval") for i in range(episodes)]
    tasks = load_suite(cfg, "eval")
    return [_pass(tasks[i % len(tasks)], i // len(tasks)) for i in range(episodes)]


def _pass(task: Task, n: int) -> Task:
    """A copy of an evaluation task; from the second pass over the tasks on, marked with its pass, so that an env
    that draws at random plays a repeat with other draws."""
    return dataclasses.replace(task, meta={**task.meta, "eval_pass": n} if n else task.meta)


def eval_groups(tasks: list[Task]) -> list[str]:
    return list(dict.fromkeys(task_group(t) for t in tasks))


def check_tasks(cfg: TasksConfig, env_kind: str) -> None:
    """Every task problem as a ConfigError, before anything starts: a suite the env cannot play,
    an unknown task name, a bad task file (with its line number)."""
    from rlsys.envs.web.task_files import TaskFileError

    wanted = {"miniwob": "miniwob", "synthweb": "synthweb"}.get(cfg.suite, "android" if is_aitw(cfg.suite) else "web")
    if env_kind not in (wanted, "sim"):  # the simulated env plays any suite's tasks
        raise ConfigError(f"tasks.suite = {cfg.suite!r} is played by env.kind = {wanted!r}, not {env_kind!r}")
    try:
        TaskSource(cfg)
        eval_tasks(cfg, 1)
    except TaskFileError as e:
        raise ConfigError(str(e)) from None
