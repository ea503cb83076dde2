"""Digi-Q's CPU stand-in for a VLM's z(s, a) (`learner.digiq.representation.method: pointer_hidden`): a pointing
policy's vector of the element an action names, on real synthweb episodes, and the bench's preparation of the
S4-read dataset with it through `rlsys-digiq`."""

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from rlsys.config import PolicyConfig
from rlsys.data.shards import read_trajectories
from rlsys.learners.digiq.representations import (
    MODEL_KEY,
    Z_KEY,
    PointerRepresentations,
    RepresentationProvider,
    check_representations,
    model_id,
    representation_provider,
)
from rlsys.policies import build_policy
from rlsys.policies.learned_pointer import Decision
from rlsys.policies.pointing import elements_of

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import synthweb_bench  # noqa: E402

from tests.support.synthweb_s4 import SMALL_S4, scripted_s4_episodes  # noqa: E402


def save_pointer(folder: Path, seed: int) -> Path:
    build_policy(PolicyConfig(kind="learned_pointer", d_model=16, d_ff=24), seed=seed).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def episodes(tmp_path_factory) -> Path:
    """Twelve episodes of the scripted S4 chooser (right 70% of the time, so wrong clicks and detours occur)."""
    return scripted_s4_episodes(tmp_path_factory.mktemp("s4") / "data")


def test_z_is_the_policys_vector_of_the_element_the_action_names(episodes, tmp_path):
    policy = save_pointer(tmp_path / "pointer", seed=1)
    provider = PointerRepresentations(policy)
    assert provider.dim == 24 and provider.record == {"model": model_id(policy), "method": "pointer_hidden", "dim": 24}
    net = build_policy(PolicyConfig(kind="learned_pointer", path=str(policy))).model.eval()
    steps = [s for t in read_trajectories(episodes) for s in t.steps][:20]
    observations = [s.observation for s in steps for _ in range(3)]
    actions = [a for s in steps for a in (s.action_text, "click [0]", "click [99]")]
    z = provider(observations, actions)
    assert z.shape == (60, 24) and z.dtype == np.float32
    for i, step in enumerate(steps):
        with torch.no_grad():
            decision = Decision(net, step.observation, 1.0)
        index = [e.index for e in decision.elements].index(int(step.action_text.split("[")[1].split("]")[0]))
        np.testing.assert_allclose(z[3 * i], decision.hidden[index].numpy(), atol=1e-6)
        np.testing.assert_allclose(z[3 * i + 1], decision.hidden[0].numpy(), atol=1e-6)
        assert not z[3 * i + 2].any()  # no element 99 on the page: nothing to represent
    assert np.abs(z[0::3] - z[1::3]).max() > 1e-3  # the element, not the page, decides the vector
    # the rows do not depend on which other pairs share the call
    np.testing.assert_array_equal(provider(observations[3:6], actions[3:6]), z[3:6])


def test_the_method_chooses_the_provider_and_a_folder_of_another_kind_is_refused(tmp_path):
    policy = save_pointer(tmp_path / "pointer", seed=0)
    assert isinstance(representation_provider(policy, "pointer_hidden"), PointerRepresentations)
    t5 = tmp_path / "t5"
    build_policy(PolicyConfig(kind="tiny_t5", d_model=16, d_ff=32, num_heads=2, num_layers=1)).save_pretrained(t5)
    with pytest.raises(ValueError, match=MODEL_KEY.replace(".", r"\.") + ".*not a pointing policy"):
        representation_provider(t5, "pointer_hidden")
    with pytest.raises(ValueError, match="unknown method"):
        RepresentationProvider(policy, "pointer_hidden")  # the VLM provider does not take it


def test_a_pointer_folder_id_follows_its_weights(tmp_path):
    """A pointing policy's weights are a .pt file: two policies of one shape must not share an id."""
    assert model_id(save_pointer(tmp_path / "a" / "policy", 0)) != model_id(save_pointer(tmp_path / "b" / "policy", 1))


