"""A run folder read into its report page, for `rlsys-report` and for the trainer after every evaluation; what the
page holds is in the command's help (rlsys/cli/report.py). A shard or metrics line that cannot be read is named
with the reason, and the rest of the run is still shown."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import math
import os
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from PIL import Image

from rlsys import __version__
from rlsys.config.errors import shown
from rlsys.core.types import Observation, Task, Trajectory, task_group
from rlsys.data.shards import SCHEMA, StorageError, from_table
from rlsys.report.compare import ComparedRun, comparison_page
from rlsys.report.page import (
    browser_section,
    esc,
    eval_rows,
    eval_table_section,
    image_block,
    is_number,
    json_block,
    json_text,
    key_value_table,
    page,
)
from rlsys.report.plots import RATES, axes_of, plot_specs, plots_section
from rlsys.report.steps import action_overlay, policy_input, rounded, shortened_locations

DEFAULT_MAX_TRAJECTORIES = 200
DEFAULT_MAX_BYTES = 25_000_000
COMPARISON_PAGE = "report-compare.html"  # in the current folder, for several runs
THUMB_WIDTH, THUMB_MAX_HEIGHT, JPEG_QUALITY = 320, 960, 70
UI_TEXT_CHARS = 2000  # of each observation's element list
THUMBNAIL_BATCH = 8  # trajectories whose screenshots are thumbnailed together
INDEX_COLUMNS = ["trajectory_id", "task", "outcome", "step_index", "done", "reward"]
SPLITS = ("eval", "train", "scored")


# ---------------------------------------------------------------------------------------------- reading


@dataclass
class Shard:
    path: Path
    split: str
    iteration: int | None  # from the metrics and the shard's order; a shard's own column overrides it
    inferred: bool


@dataclass
class Entry:
    """One trajectory as the index knows it: enough to list, filter and sample it without its screenshots."""

    id: str
    shard: Shard
    position: int
    task: Task
    outcome: str
    split: str
    iteration: int | None
    inferred: bool
    steps: int = 0
    reward: float = 0.0


@dataclass
class RunData:
    run_dir: Path
    records: list[dict]
    entries: list[Entry]
    shards: dict[str, int]  # split -> shards read
    problems: list[str] = field(default_factory=list)


def shard_folders(run_dir: Path) -> dict[str, Path]:
    """Training shards in trajectories/; evaluation and Digi-Q's scored ones beside it, or inside it in runs
    written before they moved out."""
    beside_or_inside = lambda name: run_dir / name if (run_dir / name).is_dir() else run_dir / "trajectories" / name
    return {"train": run_dir / "trajectories", "eval": beside_or_inside("eval"), "scored": beside_or_inside("scored")}


def iterations_by_order(records: list[dict], split: str, count: int) -> tuple[list[int | None], bool]:
    """The iteration of each of `count` shards of `split`, from their order: the trainer writes one training
    shard per iteration that collected anything, and one evaluation shard per evaluation."""
    if split == "scored":
        return [None] * count, False
    if split == "eval":
        known = [r["iteration"] for r in records if "eval/episodes" in r or "eval/success_rate" in r]
        return [known[k] if k < len(known) else None for k in range(count)], True
    known = [r["iteration"] for r in records if (r.get("train/trajectories") or 0) > 0]
    if not any("train/trajectories" in r for r in records):
        known = [r["iteration"] for r in records if r["iteration"] > 0]
    last = known[-1] if known else 0
    return [known[k] if k < len(known) else last + k - len(known) + 1 for k in range(count)], True


def list_shards(run_dir: Path, records: list[dict]) -> list[Shard]:
    shards = []
    for split, folder in shard_folders(run_dir).items():
        paths = sorted(folder.glob("shard-*.parquet")) if folder.is_dir() else []
        iterations, inferred = iterations_by_order(records, split, len(paths))
        shards += [Shard(p, split, it, inferred) for p, it in zip(paths, iterations)]
    return shards


def row_split(shard: Shard, data: dict, i: int) -> str:
    """The folder names the split of eval/ and scored/ shards (a ShardWriter not told its split writes "train");
    a shard in trajectories/ may name another in its own column."""
    if shard.split != "train" or "split" not in data:
        return shard.split
    return data["split"][i] or shard.split


def index_shard(shard: Shard) -> list[Entry]:
    """The trajectories of one shard, reading only its light columns (no screenshots)."""
    try:
        names = pq.read_schema(shard.path).names
        extra = [c for c in ("iteration", "split") if c in names]
        missing = [c for c in INDEX_COLUMNS if c not in names]
        if missing:
            raise StorageError(f"{shard.path}: not a trajectory shard (no column {', '.join(missing)})")
        data = pq.read_table(shard.path, columns=INDEX_COLUMNS + extra).to_pydict()
    except (pa.ArrowException, OSError) as e:
        raise StorageError(f"{shard.path}: not a readable trajectory shard ({e})") from None
    entries: dict[str, Entry] = {}
    try:
        for i, tid in enumerate(data["trajectory_id"]):
            entry = entries.get(tid)
            if entry is None:
                iteration = data["iteration"][i] if "iteration" in data else None
                split = row_split(shard, data, i)
                own = iteration is not None
                entry = entries[tid] = Entry(
                    id=tid,
                    shard=shard,
                    position=len(entries),
                    task=Task(**json.loads(data["task"][i])),
                    outcome=data["outcome"][i],
                    split=split,
                    iteration=int(iteration) if own else shard.iteration,
                    inferred=shard.inferred and not own,
                )
            if data["step_index"][i] >= 0 and data["done"][i] is not None:  # a step, not the final observation
                entry.steps += 1
                entry.reward += data["reward"][i] or 0.0
    except (ValueError, TypeError) as e:
        raise StorageError(f"{shard.path}: a row does not decode ({e})") from None
    return list(entries.values())


# what the report counts and tables, besides every curve's key: a value here that is not a number is left out
COUNTED = ("policy_version", "train/trajectories", "eval/episodes", "eval/unknown", "eval/env_errors")
MAX_METRICS_PROBLEMS = 20  # lines of metrics.jsonl named in the header; the rest are counted


def load_metrics(run_dir: Path, problems: list[str]) -> list[dict]:
    """The records of metrics.jsonl that have a whole-number iteration. What else is there is named in `problems`
    with its line and left out, and the rest is drawn: a line that does not parse (torn by a crash mid-write), a
    record without an iteration, and a value that is not a finite number where the report computes with one (a
    count, a success rate, a key that holds numbers in other records)."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    found, parsed = [], []
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
        try:
            record = json.loads(line) if line.strip() else None
        except ValueError:
            record = False
        iteration = record.get("iteration") if isinstance(record, dict) else None
        if isinstance(iteration, int) and not isinstance(iteration, bool):
            parsed.append((number, record))
        elif record is not None:
            found.append(f"metrics.jsonl line {number}: not a JSON record with a whole-number iteration; skipped")
    numeric = {k for _, r in parsed for k, v in r.items() if is_number(v)}
    computed = lambda key: key in numeric or key in COUNTED or key.startswith(RATES)
    for number, record in parsed:
        for key in [k for k, v in record.items() if v is not None and not is_number(v) and computed(k)]:
            found.append(f"metrics.jsonl line {number}: {key} is {shown(record.pop(key))}, not a number; left out")
    problems += found[:MAX_METRICS_PROBLEMS]
    if len(found) > MAX_METRICS_PROBLEMS:
        problems.append(f"metrics.jsonl: {len(found) - MAX_METRICS_PROBLEMS} more line(s) like these")
    return [record for _, record in parsed]


