"""A learner group of two processes over gloo takes the same steps as one learner on the same batches."""

import io

import numpy as np
import pytest
import ray
from PIL import Image
from safetensors.torch import load as load_safetensors

from rlsys.actors.replay import ReplayBufferActor
from rlsys.actors.weight_store import WeightStore, pull_if_newer
from rlsys.config import ConfigError
from rlsys.core.types import Observation, Step, Task, Trajectory
from rlsys.learners.runtime.group import LearnerFailed, LearnerGroup
from tests.conftest import make_config


def png(color) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((16, 16, 3), color, dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def dataset() -> list[Trajectory]:
    """Successes and failures whose actions differ in length, so shards hold different token counts."""
    out = []
    for i in range(24):
        task = ["open the mail app", "buy a red sofa online", "search for cats"][i % 3]
        screen = png((20 * (i % 7), 90, 200 - 10 * (i % 5)))
        actions = [f"click [{i % 9}]", f"type [{i % 4}] {'x' * (i % 6)}", "click [12]"][: 1 + i % 3]
        steps = [
            Step(Observation(screen, f'[{k}] button "B{k}"', "", task), a, None, 0.0, False, 0, -1.5)
            for k, a in enumerate(actions)
        ]
        success = i % 4 != 3
        steps[-1].reward, steps[-1].done = float(success), True
        final = Observation(screen, "", "", task)
        out.append(Trajectory(Task(task, task, "test"), steps, "success" if success else "failure",
                              id=f"t{i}", final_observation=final))  # fmt: skip
    return out


def train(tmp_path, learners: int, iterations: int, weights_from: str = "checkpoint", **overrides):
    """Metrics, each rank's description, the weights (the checkpoint's, or the last published), the version, and the
    weights of a checkpoint taken before the first update (what an untrained group of the same config starts from)."""
    cfg = make_config(
        tmp_path,
        learner__num_learners=learners,
        learner__batch_size=7,
        learner__grad_accumulation=2,
        learner__updates_per_iteration=3,
        learner__lr=3e-3,
        learner__filter="quantile",
        **overrides,
    )
    buffer = ReplayBufferActor.options(num_cpus=0).remote(1000, 1 << 30, 0)
    ray.get(buffer.add.remote(dataset()))
    store = ray.remote(WeightStore).options(num_cpus=0).remote()
    group = LearnerGroup(cfg, buffer, store)
    try:
        start = load_safetensors(group.save()["policy/model.safetensors"])
        metrics = [group.update(None) for _ in range(iterations)]
        described = ray.get([a.describe.remote() for a in group.actors])
        if weights_from == "checkpoint":
            weights = load_safetensors(group.save()["policy/model.safetensors"])
        else:
            weights = pull_if_newer(store, -1)[1]
        published = ray.get(store.get_version.remote())
    finally:
        group.kill()
        ray.kill(buffer)
        ray.kill(store)
    return metrics, described, weights, published, start


def distance(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return sum(float((a[k].float() - b[k].float()).pow(2).sum()) for k in a) ** 0.5


def test_two_learners_over_gloo_match_one_learner_on_the_whole_batch(ray_session, tmp_path):
    """Filtered BC with a token-mean loss over micro-batches of 7 split 4 / 3: each rank's sum is divided by
    the whole micro-batch's token count. (DigiRL is left out: its instruction critic trains a RoBERTa with
    dropout, whose masks over a shard cannot equal those over the whole batch.)"""
    one, (single,), w_one, _, w_start = train(tmp_path / "one", 1, 2)
    two, ranks, w_two, published, _ = train(tmp_path / "two", 2, 2)

    assert single["world_size"] == 1
    assert [(r["rank"], r["world_size"]) for r in ranks] == [(0, 2), (1, 2)]
    assert published == 2 and [r["version"] for r in ranks] == [2, 2]
    assert ranks[0]["weights_sha256"] == ranks[1]["weights_sha256"]  # the ranks never diverge
    # float sums in another order are all that differ: a thousandth of the distance training moved
    assert distance(w_one, w_two) < 1e-3 * distance(w_start, w_one)
    # losses and gradient norms are the whole batch's, not a shard's (a shard's mean would differ)
    for m1, m2 in zip(one, two):
        for key in [k for k in m1 if k.endswith(("/loss", "/grad_norm"))]:
            assert m2[key] == pytest.approx(m1[key], rel=1e-4), key


CAUSAL_LM = {"policy__kind": "causal_lm", "policy__d_model": 64, "policy__d_ff": 128, "policy__num_layers": 2}


def test_a_sharded_group_over_gloo_matches_one_learner_and_publishes_whole_weights(ray_session, tmp_path):
    """learner.sharding: fsdp2 (FSDP2 over gloo on the CPU): the same steps as one learner with the whole model;
    rank 0 publishes the whole weights, gathered from both ranks (checkpoints: the test below)."""
    # w_start is a checkpoint's: the tied output head left out
    one, _, w_one, _, w_start = train(tmp_path / "one", 1, 2, "store", **CAUSAL_LM)
    two, ranks, w_two, published, _ = train(tmp_path / "two", 2, 2, "store", learner__sharding="fsdp2", **CAUSAL_LM)

    assert [(r["rank"], r["sharded"]) for r in ranks] == [(0, True), (1, True)]
    assert published == 2 and [r["version"] for r in ranks] == [2, 2]
    assert ranks[0]["weights_sha256"] != ranks[1]["weights_sha256"]  # each rank holds its own rows
    assert distance(w_one, w_two) < 1e-3 * distance(w_start, {k: w_one[k] for k in w_start})
    for m1, m2 in zip(one, two):
        for key in [k for k in m1 if k.endswith(("/loss", "/grad_norm"))]:
            assert m2[key] == pytest.approx(m1[key], rel=1e-4), key


def test_a_sharded_group_resumes_from_its_checkpoint(ray_session, tmp_path):
    """A sharded group's checkpoint (whole weights and whole optimizer states, gathered on rank 0) loaded into a new
    sharded group: its next update is the one the first group takes."""
    cfg = make_config(tmp_path, learner__num_learners=2, learner__sharding="fsdp2", learner__batch_size=7,
                      learner__updates_per_iteration=2, learner__lr=3e-3, **CAUSAL_LM)  # fmt: skip
    buffer = ReplayBufferActor.options(num_cpus=0).remote(1000, 1 << 30, 0)
    ray.get(buffer.add.remote(dataset()))
    weights, files = [], None
    try:
        for resumed in (False, True):  # the sample is every stored trajectory, in order, both times
            store = ray.remote(WeightStore).options(num_cpus=0).remote()
            group = LearnerGroup(cfg, buffer, store)
            try:
                if resumed:
                    group.load(files)
                else:
                    group.update(None)
                    files = group.save()
                group.update(None)
                weights.append(load_safetensors(group.save()["policy/model.safetensors"]))
            finally:
                group.kill()
                ray.kill(store)
    finally:
        ray.kill(buffer)
    assert distance(*weights) == 0


def test_group_sizes_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="learner.num_learners must be at least 1"):
        make_config(tmp_path, learner__num_learners=0)
    with pytest.raises(ConfigError, match=r"learner.num_learners \(9\) exceeds learner.batch_size \(8\)"):
        make_config(tmp_path, learner__num_learners=9)
    with pytest.raises(ConfigError, match="learner.sharding = 'fsdp2' shards a causal_lm policy's model"):
        make_config(tmp_path, learner__num_learners=2, learner__sharding="fsdp2", policy__kind="tiny_t5")


def test_a_dead_learner_is_named(ray_session, tmp_path):
    cfg = make_config(tmp_path, learner__num_learners=2)
    buffer = ReplayBufferActor.options(num_cpus=0).remote(1000, 1 << 30, 0)
    ray.get(buffer.add.remote(dataset()))
    store = ray.remote(WeightStore).options(num_cpus=0).remote()
    group = LearnerGroup(cfg, buffer, store)
    try:
        ray.kill(group.actors[1], no_restart=True)
        with pytest.raises(LearnerFailed, match="learner-1 died during an update"):
            group.update(None)
    finally:
        group.kill()
        ray.kill(buffer)
        ray.kill(store)
