"""The learner actor: owns the trained policy and the algorithm, reads from the replay buffer,
publishes versioned weights. Checkpoint state travels as bytes, so the driver can write it
wherever the run folder is, whichever node the learner runs on."""

from __future__ import annotations

import io
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import ray
import torch

from rlsys import checkpoint
from rlsys.config import Config
from rlsys.policies import build_policy


def pick_device(requested: str) -> str:
    if requested == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("learner.device is 'cuda' but no CUDA device is visible to the learner")
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return requested


def build_algorithm(cfg: Config, policy, device: str):
    """The configured algorithm around `policy` (`learner.algorithm`)."""
    correct = cfg.learner.off_policy_correction == "on" or (
        cfg.learner.off_policy_correction == "auto" and cfg.run.mode == "async"
    )
    if cfg.learner.algorithm == "digirl":
        from learners.digirl import DigiRL

        return DigiRL(cfg.learner, policy, seed=cfg.run.seed, device=device, correct_off_policy=correct)
    if cfg.learner.algorithm == "digiq":
        from learners.digiq import DigiQ

        return DigiQ(cfg.learner, policy, seed=cfg.run.seed, device=device, correct_off_policy=correct)
    from learners.filtered_bc import FilteredBC

    return FilteredBC(cfg.learner, policy, seed=cfg.run.seed, correct_off_policy=correct)


class Learner:
    def __init__(self, cfg: Config, buffer, weight_store):
        self.cfg = cfg
        self.buffer = buffer
        self.weight_store = weight_store
        self.device = pick_device(cfg.learner.device)
        torch.manual_seed(cfg.run.seed)
        self.policy = build_policy(cfg.policy, seed=cfg.run.seed, device=self.device)
        self.algorithm = build_algorithm(cfg, self.policy, self.device)
        self.version = 0

    def device_name(self) -> str:
        return self.device

    def publish(self) -> int:
        ray.get(self.weight_store.publish.remote(self.version, self.policy.state_dict()), timeout=120)
        return self.version

    def update(self, min_version: int | None = None, offline_iteration: int | None = None) -> dict:
        """One learner iteration: sample, train, and publish the next version when the policy changed
        (a critic-only iteration keeps the version). `offline_iteration`: the iteration's index within
        the offline phase (None online)."""
        t0 = time.perf_counter()
        trained_from = self.version
        trajectories = ray.get(
            self.buffer.sample.remote(self.cfg.learner.sample_trajectories, min_version), timeout=300
        )
        t1 = time.perf_counter()
        metrics = self.algorithm.update(trajectories, offline_iteration)
        t2 = time.perf_counter()
        if metrics.get("actor/updates", 0):
            self.version += 1
            self.policy.version = self.version
            self.publish()
        return metrics | {
            "learner/sampled_trajectories": len(trajectories),
            "time/sample_s": t1 - t0,
            "time/train_s": t2 - t1,
            "time/publish_s": time.perf_counter() - t2,
            "policy_version": self.version,
            "learner/trained_from_version": trained_from,
        }

    def critic_stage(self) -> dict:
        """Digi-Q's finished critic as files, and its scores of every stored step (for inspection)."""
        trajectories = ray.get(self.buffer.all.remote(), timeout=600)
        return {"files": self.algorithm.critic_files(), "scores": self.algorithm.annotations(trajectories)}

    # -- checkpoints

    def save(self) -> dict[str, bytes]:
        with tempfile.TemporaryDirectory() as tmp:
            self.policy.save_pretrained(Path(tmp) / "policy")
            files = checkpoint.read_files(Path(tmp) / "policy", "policy")
        state = {
            "version": self.version,
            "algorithm": self.algorithm.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        }
        buf = io.BytesIO()
        torch.save(state, buf)
        files["learner.pt"] = buf.getvalue()
        return files

    def load(self, files: dict[str, bytes]) -> int:
        with tempfile.TemporaryDirectory() as tmp:
            checkpoint.write_files(Path(tmp), {k: v for k, v in files.items() if k.startswith("policy/")})
            loaded = build_policy(replace(self.cfg.policy, path=str(Path(tmp) / "policy")), device=self.device)
        self.policy.load_state_dict(loaded.state_dict())
        state = torch.load(io.BytesIO(files["learner.pt"]), weights_only=True)
        self.algorithm.load_state_dict(state["algorithm"])
        torch.set_rng_state(state["torch_rng"])
        if state["cuda_rng"]:
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        self.version = state["version"]
        self.policy.version = self.version
        return self.version


RemoteLearner = ray.remote(Learner)