def read_run(run_dir: Path, iterations: tuple[int | None, int | None] | None, cache: dict | None = None) -> RunData:
    """The metrics and the index of every shard. `cache` (kept by the caller between reports) holds the index
    of each shard by its path, size, modification time and inferred iteration, so an unchanged shard is read
    once; it is left holding the shards of this read only."""
    problems: list[str] = []
    records = load_metrics(run_dir, problems)
    entries, counts, known = [], defaultdict(int), dict(cache or {})
    if cache is not None:
        cache.clear()
    for shard in list_shards(run_dir, records):
        try:
            stat = shard.path.stat()
            key = (shard.path, shard.split, shard.iteration, shard.inferred, stat.st_size, stat.st_mtime_ns)
            indexed = known[key] if key in known else index_shard(shard)
            entries += indexed
            counts[shard.split] += 1
            if cache is not None:
                cache[key] = indexed
        except (StorageError, OSError) as e:
            problems.append(str(e))
    if iterations is not None:
        records = [r for r in records if inside(iterations, r["iteration"])]
        entries = [e for e in entries if inside(iterations, e.iteration)]
    return RunData(run_dir, records, entries, dict(counts), problems)


def inside(window: tuple[int | None, int | None], iteration: int | None) -> bool:
    """Whether `iteration` is in the --iterations window; an unknown one (imported data) always is."""
    first, last = window
    return iteration is None or ((first is None or iteration >= first) and (last is None or iteration <= last))


