"""Run metrics: one JSON object per iteration in metrics.jsonl, optional wandb, a progress bar.

Each record carries `time/run_s`, the run's wall clock: seconds since it started, evaluations and checkpoints
included, the time a stopped run waited for `--resume` left out (a resumed session goes on from the last record).

With wandb on, an evaluation also logs a table of its episodes (task, outcome, steps, actions, the
last screen), so the curves come with the episodes behind them. The wandb run id is kept in the run
folder (run_info.json), so `--resume` goes on logging to the same wandb run.
"""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path

import yaml
from tqdm import tqdm

from rlsys.config import Config, redacted_dict
from rlsys.core.types import task_group
from rlsys.driver.run_info import keep_wandb_run_id, wandb_run_id
from rlsys.report.page import is_number

log = logging.getLogger(__name__)


RUN_CLOCK = "time/run_s"


def last_run_seconds(path: Path) -> float:
    """The run clock of the last record in metrics.jsonl (0 for a new run, or records written before it existed)."""
    if not path.is_file():
        return 0.0
    for line in reversed(path.read_text(errors="replace").splitlines()):
        try:
            value = json.loads(line).get(RUN_CLOCK)
        except (ValueError, AttributeError):
            continue
        if is_number(value):
            return float(value)
    return 0.0


class MetricsLogger:
    def __init__(self, cfg: Config, run_dir: Path, config_for_logging: dict, total: int, start: int = 0):
        """wandb gets the run folder's config.yaml, as stored (`${env:…}` references kept, secrets redacted);
        `config_for_logging`, redacted again, only where the folder has none (a Trainer built in code)."""
        self.path = Path(run_dir) / "metrics.jsonl"
        self._clock_zero = time.monotonic() - last_run_seconds(self.path)
        self._file = self.path.open("a")
        self._bar = tqdm(total=total, initial=start, desc=cfg.run.name, unit="it", disable=not cfg.metrics.progress)
        self._wandb = None
        if cfg.metrics.wandb:
            import wandb

            self._wandb = wandb.init(
                project=cfg.metrics.wandb_project,
                name=cfg.run.name,
                id=wandb_run_id(run_dir),  # None for a new run: wandb makes one, kept below for --resume
                mode=cfg.metrics.wandb_mode,
                dir=str(run_dir),
                config=stored_config(Path(run_dir), config_for_logging),
                resume="allow",
                settings=wandb.Settings(api_key=cfg.metrics.wandb_api_key) if cfg.metrics.wandb_api_key else None,
            )
            keep_wandb_run_id(run_dir, self._wandb.id)

    def log(self, record: dict, advance: bool = True, episodes: list | None = None) -> dict:
        """One iteration's record; `episodes`, the evaluation episodes behind it, go to wandb as a table. Returns
        the record as written."""
        record = record | {RUN_CLOCK: round(time.monotonic() - self._clock_zero, 3)}
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}
        self._file.write(json.dumps(clean) + "\n")
        self._file.flush()
        if self._wandb is not None:
            logged = {k: v for k, v in clean.items() if isinstance(v, (int, float))}
            if episodes:
                logged["eval/episodes_table"] = episode_table(episodes[:WANDB_EPISODES])
            self._wandb.log(logged, step=record["iteration"])
        if advance:
            self._bar.update(1)
        shown = {
            k.split("/")[-1]: v
            for k, v in clean.items()
            if k in ("train/success_rate", "eval/success_rate", "actor/loss")
        }
        self._bar.set_postfix({k: round(v, 3) for k, v in shown.items() if v is not None})
        return clean

    def write(self, text: str) -> None:
        self._bar.write(text)

    def close(self) -> None:
        self._bar.close()
        self._file.close()
        if self._wandb is not None:
            self._wandb.finish()


def stored_config(run_dir: Path, fallback: dict) -> dict:
    path = run_dir / "config.yaml"
    stored = yaml.safe_load(path.read_text()) if path.is_file() else None
    return redacted_dict(stored if isinstance(stored, dict) else fallback)