def test_the_bench_prepares_digiq_data_from_its_start_once(episodes, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    start = save_pointer(tmp_path / "start", seed=2)
    args = argparse.Namespace(tag="t", dataset=str(episodes), policy="learned_pointer")
    monkeypatch.setitem(synthweb_bench.SETTINGS, "S4-small", SMALL_S4)
    synthweb_bench.prepare_digiq_data(args, "S4-small", str(start))
    ready = synthweb_bench.digiq_data(args, "S4-small")
    raw, prepared = read_trajectories(episodes), read_trajectories(ready)
    assert [t.id for t in prepared] == [t.id for t in raw]
    for before, after in zip(raw, prepared):
        for b, a in zip(before.steps, after.steps):
            candidates = a.info["digiq"]["candidates"]
            assert len(candidates) == 16 and candidates[0] == b.action_text
            assert a.observation.features[Z_KEY].shape == (16, 24)
    assert check_representations(prepared, str(start), "pointer_hidden") == 24
    assert not (ready.parent / "digiq-candidates").exists()  # the intermediate stage is not kept

    made = os.stat(ready / "digiq.json").st_mtime_ns
    synthweb_bench.prepare_digiq_data(args, "S4-small", str(start))
    assert os.stat(ready / "digiq.json").st_mtime_ns == made  # the same start: read back, not remade
    save_pointer(start, seed=3)  # another start in the same folder
    synthweb_bench.prepare_digiq_data(args, "S4-small", str(start))
    assert os.stat(ready / "digiq.json").st_mtime_ns != made
    assert json.loads((ready / "digiq.json").read_text())["model"] == model_id(start)

    made = os.stat(ready / "digiq.json").st_mtime_ns
    elsewhere = tmp_path / "elsewhere"  # another --dataset, the same start
    shutil.copytree(episodes, elsewhere)
    other_data = argparse.Namespace(**{**vars(args), "dataset": str(elsewhere)})
    synthweb_bench.prepare_digiq_data(other_data, "S4-small", str(start))
    assert os.stat(ready / "digiq.json").st_mtime_ns != made


def test_digiq_runs_name_their_start_and_data_and_need_a_start(tmp_path):
    args = argparse.Namespace(policy="learned_pointer", rollout_size=32, eval_episodes=200, set=[], tag="",
                              offline_iterations=30, dataset="runs/synthweb-s4-data")  # fmt: skip
    keys = synthweb_bench.overrides(args, "S4-read", "DQ", 0, start="runs/start/policy")
    assert "offline.data=[runs/bench-synthweb/S4-read/digiq-data]" in keys
    assert {"learner.digiq.representation.model=runs/start/policy", "learner.digiq.critic_iterations=30",
            "learner.digiq.actor_iterations=30", "policy.path=runs/start/policy"} <= set(keys)  # fmt: skip
    with pytest.raises(SystemExit, match="start policy"):
        synthweb_bench.overrides(args, "S4", "DQ", 0, start=None)


def test_the_s4_analysis_reads_a_critic_that_knows_the_named_link_and_the_returns(episodes, tmp_path):
    """`critic_scores` on real scripted episodes scored by a made-up critic whose Q of the dataset's action is the
    discounted return and whose advantage is +0.2 for the named link, 0 for Back on a detour page and -0.2 for
    anything else."""
    import synthweb_s4_analysis

    from rlsys.data.shards import ShardWriter
    from rlsys.envs.synthweb import build_site

    config = tmp_path / "config.yaml"
    config.write_text("learner: {digiq: {validation_fraction: 0.5}}\n")  # gamma 0.95 and threshold 0.10
    scored, with_named = [], []
    for t in read_trajectories(episodes):
        site, before = build_site(t.task.meta), {"page": 0, "detours": 0}
        for i, step in enumerate(t.steps):
            right = None if before["detours"] else site.right[before["page"]]
            named = None if right is None else site.links[before["page"]][right]
            texts = {f"click [{e.index}]": e.text for e in elements_of(step.observation)}
            candidates = [step.action_text, *texts]
            # Back is right on a detour page only: on a page of the path it is one more wrong link
            advantage = [0.2 if texts[c] == named else 0.0 if texts[c] == "Back" and before["detours"] else -0.2
                         for c in candidates]  # fmt: skip
            with_named.append(named is not None)  # the steps whose best advantage is above 0: 0.2
            g = float(t.outcome == "success") * 0.95 ** (len(t.steps) - i - 1)
            step.info["digiq"] = {"candidates": candidates, "q": [g] * len(candidates), "v": 0.0,
                                  "advantage": advantage, "best": int(np.argmax(advantage))}  # fmt: skip
            before = step.info["synthweb"]
        scored.append(t)
    ShardWriter(tmp_path / "scored").write(scored)
    out = synthweb_s4_analysis.critic_scores(tmp_path / "scored", config)
    assert out["mean_advantage"] == pytest.approx({"named": 0.2, "wrong": -0.2, "back": 0.0, "deeper": -0.2})
    assert out["best_is_named_link"] == 1.0
    assert 0 < out["named_share_of_candidates"] < 1 and out["held_out_r2_of_q"] == pytest.approx(1.0)
    share = sum(with_named) / len(with_named)
    assert 0 < share < 1 and out["steps_best_advantage_above"] == pytest.approx(
        {"0.0": share, "0.05": share, "0.1": share}
    )


def test_candidates_drawn_twice_from_one_config_are_the_same(episodes, tmp_path):
    """The S4-read dataset was prepared twice (for two settings) and drew different candidates from one saved
    start: a loaded policy samples from torch's generator, which nothing seeded."""
    from rlsys.cli.digiq import main as digiq_main

    start = save_pointer(tmp_path / "start", seed=4)
    keys = [*SMALL_S4, "policy.kind=learned_pointer", f"policy.path={start}", "run.training=offline",
            f"offline.data=[{episodes}]", "learner.algorithm=digiq",
            f"learner.digiq.representation.model={start}"]  # fmt: skip
    drawn = []
    for out in ("a", "b"):
        torch.rand(3)  # whatever ran before in the process
        assert digiq_main(["candidates", "--config", synthweb_bench.BASE, "--data", str(episodes), "--out",
                           str(tmp_path / out), *keys]) == 0  # fmt: skip
        drawn.append([s.info["digiq"]["candidates"] for t in read_trajectories(tmp_path / out) for s in t.steps])
    assert drawn[0] == drawn[1] and len({tuple(c) for c in drawn[0]}) > 1