# ---------------------------------------------------------------------------------------------- sampling


def newest_first(entry: Entry) -> tuple:
    return (-(entry.iteration if entry.iteration is not None else -1), str(entry.shard.path), entry.position)


def select_sample(entries: list[Entry], limit: int) -> list[Entry]:
    """At most `limit` trajectories: first the newest of every (split, task, outcome), so each is represented,
    then every evaluation episode, newest evaluation first, then the newest training (and scored) ones."""
    evals = sorted((e for e in entries if e.split == "eval"), key=newest_first)
    others = sorted((e for e in entries if e.split != "eval"), key=newest_first)
    strata: dict[tuple, Entry] = {}
    for e in evals + others:
        strata.setdefault((e.split, task_group(e.task), e.outcome), e)
    chosen: dict[int, Entry] = {}
    for e in list(strata.values()) + evals + others:
        if len(chosen) >= limit:
            break
        chosen.setdefault(id(e), e)
    return list(chosen.values())


# ---------------------------------------------------------------------------------------------- details


def thumbnail(png: bytes) -> dict | str:
    """A JPEG data URI no wider than THUMB_WIDTH with the original and thumbnail sizes, or why there is none."""
    try:
        with Image.open(io.BytesIO(png)) as im:
            width, height = im.size
            image = im.convert("RGB")
    except (OSError, ValueError, Image.DecompressionBombError) as e:
        return f"screenshot does not decode ({e})"
    image.thumbnail((THUMB_WIDTH, THUMB_MAX_HEIGHT), Image.Resampling.BILINEAR, reducing_gap=2.0)
    out = io.BytesIO()
    image.save(out, "JPEG", quality=JPEG_QUALITY, optimize=True)
    src = "data:image/jpeg;base64," + base64.b64encode(out.getvalue()).decode("ascii")
    return {"src": src, "w": width, "h": height, "tw": image.width, "th": image.height}


class ImageStore:
    """The page's screenshots: thumbnailed in parallel, each distinct screen embedded once (the same eval
    problem starts from the same screen every evaluation), and none added once the byte budget is spent."""

    OMITTED = "screenshot omitted: the report reached its size budget (--max-bytes)"

    def __init__(self, max_bytes: int, thumbs: dict | None = None):
        self.max_bytes, self.used, self.omitted, self.exhausted = max_bytes, 0, 0, False
        # by content hash: made, not necessarily embedded (a RunReport keeps them for its next page)
        self.thumbs: dict[bytes, dict | str] = thumbs if thumbs is not None else {}
        self.ids: dict[bytes, int] = {}  # by content hash: the embedded image's number
        self.embedded: list[dict] = []
        self.pool = ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1))

    def prepare(self, pngs: list[bytes]) -> None:
        """Thumbnail these screenshots at once (PIL releases the GIL while it decodes, resizes and encodes)."""
        if self.exhausted:
            return
        todo = {hashlib.sha1(p).digest(): p for p in pngs if p}
        todo = {h: p for h, p in todo.items() if h not in self.thumbs}
        for h, thumb in zip(todo, self.pool.map(thumbnail, todo.values())):
            self.thumbs[h] = thumb

    def embed(self, png: bytes | None) -> dict:
        """{"img": its number} or {"img": None, "img_note": why there is none}."""
        if not png:
            return {"img": None, "img_note": "no screenshot"}
        digest = hashlib.sha1(png).digest()
        if digest in self.ids:
            return {"img": self.ids[digest]}
        if self.exhausted or self.used + self._size(digest, png) > self.max_bytes:
            self.exhausted = True
            self.omitted += 1
            return {"img": None, "img_note": self.OMITTED}
        thumb = self.thumbs[digest]
        if isinstance(thumb, str):
            return {"img": None, "img_note": thumb}
        self.spend(len(thumb["src"]))
        self.ids[digest] = len(self.embedded)
        self.embedded.append(thumb)
        return {"img": self.ids[digest]}

    def size(self, number: int | None) -> tuple[int, int] | None:
        """The original (width, height) of embedded image `number`."""
        return None if number is None else (self.embedded[number]["w"], self.embedded[number]["h"])

    def _size(self, digest: bytes, png: bytes) -> int:
        if digest not in self.thumbs:
            self.thumbs[digest] = thumbnail(png)
        thumb = self.thumbs[digest]
        return 0 if isinstance(thumb, str) else len(thumb["src"])

    def spend(self, nbytes: int) -> None:
        self.used += nbytes

    def close(self) -> None:
        self.pool.shutdown()


