"""The learner actor: owns the trained policy and the algorithm, reads from the replay buffer,
publishes versioned weights. Checkpoint state travels as bytes, so the driver can write it
wherever the run folder is, whichever node the learner runs on."""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import ray
import torch

from rlsys.config import Config
from rlsys.core.types import Trajectory
from rlsys.data import checkpoint
from rlsys.learners import distributed, sharding
from rlsys.learners.registry import build_algorithm
from rlsys.learners.runtime import rendezvous
from rlsys.learners.runtime.history import BufferActorHistory
from rlsys.learners.selection import policy_lag
from rlsys.policies import build_policy
from rlsys.policies.devices import pick_device
from rlsys.policies.lora_checkpoint import base_pointer_for, base_pointer_from
from rlsys.policies.weights import pack_state_dict


class Learner:
    """One process of a learner group (`rank` of `world_size`; a single learner is rank 0 of 1). Every rank
    builds the same model from the same seed and trains on its shard of each batch; rank 0 publishes. With
    `learner.sharding: fsdp2` the policy's model is sharded over the group when the group forms (the algorithm,
    whose optimizers hold the parameters, is built after that), and every rank takes part in publishing and
    saving, which gather the whole weights to rank 0."""

    def __init__(self, cfg: Config, buffer, weight_store, rank: int = 0, world_size: int = 1):
        self.cfg = cfg
        self.buffer = buffer
        self.weight_store = weight_store
        self.rank, self.world_size = rank, world_size
        self.device = pick_device(cfg.learner.device)
        torch.manual_seed(cfg.run.seed)
        self.policy = build_policy(cfg.policy, seed=cfg.run.seed, device=self.device)
        self.sharded = cfg.learner.sharding == "fsdp2" and world_size > 1
        self._rng_after_policy = torch.get_rng_state()  # where a single learner builds its algorithm from
        self.algorithm = None if self.sharded else build_algorithm(cfg, self.policy, self.device)
        self.version = 0
        self.policy.version = self.version
        self._store = None  # rank 0's rendezvous store, kept open while the group lives

    def device_name(self) -> str:
        return self.device

    def describe(self) -> dict:
        """Where this learner runs and what it holds: for logs, the dashboard and checks."""
        rank, size = distributed.rank_and_size()
        return {
            "rank": rank,
            "world_size": size,
            "device": self.device,
            "node": ray.util.get_node_ip_address(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
            "version": self.version,
            "sharded": self.sharded,
            "weights_sha256": self.weights_digest(),
        }

    def weights_digest(self) -> str:
        """A hash of every parameter's bytes: the ranks of a replicated group must agree on it. A sharded rank
        hashes the rows it holds (no collective, so one rank may be asked alone)."""
        digest = hashlib.sha256()
        state = self.policy.model.state_dict() if self.sharded else self.policy.state_dict()
        for name, tensor in sorted(state.items()):
            tensor = tensor.to_local() if distributed.is_dtensor(tensor) else tensor
            digest.update(name.encode())
            digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
        return digest.hexdigest()

    def rendezvous(self) -> tuple[str, int]:
        """Rank 0: open the store where the group meets and say where it listens."""
        self._store = rendezvous.open_rendezvous(self.cfg.learner.group_timeout_s)
        return self._store.host, self._store.port

    def join_group(self, address: str, port: int) -> int:
        backend = "nccl" if self.device.startswith("cuda") else "gloo"
        timeout_s = self.cfg.learner.group_timeout_s
        rendezvous.join(self._store, address, port, self.rank, self.world_size, backend, timeout_s)
        if self.sharded:
            sharding.shard_model(self.policy.model, "cuda" if backend == "nccl" else "cpu")
            torch.set_rng_state(self._rng_after_policy)
            self.algorithm = build_algorithm(self.cfg, self.policy, self.device)
        return self.rank

    def publish(self) -> int:
        """Rank 0 publishes; in a sharded group every rank must call this (the whole weights are gathered)."""
        with sharding.whole_on_rank0(self.policy.model) as here:
            if self.rank != 0 or not here:
                return self.version
            packed = pack_state_dict(self.policy.state_dict())  # travels zero-copy (rlsys.policies.weights)
        ray.get(self.weight_store.publish.remote(self.version, packed), timeout=120)
        return self.version

    def update(
        self, trajectories: list[Trajectory], offline_iteration: int | None = None, min_version: int | None = None
    ) -> dict:
        """One learner iteration on the trajectories sampled for it (every rank gets the same), publishing
        the next version when the policy changed (a critic-only iteration keeps the version).
        `offline_iteration`: the iteration's index within the offline phase (None online). An algorithm that
        ranks the run's whole history (DigiRL) reads it from the buffer, from `min_version` on."""
        trained_from = self.version
        t1 = time.perf_counter()
        if getattr(self.algorithm, "ranks_history", False):
            history = BufferActorHistory(self.buffer, min_version)
            metrics = self.algorithm.update(trajectories, offline_iteration, history)
        else:
            metrics = self.algorithm.update(trajectories, offline_iteration)
        t2 = time.perf_counter()
        if metrics.get("actor/updates", 0):
            self.version += 1
            self.policy.version = self.version
            self.publish()
        # each algorithm reports the lag of what it trained on; None where it trained on nothing
        return (
            policy_lag([], trained_from)
            | metrics
            | {
                "learner/sampled_trajectories": len(trajectories),
                "time/train_s": t2 - t1,
                "time/publish_s": time.perf_counter() - t2,
                "policy_version": self.version,
                "learner/trained_from_version": trained_from,
            }
        )

    def critic_stage(self) -> dict:
        """Digi-Q's finished critic as files, and its scores of every stored step (for inspection)."""
        trajectories = ray.get(self.buffer.all.remote(), timeout=600)
        return {"files": self.algorithm.critic_files(), "scores": self.algorithm.annotations(trajectories)}

    # -- checkpoints

    def save(self, at: str | None = None) -> dict[str, bytes]:
        """Rank 0's job: Hugging Face writes weights from the main process of a group only (a sharded group's
        other ranks take part in gathering them and the optimizer states, and return nothing). `at`: the policy
        folder of the checkpoint the files go to, which a LoRA base's path relative to the run is taken from."""
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "policy"
            with sharding.whole_on_rank0(self.policy.model) as here:
                if here:
                    self.policy.save_pretrained(folder)
            if self.rank == 0:
                if at:
                    base_pointer_for(folder, Path(at))
                files = checkpoint.read_files(folder, "policy")
        algorithm_state = self.algorithm.state_dict()  # collective where optimizer states are sharded
        sharding.check_gathered(algorithm_state, "the algorithm's state")
        if self.rank != 0:
            return {}
        state = {
            "version": self.version,
            "algorithm": algorithm_state,
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        }
        buf = io.BytesIO()
        torch.save(state, buf)
        files["learner.pt"] = buf.getvalue()
        return files

    def load(self, files: dict[str, bytes], at: str | None = None) -> int:
        """`at`: the policy folder of the checkpoint the files come from, which a LoRA base's path relative to the
        run is read from (the run folder may have moved since it was written)."""
        with tempfile.TemporaryDirectory() as tmp:
            checkpoint.write_files(Path(tmp), {k: v for k, v in files.items() if k.startswith("policy/")})
            if at:
                base_pointer_from(Path(tmp) / "policy", Path(at))
            loaded = build_policy(replace(self.cfg.policy, path=str(Path(tmp) / "policy")), device=self.device)
        if self.sharded:  # every rank read the whole model: each keeps its rows
            sharding.load_full_state_dict(self.policy.model, loaded.model.state_dict())
        else:
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
