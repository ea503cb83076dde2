"""A run's checkpoints as the driver uses them: written at `run.checkpoint_every`, the one to resume from found and
loaded, published to a remote run folder (`run.output_dir: s3://...`), and the hint that says how to go on after a
stop. What a checkpoint holds on disk and how it is verified is `rlsys.data.checkpoint`'s."""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path

import ray

from rlsys.config import Config
from rlsys.config.run_dir import is_remote_uri
from rlsys.data import checkpoint
from rlsys.data.storage import RemoteFolder, RunMirror
from rlsys.driver.metrics import read_metrics
from rlsys.envs.tasks import TaskSource

log = logging.getLogger(__name__)


class RunCheckpoints:
    def __init__(self, cfg: Config, run_dir: Path, resume: bool):
        self.cfg, self.run_dir = cfg, run_dir
        self.mirror = start_mirror(cfg, run_dir, resume)

    def save(self, iteration: int, version: int, counters: Counter, learners, buffer, tasks: TaskSource) -> Path:
        at = checkpoint.checkpoint_root(self.run_dir.absolute()) / f"{iteration:06d}" / "policy"
        learner_files = learners.save(str(at))  # where a LoRA base's path relative to the run is taken from

        def fill(folder: Path) -> dict | None:
            checkpoint.write_files(folder, learner_files)
            buffer_state = ray.get(buffer.save.remote(str(folder), *self.replay_sources()), timeout=600)
            state = {
                "iteration": iteration,
                "policy_version": version,
                "counters": dict(counters),
                "tasks": tasks.state_dict(),
                "replay": buffer_state,
            }
            checkpoint.write_json(folder / "state.json", state)
            return buffer_state.get("shards")  # what the buffer references instead of copying

        written = checkpoint.write(self.run_dir, iteration, fill, self.cfg.run.keep_checkpoints)
        if self.mirror is not None:
            self.mirror.publish_checkpoint(written, self.cfg.run.keep_checkpoints)
        return written

    def replay_sources(self) -> tuple[list[str] | None, str | None]:
        """The shards a checkpoint's replay buffer may reference (the run's training shards, the offline data)
        and the run folder; (None, None) copies the buffer into the checkpoint (`run.checkpoint_replay: copy`)."""
        if self.cfg.run.checkpoint_replay == "copy":
            return None, None
        sources = [self.run_dir / "trajectories", *map(Path, self.cfg.offline.data)]
        return [str(s.resolve()) for s in sources], str(self.run_dir.resolve())

    def resume_point(self) -> Path | None:
        """The newest intact checkpoint; newer ones with a missing or damaged file are named and passed over. A
        local run without a complete checkpoint cannot be resumed (rlsys-train refuses it before Ray
        starts); a remote one without a published checkpoint starts from scratch."""
        try:
            found, passed_over = checkpoint.resume_point(self.run_dir)
        except checkpoint.NoCheckpoint:
            if self.mirror is None:
                raise
            log.warning("no published checkpoint in %s; starting from scratch", self.mirror.remote.uri)
            return None
        for line in passed_over:
            log.warning("%s", line)
        return found

    def restore(self, found: Path, learners, buffer, tasks: TaskSource) -> tuple[int, Counter]:
        """Load the checkpoint `found`, verified already, into the learners, the buffer and the task source; the
        iteration and the counters it was taken at."""
        state = checkpoint.read_json(found / "state.json")
        files = checkpoint.read_files(found / "policy", "policy")
        files["learner.pt"] = (found / "learner.pt").read_bytes()
        learners.load(files, str(found.absolute() / "policy"))
        ray.get(buffer.load.remote(str(found), state["replay"]), timeout=600)
        tasks.load_state_dict(state["tasks"])
        truncate_metrics(self.run_dir, state["iteration"])
        print(f"resumed from {found} at iteration {state['iteration']}", flush=True)
        return state["iteration"], Counter(state["counters"])

    def hint(self, iteration: int) -> str:
        return resume_hint(self.run_dir, self.mirror.remote.uri if self.mirror else self.run_dir, iteration)

    def publish_last(self) -> None:
        """A remote run: metrics, report and shards written since the last checkpoint."""
        if self.mirror is None:
            return
        try:
            self.mirror.push()
        except OSError as e:
            log.warning("the run's last files could not be published to %s: %s", self.mirror.remote.uri, e)


def start_mirror(cfg: Config, run_dir: Path, resume: bool) -> RunMirror | None:
    """A remote run.output_dir: the run works in its local folder, published there (rlsys.data.storage); a resume
    first pulls what it needs from there."""
    if not is_remote_uri(cfg.run.output_dir):
        return None
    mirror = RunMirror(run_dir, RemoteFolder(cfg.run.output_dir))
    if resume:
        mirror.pull()
    mirror.start()
    print(f"the run folder is published to {mirror.remote.uri} at every checkpoint and at the end", flush=True)
    return mirror


def truncate_metrics(run_dir: Path, iteration: int) -> None:
    """Drop metric lines written after the checkpoint we resume from; they will be redone."""
    records = [r for r in read_metrics(run_dir) if r["iteration"] <= iteration]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def resume_hint(run_dir: Path, target, iteration: int | None = None) -> str:
    """How to go on after the run in `run_dir` (published to `target`, or `target` itself) stopped: from its
    newest checkpoint, or, with none written, by starting over (a remote run resumes from scratch)."""
    stopped = "The run stopped" + (f" at iteration {iteration}" if iteration is not None else "")
    found = checkpoint.latest(run_dir)
    if found is not None:
        return f"{stopped}; the newest checkpoint is {found}. Continue with: rlsys-train --resume {target}"
    if is_remote_uri(target):
        return (
            f"{stopped} with no checkpoint written (run.checkpoint_every). Continue with: rlsys-train --resume {target}"
        )
    return (
        f"{stopped} with no checkpoint written (run.checkpoint_every); start it over with: rlsys-train "
        f"--resume {target} --restart"
    )
