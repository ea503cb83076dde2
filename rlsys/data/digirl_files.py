"""DigiRL's published data files (pickled lists of step dicts) to rlsys shards and back, and a summary of a shard
folder; `rlsys-data` (rlsys/cli/data.py) is the command. Loading a pickle runs whatever code the file names, so
`import_digirl` refuses unless `trust_pickle` is given; nothing else in rlsys unpickles."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import tempfile
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rlsys.core.returns import discounted_returns
from rlsys.core.types import Observation, Step, Task, Trajectory
from rlsys.policies.feature_key import FEATURE_KEY

SHARD_SIZE = 256
DIGIRL_GAMMA = 0.5
STEP_KEYS = (
    "observation",
    "next_observation",
    "image_features",
    "next_image_features",
    "image_path",
    "task",
    "action",
    "reward",
    "done",
)
# Stored returns are float32 in some files; anything closer than this counts as equal.
RETURN_TOLERANCE = 1e-4


class DataError(Exception):
    """Input that cannot be used; reported as `error: ...` with exit code 2."""


# ---------------------------------------------------------------- reading a DigiRL file


def load_digirl_file(path: Path) -> list:
    """Unpickle a file written by `torch.save` (zip or legacy format) or by `pickle.dump`."""
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    try:
        if zipfile.is_zipfile(path):
            data = _torch_load(path)
        else:
            with open(path, "rb") as f:
                data = pickle.load(f)
            if _is_legacy_torch_magic(data):
                data = _torch_load(path)
    except Exception as e:  # unpickling can raise anything the file's code raises
        raise DataError(f"{path.name}: cannot be read as a torch.save or pickle file ({type(e).__name__}: {e})") from e
    if not isinstance(data, (list, tuple)):
        raise DataError(f"{path.name}: expected a list of trajectories, found {type(data).__name__}")
    if not data:
        raise DataError(f"{path.name}: holds no trajectories")
    return list(data)


def _torch_load(path: Path):
    import torch

    return torch.load(path, map_location="cpu", weights_only=False)


def _is_legacy_torch_magic(value) -> bool:
    """The old (non-zip) torch.save format starts with a pickled magic number."""
    from torch.serialization import MAGIC_NUMBER

    return isinstance(value, int) and value == MAGIC_NUMBER


@dataclass(frozen=True)
class FeatureLayout:
    """How image features are laid out in the file: F values per frame, or [f_{t-1}, f_t] (2F)."""

    size: int
    stacked: bool

    @property
    def dim(self) -> int:
        return self.size // 2 if self.stacked else self.size

    def current_frame(self, vector: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(vector[-self.dim :])


@dataclass
class DigirlStep:
    prompt: str
    next_prompt: str
    features: np.ndarray
    next_features: np.ndarray
    image_path: str
    task: str
    action: str
    reward: float
    done: bool
    mc_return: float | None


def _location(file: str, trajectory: int, step: int | None = None) -> str:
    return f"{file}: trajectory {trajectory}" + ("" if step is None else f" step {step}")


def _steps_of(raw_trajectory, where: str) -> list:
    if not isinstance(raw_trajectory, (list, tuple)):
        raise DataError(f"{where}: expected a list of step dicts, found {type(raw_trajectory).__name__}")
    if not raw_trajectory:
        raise DataError(f"{where}: has no steps")
    return list(raw_trajectory)


def _field(step, key: str, where: str):
    if not isinstance(step, dict):
        raise DataError(f"{where}: expected a step dict, found {type(step).__name__}")
    if key not in step:
        raise DataError(f"{where}: missing key {key!r}")
    return step[key]


def _text(step, key: str, where: str) -> str:
    value = _field(step, key, where)
    if not isinstance(value, str):
        raise DataError(f"{where}: key {key!r} should be a string, found {type(value).__name__}")
    return value


def _number(step, key: str, where: str) -> float:
    value = _field(step, key, where)
    try:
        if isinstance(value, (str, bytes)):
            raise TypeError
        return float(value)
    except (TypeError, ValueError, RuntimeError):
        raise DataError(f"{where}: key {key!r} should be a number, found {value!r}") from None


def _flag(step, key: str, where: str) -> bool:
    value = _field(step, key, where)
    if hasattr(value, "item"):  # a numpy or torch scalar
        try:
            value = value.item()
        except (ValueError, RuntimeError):
            pass  # more than one value: rejected below
    if isinstance(value, bool) or (isinstance(value, (int, float)) and value in (0, 1)):
        return bool(value)
    raise DataError(f"{where}: key {key!r} should be a boolean, found {value!r}")


def _float_vector(step, key: str, where: str) -> np.ndarray:
    value = _field(step, key, where)
    if value is None or isinstance(value, (str, bytes)):
        raise DataError(f"{where}: key {key!r} should be an array of numbers, found {type(value).__name__}")
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu().float().numpy()
    try:
        return np.asarray(value, dtype=np.float32).reshape(-1)
    except (TypeError, ValueError):
        raise DataError(f"{where}: key {key!r} should be an array of numbers, found {type(value).__name__}") from None


def _sized_vector(step, key: str, where: str, layout: FeatureLayout) -> np.ndarray:
    vector = _float_vector(step, key, where)
    if vector.size != layout.size:
        stacking = f"stacked 2x{layout.dim}" if layout.stacked else "unstacked"
        raise DataError(
            f"{where}: key {key!r} has {vector.size} values; the file's first step set {layout.size} ({stacking})"
        )
    return vector


def detect_layout(trajectories: list, file: str) -> FeatureLayout:
    """Frame stacking shows on the first step, where DigiRL pads f_{-1} with f_0: both halves are equal."""
    where = _location(file, 0, 0)
    first = _steps_of(trajectories[0], _location(file, 0))[0]
    vector = _float_vector(first, "image_features", where)
    half = vector.size // 2
    if vector.size == 0:
        raise DataError(f"{where}: key 'image_features' is empty")
    stacked = vector.size % 2 == 0 and np.array_equal(vector[:half], vector[half:])
    return FeatureLayout(size=vector.size, stacked=bool(stacked))


def read_digirl_step(step, where: str, layout: FeatureLayout) -> DigirlStep:
    mc_return = _number(step, "mc_return", where) if isinstance(step, dict) and "mc_return" in step else None
    return DigirlStep(
        prompt=_text(step, "observation", where),
        next_prompt=_text(step, "next_observation", where),
        features=layout.current_frame(_sized_vector(step, "image_features", where, layout)),
        next_features=layout.current_frame(_sized_vector(step, "next_image_features", where, layout)),
        image_path=_text(step, "image_path", where),
        task=_text(step, "task", where),
        action=_text(step, "action", where),
        reward=_number(step, "reward", where),
        done=_flag(step, "done", where),
        mc_return=mc_return,
    )


# ---------------------------------------------------------------- building rlsys trajectories


def task_id(instruction: str) -> str:
    return "aitw-" + hashlib.sha1(instruction.encode()).hexdigest()[:12]


def screenshot_candidates(image_path: str, images_dir: Path | None) -> list[Path]:
    if not image_path:
        return []
    path = Path(image_path)
    if images_dir is None:
        return [path]
    # Released files hold absolute paths of the machine that collected them; the images usually
    # travel separately, so fall back to the same file name under --images-dir.
    return [path if path.is_absolute() else images_dir / path, images_dir / path.name]


def read_screenshot(image_path: str, images_dir: Path | None) -> bytes | None:
    for candidate in screenshot_candidates(image_path, images_dir):
        if candidate.is_file():
            return candidate.read_bytes()
    return None


@dataclass
class ImportStats:
    trajectories: int = 0
    steps: int = 0
    successes: int = 0
    screenshots_found: int = 0
    screenshots_missing: int = 0
    mc_return_mismatches: int = 0
    mc_return_missing: int = 0
    shards: int = 0

    def count_returns(self, stored: list[float | None], recomputed: list[float]) -> None:
        for old, new in zip(stored, recomputed):
            if old is None:
                self.mc_return_missing += 1
            elif abs(old - new) > RETURN_TOLERANCE * max(1.0, abs(new)):
                self.mc_return_mismatches += 1


@dataclass
class Importer:
    file: str
    suite: str
    layout: FeatureLayout
    images_dir: Path | None
    gamma: float
    stats: ImportStats = field(default_factory=ImportStats)

    def convert(self, raw_trajectory, index: int) -> Trajectory:
        raw_steps = _steps_of(raw_trajectory, _location(self.file, index))
        steps = [read_digirl_step(s, _location(self.file, index, i), self.layout) for i, s in enumerate(raw_steps)]
        instruction = steps[0].task
        task = Task(
            id=task_id(instruction),
            instruction=instruction,
            suite=self.suite,
            split="train",
            start="",
            meta={"source": "digirl-import", "file": self.file},
        )
        actions = [s.action for s in steps]
        rlsys_steps = [self._step(s, actions[:i]) for i, s in enumerate(steps)]
        last = steps[-1]
        final = self._observation(b"", last.task, actions, last.next_prompt, last.next_features)
        rewards = [s.reward for s in steps]
        outcome = "success" if sum(rewards) > 0 else "failure"
        self._count(steps, outcome)
        # the same file imported twice gives the same ids (and the same train/validation split)
        traj_id = hashlib.sha1(f"digirl:{self.file}:{index}".encode()).hexdigest()[:32]
        return Trajectory(task=task, steps=rlsys_steps, outcome=outcome, final_observation=final, id=traj_id)

    def _step(self, step: DigirlStep, previous_actions: list[str]) -> Step:
        png = read_screenshot(step.image_path, self.images_dir)
        self.stats.screenshots_found += png is not None
        self.stats.screenshots_missing += png is None
        observation = self._observation(png or b"", step.task, previous_actions, step.prompt, step.features)
        return Step(
            observation=observation,
            action_text=step.action,
            action=None,
            reward=step.reward,
            done=step.done,
            policy_version=-1,
            logprob=None,
        )

    @staticmethod
    def _observation(png: bytes, task: str, previous_actions: list[str], prompt: str, features) -> Observation:
        return Observation(
            screenshot_png=png,
            ui_text="",
            location="",
            task=task,
            extras={"previous_actions": list(previous_actions), "prompt": prompt},
            features={FEATURE_KEY: features},
        )

    def _count(self, steps: list[DigirlStep], outcome: str) -> None:
        self.stats.trajectories += 1
        self.stats.steps += len(steps)
        self.stats.successes += outcome == "success"
        recomputed = discounted_returns([s.reward for s in steps], self.gamma)
        self.stats.count_returns([s.mc_return for s in steps], recomputed)

    def summary(self) -> dict:
        s = self.stats
        return {
            "file": self.file,
            "suite": self.suite,
            "trajectories": s.trajectories,
            "steps": s.steps,
            "successes": s.successes,
            "success_rate": s.successes / s.trajectories,
            "mean_steps": s.steps / s.trajectories,
            "feature_dim": self.layout.dim,
            "stacked": self.layout.stacked,
            "screenshots_found": s.screenshots_found,
            "screenshots_missing": s.screenshots_missing,
            "gamma": self.gamma,
            "mc_return_mismatches": s.mc_return_mismatches,
            "mc_return_missing": s.mc_return_missing,
            "shards": s.shards,
        }


# ---------------------------------------------------------------- import-digirl


def has_shards(folder: Path) -> bool:
    return folder.is_dir() and any(folder.glob("shard-*.parquet"))


def check_output_dir(out_dir: Path) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise DataError(f"{out_dir} exists and is not a folder")
    if has_shards(out_dir):
        raise DataError(f"{out_dir} already holds trajectory shards; choose an empty or new folder")


def publish(staging: Path, out_dir: Path) -> None:
    """Move the finished import into place; until here OUT_DIR was left untouched."""
    if not out_dir.exists():
        os.replace(staging, out_dir)
        return
    for entry in staging.iterdir():
        os.replace(entry, out_dir / entry.name)
    staging.rmdir()


def import_digirl(
    file: Path, out_dir: Path, *, suite: str, images_dir: Path | None, gamma: float, trust_pickle: bool
) -> dict:
    from tqdm import tqdm

    from rlsys.data.shards import ShardWriter

    if not trust_pickle:
        raise DataError(
            f"refusing to load {file.name}: .pt files are pickles, and unpickling runs any code the file "
            "contains. Pass --trust-pickle if you trust where this file came from."
        )
    check_output_dir(out_dir)
    if images_dir is not None and not images_dir.is_dir():
        raise DataError(f"--images-dir {images_dir}: no such folder")
    raw = load_digirl_file(file)
    importer = Importer(file.name, suite, detect_layout(raw, file.name), images_dir, gamma)

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.importing-", dir=out_dir.parent))
    try:
        writer = ShardWriter(staging)
        batch: list[Trajectory] = []
        for index, raw_trajectory in enumerate(tqdm(raw, desc="importing", unit="traj", disable=None)):
            batch.append(importer.convert(raw_trajectory, index))
            if len(batch) == SHARD_SIZE:
                writer.write(batch)
                batch = []
        writer.write(batch)
        importer.stats.shards = writer.next_index
        summary = importer.summary()
        (staging / "import.json").write_text(json.dumps(summary, indent=1) + "\n")
        publish(staging, out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return summary


def print_import_summary(summary: dict, out_dir: Path) -> None:
    s = summary
    layout = f"stacked as {2 * s['feature_dim']} in the file" if s["stacked"] else "unstacked"
    print(f"imported {s['file']} into {out_dir} ({s['shards']} shards)")
    print(f"  trajectories    {s['trajectories']}")
    print(f"  steps           {s['steps']}")
    print(f"  success rate    {100 * s['success_rate']:.1f}% ({s['successes']}/{s['trajectories']})")
    print(f"  mean steps      {s['mean_steps']:.2f}")
    print(f"  feature dim     {s['feature_dim']} ({layout})")
    print(f"  screenshots     {s['screenshots_found']} found, {s['screenshots_missing']} missing")
    returns = f"  mc_return       {s['mc_return_mismatches']} of {s['steps']} differ from gamma={s['gamma']}"
    print(returns + (f" ({s['mc_return_missing']} missing)" if s["mc_return_missing"] else ""))


# ---------------------------------------------------------------- export-digirl


def prompt_of(observation: Observation) -> str:
    from rlsys.policies.prompts import autoui_prompt

    prompt = observation.extras.get("prompt")
    return prompt if isinstance(prompt, str) else autoui_prompt(observation)


def step_features(trajectory: Trajectory) -> list[np.ndarray]:
    features = []
    for index, step in enumerate(trajectory.steps):
        feature = step.observation.features.get(FEATURE_KEY)
        if feature is None:
            raise DataError(
                f"trajectory {trajectory.id} step {index}: no features[{FEATURE_KEY!r}]; the DigiRL layout needs "
                "the BLIP-2 image features of every step"
            )
        features.append(np.asarray(feature, dtype=np.float32).reshape(-1))
    if len({f.size for f in features}) > 1:
        raise DataError(f"trajectory {trajectory.id}: steps have image features of different sizes")
    return features


def to_digirl_steps(trajectory: Trajectory, gamma: float) -> list[dict]:
    """One trajectory as DigiRL step dicts, image features stacked as [f_{t-1}, f_t] with f_{-1} = f_0."""
    steps = trajectory.steps
    features = step_features(trajectory)
    prompts = [prompt_of(s.observation) for s in steps]
    final = trajectory.final_observation
    final_feature = final.features.get(FEATURE_KEY) if final is not None else None
    after_last = features[-1] if final_feature is None else np.asarray(final_feature, dtype=np.float32).reshape(-1)
    # frames[t + 1] is f_t; frames[0] pads f_{-1} with f_0 and frames[-1] is f_T, the state after the last step
    frames = [features[0], *features, after_last]
    next_prompts = prompts[1:] + [prompt_of(final) if final is not None else prompts[-1]]
    rewards = [float(s.reward) for s in steps]
    returns = discounted_returns(rewards, gamma)
    return [
        {
            "observation": prompts[t],
            "next_observation": next_prompts[t],
            "image_features": np.concatenate([frames[t], frames[t + 1]]),
            "next_image_features": np.concatenate([frames[t + 1], frames[t + 2]]),
            "image_path": "",
            "video_path": "",
            "task": step.observation.task,
            "action": step.action_text,
            "reward": rewards[t],
            "done": bool(step.done),
            "trajectory_reward": float(sum(rewards)),
            "mc_return": returns[t],
        }
        for t, step in enumerate(steps)
    ]


def export_digirl(in_dir: Path, out_file: Path, *, gamma: float) -> dict:
    import torch

    trajectories = load_shards(in_dir)
    exported = [t for t in trajectories if t.trainable and t.steps]
    if not exported:
        raise DataError(f"{in_dir}: no trainable trajectories with steps to export")
    data = [to_digirl_steps(t, gamma) for t in exported]
    if len({d[0]["image_features"].size for d in data}) > 1:
        raise DataError(f"{in_dir}: trajectories have image features of different sizes")
    out_file.parent.mkdir(parents=True, exist_ok=True)
    partial = out_file.with_name(f".{out_file.name}.tmp")
    torch.save(data, partial)
    os.replace(partial, out_file)
    return {
        "trajectories": len(exported),
        "skipped": len(trajectories) - len(exported),
        "steps": sum(len(d) for d in data),
        "feature_dim": data[0][0]["image_features"].size // 2,
    }


# ---------------------------------------------------------------- summary


def load_shards(folder: Path) -> list[Trajectory]:
    from rlsys.data.shards import StorageError, read_trajectories

    if not folder.exists():
        raise DataError(f"{folder}: no such file or folder")
    if folder.is_dir() and not has_shards(folder):
        raise DataError(f"{folder}: holds no trajectory shards (shard-*.parquet)")
    try:
        return read_trajectories(folder, skip_damaged=True)  # a damaged shard costs a warning, not the rest
    except StorageError as e:
        raise DataError(str(e)) from None


def summarize(trajectories: list[Trajectory]) -> dict:
    outcomes = Counter(t.outcome for t in trajectories)
    trainable = [t for t in trajectories if t.trainable]
    steps = sum(len(t.steps) for t in trajectories)
    return {
        "trajectories": len(trajectories),
        "steps": steps,
        "outcomes": dict(sorted(outcomes.items())),
        "trainable": len(trainable),
        "success_rate": outcomes["success"] / len(trainable) if trainable else None,
        "mean_steps": steps / len(trajectories) if trajectories else 0.0,
    }
