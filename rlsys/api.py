"""rlsys from Python: the run `rlsys-train` starts, for notebooks and sweep libraries.

    from rlsys.api import train

    result = train("quickstart", ["run.iterations=2"])
    print(result.final["eval/success_rate"], result.run_dir)

The same checks as on the command line run first (a `ConfigError` or `CheckpointError` names what is wrong,
before Ray starts and before anything is written), and the run folder is the same. Ray is started here and shut
down at the end, unless this process is connected already (a notebook that called `ray.init`, a Ray Tune
trial): the run's actors then join that Ray, which is left running. docs/examples/tune_seeds.py sweeps seeds
with Ray Tune.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rlsys.driver.run_folder import open_run_folder, prepare

__all__ = ["TrainResult", "train"]


@dataclass
class TrainResult:
    run_dir: Path
    metrics: list[dict] = field(default_factory=list)  # every record of the run's metrics.jsonl, in order

    @property
    def final(self) -> dict:
        """The last record: the last iteration's metrics, with its evaluation when one was due."""
        return self.metrics[-1] if self.metrics else {}


def train(
    config: str | os.PathLike | dict | None,
    overrides: list[str] = (),
    *,
    resume: str | os.PathLike | None = None,
    restart: bool = False,
    on_record: Callable[[dict], None] | None = None,
) -> TrainResult:
    """Train as `rlsys-train --config CONFIG [OVERRIDES] [--resume RUN_DIR] [--restart]` does and return the run's
    metrics. `config`: a YAML file, a packaged config's name, or the mapping such a file holds (None with `resume`:
    the run's own config.yaml). `on_record(record)` is called with each metrics record as it is written, e.g. to
    report it to Ray Tune. Ctrl-C raises KeyboardInterrupt with the finished episodes kept, as the CLI does."""
    import ray

    from rlsys.driver.ray_init import init_ray
    from rlsys.driver.trainer import Trainer

    run = prepare(config, list(overrides), str(resume) if resume is not None else None, restart)
    cfg = open_run_folder(run)
    run_dir = Path(os.path.abspath(run.run_dir))
    started_ray, _ = init_ray(cfg)
    trainer = None
    try:
        trainer = Trainer(cfg, run_dir, resume=run.resume, on_record=on_record)
        return TrainResult(run_dir, trainer.run())
    finally:
        if trainer is not None:
            trainer.shutdown()
        if started_ray:
            ray.shutdown()
