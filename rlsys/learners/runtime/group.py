"""The learners as the driver sees them: N Learner actors, `learner-0` … `learner-{N-1}`, training one
model with data parallelism. Each iteration's sample is drawn once from the replay buffer and handed to
every rank; rank 0 publishes weights and writes checkpoints (with `learner.sharding: fsdp2` every rank takes part, as
the whole weights are gathered from all of them). A learner that dies or stops answering
ends the call with LearnerFailed, naming which one, where, and the error's text (the exception it raised, in
its constructor too, or what Ray says killed it)."""

from __future__ import annotations

import logging
import time

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from rlsys.config import Config
from rlsys.core.failures import RunFailed
from rlsys.core.remote_errors import cause_text, remote_traceback
from rlsys.learners.runtime.learner import RemoteLearner

log = logging.getLogger(__name__)


class LearnerFailed(RunFailed):
    """A learner process died or hung; the run cannot go on without it."""


class LearnerGroup:
    def __init__(self, cfg: Config, buffer, weight_store):
        self.cfg = cfg
        self.buffer = buffer
        lc = cfg.learner
        self.size = lc.num_learners
        self.sharded = lc.sharding == "fsdp2" and self.size > 1
        gpus = _gpus_per_learner(cfg)
        options = {"num_cpus": 1 if gpus else lc.num_cpus, "num_gpus": gpus}
        if lc.resource:
            options["resources"] = {lc.resource: 1}
        self.actors = [
            RemoteLearner.options(name=f"learner-{rank}", **options).remote(cfg, buffer, weight_store, rank, self.size)
            for rank in range(self.size)
        ]
        if self.size > 1:
            timeout = lc.group_timeout_s
            (address, port), *_ = self.get([self.actors[0].rendezvous.remote()], "rendezvous", timeout)
            self.get(self.call("join_group", address, port), "joining the group", timeout)

    # ------------------------------------------------------------------ calls

    def call(self, method: str, *args) -> list[ray.ObjectRef]:
        return [getattr(actor, method).remote(*args) for actor in self.actors]

    def get(self, refs: list[ray.ObjectRef], what: str, timeout_s: float) -> list:
        """Every rank's answer, or LearnerFailed naming the rank that died, raised, or did not answer in
        time; it fails as soon as one rank does, not when its peers give up waiting in a collective."""
        deadline = time.monotonic() + timeout_s
        results, pending = {}, list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                raise LearnerFailed(f"learner-{refs.index(pending[0])} did not finish {what} within {timeout_s:g}s")
            try:
                results[refs.index(ready[0])] = ray.get(ready[0], timeout=60)
            except (RayActorError, RayTaskError, GetTimeoutError) as e:
                raise self._failure(refs, ready[0], e, pending, what) from e
        return [results[rank] for rank in range(len(refs))]

    def _failure(self, refs, ref, error, pending, what: str) -> LearnerFailed:
        """Name the rank that died rather than a peer whose collective broke because of it."""
        if not isinstance(error, RayActorError) and pending:
            for other in ray.wait(pending, num_returns=len(pending), timeout=5)[0]:
                try:
                    ray.get(other, timeout=5)
                except RayActorError as dead:
                    ref, error = other, dead
                    break
                except Exception:
                    pass
        rank = refs.index(ref)
        verb = "died" if isinstance(error, RayActorError) else "failed"
        message = f"learner-{rank} {verb} during {what}: {cause_text(error)}"
        traceback = remote_traceback(error)
        return LearnerFailed(message + (f"\nlearner-{rank}'s traceback: {traceback}" if traceback else ""))

    def start_update(self, min_version: int | None, offline_iteration: int | None = None) -> list[ray.ObjectRef]:
        """Launch one iteration on every rank; its trajectories are sampled once, after every add this
        driver sent before (calls from one caller to one actor run in order)."""
        # rollout groups whole (GRPO compares a group's members); offline data, an offline phase's, has none
        whole_groups = self.cfg.run.group_size > 1 and offline_iteration is None
        sample = self.buffer.sample.remote(self.cfg.learner.sample_trajectories, min_version, whole_groups)
        return self.call("update", sample, offline_iteration, min_version)

    def finished(self, refs: list[ray.ObjectRef]) -> bool:
        _, pending = ray.wait(refs, num_returns=len(refs), timeout=0)
        return not pending

    def update(self, min_version: int | None, offline_iteration: int | None = None) -> dict:
        return self.get(self.start_update(min_version, offline_iteration), "an update", 3600)[0]

    def publish(self) -> int:
        return self.get(self._on_rank0("publish"), "publishing weights", 600)[0]

    def save(self, at: str | None = None) -> dict[str, bytes]:
        return self.get(self._on_rank0("save", at), "saving a checkpoint", 600)[0]

    def _on_rank0(self, method: str, *args) -> list[ray.ObjectRef]:
        """Rank 0's job, which every rank of a sharded group joins (rank 0's answer comes first)."""
        return self.call(method, *args) if self.sharded else [getattr(self.actors[0], method).remote(*args)]

    def load(self, files: dict[str, bytes], at: str | None = None) -> int:
        ref = ray.put(files)  # one copy in the object store, however many ranks read it
        return self.get(self.call("load", ref, at), "loading a checkpoint", 600)[0]

    def critic_stage(self) -> dict:
        return self.get([self.actors[0].critic_stage.remote()], "the critic stage", 3600)[0]

    def kill(self) -> None:
        for actor in self.actors:
            ray.kill(actor, no_restart=True)


def _gpus_per_learner(cfg: Config) -> int:
    lc = cfg.learner
    if lc.device == "cpu":
        return 0
    available = ray.cluster_resources().get("GPU", 0)
    if available >= lc.num_learners:
        return 1
    if lc.device == "cuda":
        raise RuntimeError(
            f"learner.device is 'cuda' and learner.num_learners is {lc.num_learners}, "
            f"but the cluster has {available:g} GPUs"
        )
    if available:
        log.warning("%g GPUs for %d learners: the learners run on CPU", available, lc.num_learners)
    return 0