def observation_detail(obs: Observation, images: ImageStore) -> dict:
    """The screenshot (the number of an embedded image, or why there is none), the location, the element boxes to
    draw over the screenshot, and the element list."""
    boxes = [e["box"] for e in elements_of(obs) if "box" in e]
    ui_text = obs.ui_text or ""
    return images.embed(obs.screenshot_png) | {
        "location": obs.location,
        "ui_text": ui_text[:UI_TEXT_CHARS] or None,
        "ui_text_cut": len(ui_text) > UI_TEXT_CHARS or None,
        "boxes": boxes,
    }


def elements_of(obs: Observation) -> list[dict]:
    return [e for e in obs.extras.get("elements") or [] if isinstance(e, dict)]


def finite(value):
    """`value` with every NaN or infinity replaced by None (JSON has neither)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def digiq_detail(info: dict) -> dict | None:
    """Digi-Q's candidates and, once the critic stage scored them, Q per candidate, V, advantage and best."""
    dq = info.get("digiq")
    if not isinstance(dq, dict):
        return None
    shown = {k: dq[k] for k in ("candidates", "q", "v", "advantage", "best") if k in dq}
    rest = {k: v for k, v in dq.items() if k not in shown}
    return shown | ({"rest": rest} if rest else {})


def trajectory_detail(entry: Entry, traj: Trajectory, images: ImageStore) -> dict:
    steps = []
    for i, step in enumerate(traj.steps):
        after = traj.next_observation(i)
        info = dict(step.info)
        seen = observation_detail(step.observation, images)
        size = images.size(seen["img"])
        detail = seen | {
            "i": i,
            "action_text": step.action_text,
            "action": step.action,
            "overlay": action_overlay(step.action, elements_of(step.observation), size) if size else None,
            "input": policy_input(step.observation),
            "prompt": info.pop("prompt", None),
            "reward": step.reward,
            "done": step.done,
            "policy_version": step.policy_version,
            "logprob": step.logprob,
            "error": step.error,
            "feedback": after.extras.get("feedback") if after is not None else None,  # about this step's action
            "verdict": info.pop("verdict", None),
            "judge": info.pop("judge", None),
            "digiq": digiq_detail(info),
            "digirl": info.pop("digirl", None),
            "timings": rounded(step.timings),
        }
        info.pop("digiq", None)
        detail["info"] = info or None
        steps.append(detail)
    final = None
    if traj.final_observation is not None:
        final = observation_detail(traj.final_observation, images)
        final["feedback"] = traj.final_observation.extras.get("feedback")
    locations = shortened_locations([s["location"] for s in steps] + ([final["location"]] if final else []))
    for detail, location in zip(steps + ([final] if final else []), locations):
        if location != detail["location"]:
            detail["location_shown"] = location
    return finite(
        {
            "id": traj.id,
            "task": traj.task.__dict__,
            "group": task_group(traj.task),
            "outcome": traj.outcome,
            "error": traj.error,
            "env_id": traj.env_id,
            "runner_id": traj.runner_id,
            "split": entry.split,
            "iteration": entry.iteration,
            "inferred": entry.inferred,
            "reward": traj.reward,
            "judge": traj.steps[-1].info.get("judge") if traj.steps else None,
            "steps": steps,
            "final": final,
        }
    )


