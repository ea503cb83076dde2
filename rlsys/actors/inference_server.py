"""Shared inference for `policy.placement: server`.

An `InferenceServer` actor holds one policy replica (on a GPU when it asks for one) and turns the
act() requests of many runners into batched generate calls: a batch closes when it holds
`server.max_batch` observations or its first request has waited `server.max_wait_ms`. It pulls
new weights from the weight store between batches. Runners talk to it through `ServedPolicy`,
which has the same `act` as a local replica, so the runner code does not change.
"""

from __future__ import annotations

import asyncio
import time

import ray

from rlsys.config import Config
from rlsys.core.types import ActionSample

PULL_TIMEOUT_S = 60.0  # a weight store that does not answer fails the batch, not the server forever


def server_name(index: int) -> str:
    return f"inference-server-{index}"


class InferenceServer:
    def __init__(self, cfg: Config, weight_store, seed: int):
        import torch

        from rlsys.policies import build_policy
        from rlsys.policies.devices import pick_device

        self.cfg = cfg.policy.server
        self.weight_store = weight_store
        self.device = pick_device("cuda" if cfg.policy.server.num_gpus > 0 else "cpu")
        # the learner's base (run seed); this server's seed drives its sampling
        self.policy = build_policy(cfg.policy, seed=cfg.run.seed, device=self.device)
        torch.manual_seed(seed)
        self.policy.version = -1
        self.queue: asyncio.Queue | None = None
        self.batches = 0
        self.requests = 0
        self.observations = 0
        self.busy_s = 0.0

    async def act(self, observations: list, greedy: bool = False) -> list[ActionSample]:
        if self.queue is None:  # created inside the actor's event loop
            self.queue = asyncio.Queue()
            asyncio.get_running_loop().create_task(self._serve())
        done = asyncio.get_running_loop().create_future()
        await self.queue.put((observations, greedy, done))
        return await done

    async def _serve(self) -> None:
        while True:
            batch = [await self.queue.get()]
            deadline = time.monotonic() + self.cfg.max_wait_ms / 1000
            while sum(len(r[0]) for r in batch) < self.cfg.max_batch:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(self.queue.get(), remaining))
                except asyncio.TimeoutError:
                    break
            for greedy in (False, True):
                group = [r for r in batch if r[1] == greedy]
                if group:
                    await self._run(group, greedy)

    async def _run(self, group: list, greedy: bool) -> None:
        try:
            await self._sync_weights()
            observations = [o for request in group for o in request[0]]
            started = time.perf_counter()
            samples = await asyncio.get_running_loop().run_in_executor(None, self.policy.act, observations, greedy)
            self.busy_s += time.perf_counter() - started
        except Exception as e:  # every waiting runner hears about it; the server keeps serving
            for *_, done in group:
                done.set_exception(e)
            return
        self.batches += 1
        self.requests += len(group)
        self.observations += len(observations)
        for observations, _, done in group:
            done.set_result(samples[: len(observations)])
            samples = samples[len(observations) :]

    async def _sync_weights(self) -> None:
        """The newest published weights; before the first publication, wait for it."""
        while True:
            found = await asyncio.wait_for(self.weight_store.get_if_newer.remote(self.policy.version), PULL_TIMEOUT_S)
            if found is not None:
                version, (ref,) = found
                self.policy.load_state_dict(await asyncio.wait_for(ref, PULL_TIMEOUT_S), version)
            if self.policy.version >= 0:
                return
            await asyncio.sleep(0.2)

    def stats(self) -> dict:
        return {
            "server/batches": self.batches,
            "server/requests": self.requests,
            "server/mean_batch": self.observations / max(self.batches, 1),
            "server/busy_s": self.busy_s,
            "policy_version": self.policy.version,
        }


RemoteInferenceServer = ray.remote(InferenceServer)


def start_servers(cfg: Config, weight_store, seed: int) -> list:
    server = cfg.policy.server
    return [
        RemoteInferenceServer.options(
            name=server_name(i), num_cpus=server.num_cpus, num_gpus=server.num_gpus, max_concurrency=1000
        ).remote(cfg, weight_store, seed * 1000 + i)
        for i in range(server.num_replicas)
    ]


class ServedPolicy:
    """A runner's view of an inference server: `act` like a local replica; no weights here."""

    def __init__(self, server, timeout_s: float = 600.0):
        self.server = server
        self.timeout_s = timeout_s
        self.version = -1

    def act(self, observations, greedy: bool = False) -> list[ActionSample]:
        samples = ray.get(self.server.act.remote(list(observations), greedy), timeout=self.timeout_s)
        self.version = min(s.version for s in samples)
        return samples

    def log_probs(self, observations, actions):
        raise NotImplementedError("a served policy scores on the server; runners only act")
