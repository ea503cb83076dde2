"""`policy.placement: server`: a shared inference actor batching requests from many runners."""

import time

import ray
import torch

from rlsys.actors.inference_server import RemoteInferenceServer, ServedPolicy
from rlsys.actors.pool import RunnerPool
from rlsys.actors.weight_store import WeightStore
from rlsys.envs.tasks import miniwob_task
from rlsys.policies import build_policy
from tests.conftest import make_config
from tests.policies.test_policy import observation

SERVER = {"num_cpus": 0.25, "max_batch": 16, "max_wait_ms": 200.0}


def served_config(tmp_path, **overrides):
    return make_config(tmp_path, policy__placement="server", policy__server=SERVER, **overrides)


def local_replica(cfg, seed, state):
    policy = build_policy(cfg.policy, seed=cfg.run.seed)
    policy.load_state_dict(state, version=0)
    torch.manual_seed(seed)  # what the server does after building its replica
    return policy


def test_server_acts_like_a_local_replica_and_batches_concurrent_requests(ray_session, tmp_path):
    cfg = served_config(tmp_path)
    state = build_policy(cfg.policy, seed=5).state_dict()
    store = ray.remote(WeightStore).remote()
    server = RemoteInferenceServer.options(num_cpus=0.25, max_concurrency=100).remote(cfg, store, 77)
    try:
        obs = [observation(n, editable={0}) for n in (2, 4, 7, 9)]
        pending = server.act.remote(obs, False)
        time.sleep(0.5)
        assert not ray.wait([pending], timeout=0)[0], "a server must not act before weights are published"
        ray.get(store.publish.remote(0, state))

        # sampling, one request: the same RNG stream as a local replica built with the same seed
        local = local_replica(cfg, 77, state)
        assert [s.text for s in ray.get(pending, timeout=60)] == [s.text for s in local.act(obs)]
        assert {s.version for s in ray.get(pending)} == {0}

        # greedy, many concurrent callers: batched together, each gets its own answers
        requests = [[observation(n, editable={0})] for n in range(1, 9)]
        refs = [server.act.remote(r, True) for r in requests]
        answers = [ray.get(ref, timeout=60) for ref in refs]
        for request, answer in zip(requests, answers):
            assert [s.text for s in answer] == [s.text for s in local.act(request, greedy=True)]
        stats = ray.get(server.stats.remote())
        assert stats["server/requests"] == 9 and stats["server/mean_batch"] > 2

        # new weights reach the server between batches
        ray.get(store.publish.remote(1, build_policy(cfg.policy, seed=6).state_dict()))
        assert {s.version for s in ServedPolicy(server).act(obs[:1])} == {1}
    finally:
        ray.kill(server)


def test_runners_play_through_a_shared_server(ray_session, tmp_path):
    cfg = served_config(tmp_path, runners__num=2)
    store = ray.remote(WeightStore).remote()
    ray.get(store.publish.remote(0, build_policy(cfg.policy, seed=0).state_dict()))
    pool = RunnerPool(cfg, store)
    try:
        assert len(pool.servers) == 1
        trajectories = pool.play([miniwob_task("click-test-2", seed, "train") for seed in range(4)])
        assert [t.outcome for t in trajectories if t.outcome == "env_error"] == []
        steps = [s for t in trajectories for s in t.steps]
        assert steps and {s.policy_version for s in steps} == {0}
        assert ray.get(pool.servers[0].stats.remote())["server/requests"] == len(steps)
    finally:
        pool.shutdown()