WANDB_EPISODES = 16  # evaluation episodes per wandb table


def episode_table(trajectories: list):
    """A wandb table: one row per episode, with the screen its last action led to."""
    import io

    import wandb
    from PIL import Image

    table = wandb.Table(columns=["task", "group", "outcome", "steps", "actions", "last screen"])
    for t in trajectories:
        last = t.final_observation or (t.steps[-1].observation if t.steps else None)
        image = wandb.Image(Image.open(io.BytesIO(last.screenshot_png))) if last and last.screenshot_png else None
        actions = " | ".join(s.action_text for s in t.steps)
        table.add_data(t.task.id, task_group(t.task), t.outcome, len(t.steps), actions, image)
    return table


def summarize_eval(results: list, groups: list[str]) -> dict:
    """Success rates over evaluation trajectories; env errors and episodes without a verdict are
    counted, not scored."""
    judged = [t for t in results if t.trainable]
    rate = lambda ts: sum(t.outcome == "success" for t in ts) / len(ts) if ts else None
    out = {
        "eval/success_rate": rate(judged),
        "eval/episodes": len(results),
        "eval/env_errors": sum(t.outcome == "env_error" for t in results),
        "eval/unknown": sum(t.outcome == "unknown" for t in results),
    }
    out.update(judge_costs(results, "eval"))
    for group in groups:
        out[f"eval/success_rate/{group}"] = rate([t for t in judged if task_group(t.task) == group])
    return out


def judge_costs(trajectories: list, prefix: str) -> dict:
    """Judge calls and seconds spent judging, per trajectory (what rewards cost)."""
    spent = [t.steps[-1].info.get("judge") for t in trajectories if t.steps]
    spent = [s for s in spent if s]
    if not spent:
        return {}
    n = len(trajectories)
    return {
        f"{prefix}/judge_calls_per_trajectory": sum(s["calls"] for s in spent) / n,
        f"{prefix}/judge_seconds_per_trajectory": sum(s["seconds"] for s in spent) / n,
    }


def read_metrics(run_dir: Path) -> list[dict]:
    """The records of metrics.jsonl; a line that does not parse (torn by a crash mid-write) is skipped with a
    warning."""
    path = Path(run_dir) / "metrics.jsonl"
    records = []
    for number, line in enumerate(path.read_text().splitlines() if path.exists() else [], start=1):
        try:
            record = json.loads(line) if line.strip() else None
        except ValueError:
            record = False
        if isinstance(record, dict):
            records.append(record)
        elif record is not None:
            log.warning("%s: line %d is not a JSON record (torn by a crash mid-write?) and was skipped", path, number)
    return records


def percent(value) -> str:
    return f"{100 * value:.1f}%" if is_number(value) else "n/a"


def eval_table(records: list[dict]) -> str | None:
    """The evaluations of `records` as a table; a value that is not a number (a damaged metrics line) is n/a."""
    rows = [r for r in records if is_number(r.get("eval/success_rate"))]
    if not rows:
        return None
    tasks = sorted({k[len("eval/success_rate/") :] for r in rows for k in r if k.startswith("eval/success_rate/")})
    header = ["iteration", "policy_version", "eval success"] + tasks
    lines = [header] + [
        [str(r.get("iteration", "")), str(r.get("policy_version", "")), percent(r["eval/success_rate"])]
        + [percent(r.get("eval/success_rate/" + t)) for t in tasks]
        for r in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    fmt = lambda line: "  ".join(cell.rjust(w) for cell, w in zip(line, widths))
    out = [fmt(lines[0]), fmt(["-" * w for w in widths])] + [fmt(line) for line in lines[1:]]
    first, last = rows[0]["eval/success_rate"], rows[-1]["eval/success_rate"]
    out.append(f"eval success {100 * first:.1f}% -> {100 * last:.1f}% ({100 * (last - first):+.1f} points)")
    return "\n".join(out)