def read_selected(path: Path, ids: list[str]) -> list[Trajectory]:
    """The trajectories `ids` of one shard; the other rows are skipped before they become Python objects."""
    try:
        names = set(pq.read_schema(path).names)
        table = pq.read_table(
            path, columns=[n for n in SCHEMA.names if n in names], filters=[("trajectory_id", "in", ids)]
        )
        return from_table(table)
    except (pa.ArrowException, OSError) as e:
        raise StorageError(f"{path}: not a readable trajectory shard ({e})") from None
    except (ValueError, TypeError, KeyError) as e:
        raise StorageError(f"{path}: a row does not decode ({e})") from None


def observations(traj: Trajectory) -> list[Observation]:
    return [s.observation for s in traj.steps] + ([traj.final_observation] if traj.final_observation else [])


def build_details(sample: list[Entry], images: ImageStore, problems: list[str]) -> dict[int, str]:
    """Each sampled trajectory's steps as JSON text, by `id(entry)`. Shards are read in the sample's order of
    priority, so the byte budget goes to the trajectories that matter most, and screenshots are thumbnailed a
    few trajectories at a time, so little is thumbnailed that the budget then leaves out."""
    rank = {id(e): k for k, e in enumerate(sample)}
    by_shard: dict[Path, list[Entry]] = defaultdict(list)
    for e in sample:
        by_shard[e.shard.path].append(e)
    details = {}
    for path, group in sorted(by_shard.items(), key=lambda item: min(rank[id(e)] for e in item[1])):
        try:
            found = {t.id: t for t in read_selected(path, [e.id for e in group])}
        except StorageError as e:
            problems.append(str(e))
            continue
        group = [e for e in group if e.id in found]
        for start in range(0, len(group), THUMBNAIL_BATCH):
            batch = group[start : start + THUMBNAIL_BATCH]
            images.prepare([o.screenshot_png for e in batch for o in observations(found[e.id])])
            for entry in batch:
                details[id(entry)] = json_text(trajectory_detail(entry, found[entry.id], images))
                images.spend(len(details[id(entry)]))
    return details


def display_order(entry: Entry) -> tuple:
    """Newest iteration first, evaluation before training, then by task and outcome."""
    newest = -(entry.iteration if entry.iteration is not None else -1)
    return (
        newest,
        SPLITS.index(entry.split) if entry.split in SPLITS else len(SPLITS),
        task_group(entry.task),
        entry.outcome,
        str(entry.shard.path),
        entry.position,
    )


# ---------------------------------------------------------------------------------------------- the page


def read_config(run_dir: Path) -> tuple[str | None, dict]:
    path = run_dir / "config.yaml"
    if not path.is_file():
        return None, {}
    text = path.read_text(errors="replace")
    try:
        parsed = yaml.safe_load(text)
    except yaml.YAMLError:
        parsed = None
    return text, parsed if isinstance(parsed, dict) else {}


def marks_burnt_in(config: dict) -> bool:
    """Whether element boxes are already drawn onto the screenshots (web envs with env.set_of_marks, the default)."""
    env = config.get("env") or {}
    return bool(env.get("set_of_marks", True))


