"""A learner group of two processes over gloo takes the same steps as one learner on the same batches."""

import io

import numpy as np
import pytest
import ray
from PIL import Image
from safetensors.torch import load as load_safetensors

from rlsys.actors.replay import ReplayBufferActor
from rlsys.actors.weight_store import WeightStore
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


def train(tmp_path, learners: int, iterations: int):
    cfg = make_config(
        tmp_path,
        learner__num_learners=learners,
        learner__batch_size=7,
        learner__grad_accumulation=2,
        learner__updates_per_iteration=3,
        learner__lr=3e-3,
        learner__filter="quantile",
    )
    buffer = ReplayBufferActor.options(num_cpus=0).remote(1000, 1 << 30, 0)
    ray.get(buffer.add.remote(dataset()))
    store = ray.remote(WeightStore).options(num_cpus=0).remote()
    group = LearnerGroup(cfg, buffer, store)
    try:
        metrics = [group.update(None) for _ in range(iterations)]
        described = ray.get([a.describe.remote() for a in group.actors])
        weights = load_safetensors(group.save()["policy/model.safetensors"])
        published = ray.get(store.get_version.remote())
    finally:
        group.kill()
        ray.kill(buffer)
        ray.kill(store)
    return metrics, described, weights, published


def distance(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return sum(float((a[k].float() - b[k].float()).pow(2).sum()) for k in a) ** 0.5


def test_two_learners_over_gloo_match_one_learner_on_the_whole_batch(ray_session, tmp_path):
    """Filtered BC with a token-mean loss over micro-batches of 7 split 4 / 3: each rank's sum is divided by
    the whole micro-batch's token count. (DigiRL is left out: its instruction critic trains a RoBERTa with
    dropout, whose masks over a shard cannot equal those over the whole batch.)"""
    one, (single,), w_one, _ = train(tmp_path / "one", 1, 2)
    two, ranks, w_two, published = train(tmp_path / "two", 2, 2)
    w_start = train(tmp_path / "zero", 1, 0)[2]

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


def test_group_sizes_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="learner.num_learners must be at least 1"):
        make_config(tmp_path, learner__num_learners=0)
    with pytest.raises(ConfigError, match=r"learner.num_learners \(9\) exceeds learner.batch_size \(8\)"):
        make_config(tmp_path, learner__num_learners=9)


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
