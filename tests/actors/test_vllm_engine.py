"""`policy.placement: vllm`: a real vLLM engine (the CPU build, from the environment scripts/setup-vllm.sh
builds) serving a tiny causal_lm policy built from config: constrained sampling, the behaviour log-probs
against the learner's teacher forcing, new weights served between requests, and a GRPO update on its samples."""

import json
import math
import os
import re
import signal

import pytest
import ray
import torch

from rlsys.actors.weight_store import WeightStore
from rlsys.config import LearnerConfig
from rlsys.config.errors import ConfigError
from rlsys.core.grammar import Grammar
from rlsys.core.types import Step, Task, Trajectory
from rlsys.learners.grpo.algorithm import GRPO
from rlsys.policies import build_policy
from rlsys.policies.grammar_regex import grammar_regex
from rlsys.policies.weights import pack_state_dict
from tests.conftest import make_config
from tests.policies.test_policy import observation
from tests.support.hub_cache import fill_hub_cache

POLICY = {"kind": "causal_lm", "d_model": 128, "d_ff": 256, "num_layers": 2, "max_prompt_tokens": 200}
TOLERANCE = 0.02  # nats per action of up to 12 tokens
VLLM = {"num_cpus": 0.25, "enforce_eager": True, "start_timeout_s": 300}


def vllm_config(tmp_path, **overrides):
    policy = {f"policy__{k}": v for k, v in POLICY.items()}
    return make_config(tmp_path, **policy, policy__placement="vllm", policy__vllm=VLLM, **overrides)


def vllm_python_or_skip() -> str:
    from rlsys.actors.vllm_placement import vllm_python

    try:
        return vllm_python("auto")
    except ConfigError as e:
        if os.environ.get("CI"):  # CI builds the environment: a missing one is a failure there
            raise
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def engine(ray_session, tmp_path_factory):
    vllm_python_or_skip()
    from rlsys.actors.vllm_placement import start_engines

    cfg = vllm_config(tmp_path_factory.mktemp("vllm"))
    store = ray.remote(WeightStore).remote()
    learner = build_policy(cfg.policy, seed=cfg.run.seed)
    ray.get(store.publish.remote(0, pack_state_dict(learner.state_dict())))
    (engine,) = start_engines(cfg, store, seed=3)
    yield engine, store, learner, cfg
    ray.get(engine.shutdown.remote(), timeout=120)
    ray.kill(engine, no_restart=True)


def serve(engine, cfg, observations, greedy=False):
    from rlsys.actors.vllm_placement import EnginePolicy

    return EnginePolicy(engine, cfg.policy).act(observations, greedy)


def test_grammar_constrained_samples_and_their_logprobs_match_the_learner(engine):
    engine, _, learner, cfg = engine
    obs = [observation(n, editable={0}) for n in (2, 5, 9, 12) for _ in range(4)]
    samples = serve(engine, cfg, obs)
    for sample, o in zip(samples, obs):
        grammar = Grammar.from_dict(o.extras["grammar"])
        assert grammar.accepts(sample.text), sample.text
        assert re.fullmatch(grammar_regex(grammar), sample.text)
        assert sample.version == 0 and sample.token_ids
    assert len({s.text for s in samples}) > 3, "sampling at temperature 1 should vary"
    # the behaviour log-prob is what the learner computes for the same ids under the same grammar
    with torch.no_grad():
        logp, _ = learner.token_logprobs(obs, [s.text for s in samples], [s.token_ids for s in samples])
    behaviour = torch.tensor([s.logprob for s in samples])
    # vLLM's CPU kernels add up in another order: about 5e-4 a token (a grammar or temperature that
    # differed would cost nats)
    assert (logp.sum(-1) - behaviour).abs().max() < TOLERANCE
    # greedy: the same answer every time (not always the learner's: an untrained model has near ties
    # that the kernels' rounding breaks either way)
    greedy = [s.text for s in serve(engine, cfg, obs[:4], greedy=True)]
    assert greedy == [s.text for s in serve(engine, cfg, obs[:4], greedy=True)]


def test_new_weights_are_served_from_the_next_request(engine):
    engine, store, learner, cfg = engine
    obs = [observation(n, editable={0}) for n in (3, 6)]
    other = build_policy(cfg.policy, seed=11)
    ray.get(store.publish.remote(5, pack_state_dict(other.state_dict())))
    samples = serve(engine, cfg, obs * 4)
    assert {s.version for s in samples} == {5}
    with torch.no_grad():
        logp, _ = other.token_logprobs(obs * 4, [s.text for s in samples], [s.token_ids for s in samples])
    assert (logp.sum(-1) - torch.tensor([s.logprob for s in samples])).abs().max() < TOLERANCE
    stats = ray.get(engine.stats.remote())
    assert stats["policy_version"] == 5 and stats["vllm/weight_syncs"] == 2