def header_section(
    name: str,
    run: RunData,
    sample: list[Entry],
    details: dict,
    images: ImageStore,
    max_bytes: int,
    iterations: str | None,
    started: float,
) -> str:
    entries = run.entries
    steps = sum(e.steps for e in entries)
    by_split = ", ".join(
        f"{sum(e.split == s for e in entries)} {s}" for s in SPLITS if any(e.split == s for e in entries)
    )
    shards = ", ".join(f"{n} {s}" for s, n in sorted(run.shards.items()))
    stats = [
        ("trajectories", f"{len(entries)}" + (f" ({by_split})" if by_split else "")),
        ("steps", steps),
        ("shards read", f"{sum(run.shards.values())}" + (f" ({shards})" if shards else "")),
        ("metric records", len(run.records)),
        ("trajectories shown", f"{len(details)} of {len(entries)}"),
    ]
    body = "".join(f'<div class="stat"><b>{esc(v)}</b>{esc(k)}</div>' for k, v in stats)
    notes = [f'<div class="problem">Could not read: <code>{esc(p)}</code></div>' for p in run.problems]
    if not run.records and not entries:
        notes.insert(
            0,
            f'<div class="notice">Nothing here yet: {esc(run.run_dir)} holds no metrics.jsonl records '
            "and no trajectory shards. The report fills in once the run has written an iteration.</div>",
        )
    if len(sample) < len(entries):
        notes.append(
            f'<div class="notice">A sample of {len(sample)} trajectories is embedded '
            "(--max-trajectories): the newest of every split, task and outcome, then every evaluation "
            "episode and the newest training iterations.</div>"
        )
    if images.omitted:
        notes.append(
            f'<div class="notice">{images.omitted} screenshot(s) omitted: the embedded trajectories reached '
            f"the size budget of {max_bytes / 1e6:.1f} MB (--max-bytes).</div>"
        )
    if any(e.inferred for e in entries):
        notes.append(
            '<div class="note">* iteration inferred from the shard\'s order (the shard has no '
            "iteration column): one training shard per iteration that collected, one evaluation shard "
            "per evaluation.</div>"
        )
    if iterations:
        notes.append(
            f'<div class="note">Iterations {esc(iterations)} only (--iterations); trajectories with no '
            "known iteration (imported data) are kept.</div>"
        )
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return (
        f'<header><h1>{esc(name)}</h1><div class="meta">{esc(run.run_dir)} · generated {when} in '
        f"{time.perf_counter() - started:.1f} s by rlsys {esc(__version__)}</div>"
        f'<div class="stats">{body}</div>{"".join(notes)}</header>'
    )


def run_info_tables(info) -> str:
    """run_info.json: one table per session (the first run, each --resume), then what the run keeps besides."""
    if not isinstance(info, dict):
        return f"<pre>{esc(json.dumps(info))}</pre>"
    sessions = info.get("sessions") if isinstance(info.get("sessions"), list) else []
    rest = {k: v for k, v in info.items() if k != "sessions" or not sessions}
    tables = [
        f"<h4>{'resumed' if s.get('resumed') else 'started'} {esc(s.get('started', ''))}</h4>{key_value_table(s)}"
        for s in sessions
        if isinstance(s, dict)
    ]
    return "".join(tables) + (key_value_table(rest) if rest else "")


def provenance_section(config_text: str | None, run_dir: Path) -> str:
    parts = []
    info_path = run_dir / "run_info.json"
    if info_path.is_file():
        try:
            info = json.loads(info_path.read_text())
            parts.append("<h3>Provenance (run_info.json)</h3>" + run_info_tables(info))
        except ValueError as e:
            parts.append(f'<div class="problem">run_info.json does not parse: {esc(e)}</div>')
    if config_text is not None:
        parts.append(
            f'<details class="config"><summary>config.yaml (resolved, secrets redacted)</summary>'
            f"<pre>{esc(config_text)}</pre></details>"
        )
    if not parts:
        return ""
    return f'<section id="provenance"><h2>Config and provenance</h2>{"".join(parts)}</section>'


def index_row(k: int, entry: Entry) -> dict:
    return finite(
        {
            "k": k,
            "id": entry.id,
            "split": entry.split,
            "iteration": entry.iteration,
            "inferred": entry.inferred,
            "group": task_group(entry.task),
            "task_id": entry.task.id,
            "outcome": entry.outcome,
            "steps": entry.steps,
            "reward": round(entry.reward, 6),
            "instruction": entry.task.instruction[:300],
        }
    )