def test_what_an_engine_cannot_serve_is_refused_when_the_config_loads(tmp_path):
    with pytest.raises(ConfigError, match="policy.placement = 'vllm' serves .*causal_lm.*'tiny_t5'"):
        make_config(tmp_path, policy__placement="vllm")
    with pytest.raises(ConfigError, match="policy.publish"):  # the engine would get a LoRA model's full weights
        vllm_config(tmp_path, policy__lora={"enabled": True}, policy__publish="full")


def test_an_engine_loads_the_base_the_resolver_names_and_the_adapter_settings_of_its_checkpoint(tmp_path, monkeypatch):
    from rlsys.actors.vllm_placement import engine_model

    lora = {"enabled": True, "r": 4, "alpha": 8, "dropout": 0.0}
    build_policy(vllm_config(tmp_path, policy__lora=lora).policy, seed=1).save_pretrained(tmp_path / "ckpt")
    written = json.loads((tmp_path / "ckpt" / "adapter" / "adapter_config.json").read_text())
    settings = {k: written[k] for k in ("r", "lora_alpha", "target_modules")}
    # a LoRA checkpoint: vLLM loads its base and the adapters the learner publishes, whether or not the config
    # asks for LoRA itself (the checkpoint's model has the adapter, so the learner publishes it alone)
    for enabled in (True, False):
        cfg = vllm_config(tmp_path, policy__path=str(tmp_path / "ckpt"), policy__lora=lora | {"enabled": enabled})
        assert engine_model(cfg) == (str(tmp_path / "ckpt" / "base"), None, settings)
    # a whole model by Hub id: the id, which each engine's machine finds in its own cache
    build_policy(vllm_config(tmp_path).policy, seed=2).save_pretrained(tmp_path / "whole")
    fill_hub_cache(tmp_path / "hf-cache", "tiny-org/tiny-lm", tmp_path / "whole")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    cfg = vllm_config(tmp_path, policy__path="tiny-org/tiny-lm", policy__lora=lora)
    name, adapter, fresh = engine_model(cfg)
    assert (name, adapter) == ("tiny-org/tiny-lm", None)
    in_order = lambda s: s | {"target_modules": sorted(s["target_modules"])}
    assert in_order(fresh) == in_order(settings)  # the config's settings, as peft wrote them for the same config
    assert engine_model(vllm_config(tmp_path, policy__path="tiny-org/tiny-lm")) == ("tiny-org/tiny-lm", None, None)


def test_a_killed_engine_is_restarted_and_serves_the_newest_weights(engine):
    engine, store, _, cfg = engine
    version = ray.get(store.get_version.remote())
    pid = ray.get(engine.pid.remote())
    os.kill(pid, signal.SIGKILL)
    samples = serve(engine, cfg, [observation(4)])  # waits while Ray starts the engine again
    assert ray.get(engine.pid.remote()) != pid
    assert samples[0].version == version
    assert ray.get(engine.stats.remote())["vllm/weight_syncs"] == 1  # the new engine's own first sync


def test_a_grpo_update_on_engine_samples_weighs_them_one_and_raises_the_rewarded_action(engine):
    """GRPO under `placement: vllm`: a group of the engine's samples for one observation, rewarded by whether they
    match the first. A learner policy with the weights the engine serves scores the ids it sampled as it did (a
    behaviour weight of 1 but for the kernels' rounding), and one update raises the rewarded action."""
    engine, store, _, cfg = engine
    policy = build_policy(cfg.policy, seed=cfg.run.seed)
    version = ray.get(store.get_version.remote()) + 1
    ray.get(store.publish.remote(version, pack_state_dict(policy.state_dict())))
    obs = observation(3, editable={0})
    samples = serve(engine, cfg, [obs] * 8)
    assert {s.version for s in samples} == {version}
    good = samples[0]
    rewards = [float(s.text == good.text) for s in samples]
    assert 0 < sum(rewards) < len(samples), [s.text for s in samples]
    meta = {"rollout_group": "g", "group_size": len(samples)}
    trajectories = [
        Trajectory(
            Task("task-g", obs.task, "synthweb", meta=dict(meta)),
            [Step(obs, s.text, None, r, True, s.version, s.logprob, token_ids=s.token_ids)],
            "success" if r else "failure",
        )
        for s, r in zip(samples, rewards)
    ]

    def logprob_of_good():
        with torch.no_grad():
            return float(policy.token_logprobs([obs], [good.text], [good.token_ids])[0].sum())

    before = logprob_of_good()
    learner = LearnerConfig(algorithm="grpo", lr=1e-2, batch_size=8, importance_clip=math.exp(TOLERANCE))
    metrics = GRPO(learner, policy).update(trajectories)
    assert (metrics["grpo/samples"], metrics["actor/updates"], metrics["actor/no_behaviour_logprob"]) == (8, 1, 0)
    # every pi_prox / mu within the tolerance's factor of 1: none above the cap, and the mean not below its inverse
    assert metrics["actor/importance_clipped"] == 0
    assert metrics["actor/importance_weight"] > math.exp(-TOLERANCE)
    assert logprob_of_good() > before