class RunReport:
    """The report of one run, written again as the run goes on (the trainer can call `write()` after each
    evaluation): the index of a shard already read and the thumbnails already made are kept between pages."""

    def __init__(
        self,
        run_dir,
        out=None,
        max_trajectories: int = DEFAULT_MAX_TRAJECTORIES,
        iterations: str | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ):
        self.run_dir = Path(run_dir)
        self.out = Path(out) if out is not None else self.run_dir / "report.html"
        self.max_trajectories, self.iterations, self.max_bytes = max_trajectories, iterations, max_bytes
        self.window = parse_iterations(iterations) if iterations else None
        self._shard_index: dict[tuple, list[Entry]] = {}
        self._thumbs: dict[bytes, dict | str] = {}

    def write(self) -> Path:
        """Write the page (atomically) and return its path."""
        started = time.perf_counter()
        if not self.run_dir.is_dir():
            raise FileNotFoundError(f"run folder not found: {self.run_dir}")
        run = read_run(self.run_dir, self.window, self._shard_index)
        sample = select_sample(run.entries, self.max_trajectories)
        images = ImageStore(self.max_bytes, self._thumbs)
        try:
            details = build_details(sample, images, run.problems)
        finally:
            images.close()
        self._thumbs = {h: images.thumbs[h] for h in images.ids}  # keep what this page shows, not every screen
        config_text, config = read_config(self.run_dir)
        name = (config.get("run") or {}).get("name") or self.run_dir.name
        axes = axes_of([run.records])
        specs, others = plot_specs(run.records, axes.runs[0])
        rows, tasks = eval_rows(run.records)
        shown = sorted((e for e in sample if id(e) in details), key=display_order)
        browser = []  # the trajectory viewer, where there is a trajectory to show
        if shown:
            browser = [
                browser_section(marks_burnt_in(config), (config.get("policy") or {}).get("kind")),
                json_block("traj-index", json_text([index_row(k, e) for k, e in enumerate(shown)])),
                "\n".join(json_block(f"d-{k}", details[id(e)], "traj") for k, e in enumerate(shown)),
                "\n".join(image_block(n, thumb) for n, thumb in enumerate(images.embedded)),
            ]
        body = "\n".join(
            [
                header_section(name, run, sample, details, images, self.max_bytes, self.iterations, started),
                plots_section(specs, others, axes),
                eval_table_section(rows, tasks),
                *browser[:1],
                provenance_section(config_text, self.run_dir),
                *browser[1:],
            ]
        )
        tmp = self.out.with_name(f".{self.out.name}.tmp")
        tmp.write_text(page(f"{name} — rlsys report", body), encoding="utf-8")
        os.replace(tmp, self.out)
        return self.out


def write_report(
    run_dir,
    out=None,
    max_trajectories: int = DEFAULT_MAX_TRAJECTORIES,
    iterations: str | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Path:
    """Write the report of `run_dir` to `out` (default RUN_DIR/report.html) and return its path."""
    return RunReport(run_dir, out, max_trajectories, iterations, max_bytes).write()


def write_comparison(run_dirs: list, out, iterations: str | None = None) -> Path:
    """Write one page overlaying the learning curves of `run_dirs` to `out` and return its path."""
    window = parse_iterations(iterations) if iterations else None
    runs = []
    for run_dir in map(Path, run_dirs):
        problems: list[str] = []
        records = [r for r in load_metrics(run_dir, problems) if window is None or inside(window, r["iteration"])]
        name = (read_config(run_dir)[1].get("run") or {}).get("name") or run_dir.name
        runs.append(ComparedRun(str(name), run_dir, records, problems))
    names = [run.name for run in runs]
    for run in runs:
        if names.count(run.name) > 1:
            run.name = f"{run.name} ({run.run_dir})"
    out = Path(out)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(comparison_page(runs, iterations), encoding="utf-8")
    os.replace(tmp, out)
    return out


def parse_iterations(text: str) -> tuple[int | None, int | None]:
    """`A:B` (both ends included), `A:`, `:B` or `A`."""
    lo, sep, hi = text.partition(":")
    try:
        first = int(lo) if lo.strip() else None
        last = (int(hi) if hi.strip() else None) if sep else first
    except ValueError:
        raise ValueError(f"--iterations takes A:B, A: or :B with whole numbers, got {text!r}") from None
    return first, last
