"""`policy.placement: vllm` for a vision-language policy: a real vLLM engine (the CPU build, from the environment
scripts/setup-vllm.sh builds, with rlsys's plugin for Qwen2-VL without torchvision) serving a tiny Qwen2-VL built
from config with a LoRA adapter: the screenshot as the prompt's image, the learner's prompt ids, grammar-constrained
samples whose log-probs are the learner's, and each new adapter version served from the next request."""

import pytest
import ray
import torch

from rlsys.actors.weight_store import WeightStore
from rlsys.core.grammar import Grammar
from rlsys.policies import build_policy
from rlsys.policies.weights import pack_state_dict
from tests.actors.test_vllm_engine import TOLERANCE, VLLM, vllm_python_or_skip
from tests.conftest import make_config
from tests.policies.test_policy_vlm import observation

LORA = {"enabled": True, "r": 4, "alpha": 8, "dropout": 0.0}
PER_TOKEN = 0.003  # nats a scored token between the engine and the learner
POLICY = {
    "kind": "vlm",
    "arch": "qwen2_vl",
    "d_model": 128,  # head size 64, which vLLM's CPU attention takes
    "d_ff": 256,
    "num_layers": 2,
    "max_prompt_tokens": 1000,  # with the image's tokens: the engine's max_model_len
    "max_new_tokens": 16,
    "lora": LORA,
}


def vlm_config(tmp_path, **overrides):
    policy = {f"policy__{k}": v for k, v in POLICY.items()}
    return make_config(tmp_path, **(policy | {"policy__placement": "vllm", "policy__vllm": VLLM} | overrides))


def with_adapter_weights(policy, seed: int):
    """A published adapter that changes the model (peft starts lora_B at zero, which would change nothing)."""
    generator = torch.Generator().manual_seed(seed)
    state = {
        k: torch.randn(v.shape, generator=generator) * 0.3 if "lora_B" in k else v
        for k, v in policy.state_dict().items()
    }
    policy.load_state_dict(state)
    return pack_state_dict(policy.state_dict())


@pytest.fixture(scope="module")
def engine(ray_session, tmp_path_factory):
    vllm_python_or_skip()
    from rlsys.actors.vllm_placement import start_engines

    cfg = vlm_config(tmp_path_factory.mktemp("vllm-vlm"))
    store = ray.remote(WeightStore).remote()
    learner = build_policy(cfg.policy, seed=cfg.run.seed)  # the base the engine is started with
    assert learner.adapter_only
    ray.get(store.publish.remote(0, with_adapter_weights(learner, seed=1)))
    (engine,) = start_engines(cfg, store, seed=3)
    yield engine, store, learner, cfg
    ray.get(engine.shutdown.remote(), timeout=120)
    ray.kill(engine, no_restart=True)


def observations():
    colors = [(200, 30, 30), (20, 20, 220), (30, 160, 30), (240, 240, 240)]
    return [observation(n, color) for n, color in zip((2, 5, 9, 12), colors) for _ in range(3)]


def engine_samples(engine, cfg, obs, greedy=False):
    """The engine's raw answers (with the ids it sampled) for the prompts and screenshots a runner sends."""
    from rlsys.actors.vllm_placement import EnginePolicy
    from rlsys.policies.grammar_regex import grammar_regex_or_none

    runner = EnginePolicy(engine, cfg.policy)
    prompts, images = runner.prompts(obs)
    regexes = [grammar_regex_or_none(o.extras["grammar"]) for o in obs]
    return prompts, images, ray.get(engine.generate.remote(prompts, regexes, greedy, images), timeout=300)


def assert_logprobs_are_the_learners(learner, obs, results):
    texts = [r["text"] for r in results]
    # the learner scores the text tokenized again: those are the ids the engine sampled (a byte tokenizer)
    for r in results:
        assert learner.tokenizer(r["text"], add_special_tokens=False).input_ids == r["token_ids"]
    with torch.no_grad():
        logp, _ = learner.token_logprobs(obs, texts)
    behaviour = torch.tensor([r["logprob"] for r in results])
    # vLLM's CPU kernels and transformers' differ by up to ~0.002 nats a token on this model (0.0265 seen on a
    # 16-token typed action): the bound grows with the action's tokens, EOS included
    bound = torch.tensor([PER_TOKEN * (len(r["token_ids"]) + 1) for r in results])
    assert ((logp.sum(-1) - behaviour).abs() < bound).all(), (logp.sum(-1) - behaviour, bound)


def test_the_runner_sends_the_learners_prompt_ids_and_the_screenshot(engine):
    from rlsys.actors.vllm_placement import EnginePolicy

    _, _, learner, cfg = engine
    obs = observations()[::3]
    prompts, images = EnginePolicy(engine[0], cfg.policy).prompts(obs)
    assert prompts == [row["input_ids"][0].tolist() for row in learner._encoded(obs)]
    assert images == [o.screenshot_png for o in obs]
    image_pad = learner.inputs.image_token_id
    assert all(ids.count(image_pad) > 1 for ids in prompts)  # expanded, as the learner reads it


def test_grammar_constrained_samples_of_the_screenshot_have_the_learners_logprobs(engine):
    engine, _, learner, cfg = engine
    obs = observations()
    _, _, results = engine_samples(engine, cfg, obs)  # the engine checks vLLM ran exactly the ids sent
    for r, o in zip(results, obs):
        assert Grammar.from_dict(o.extras["grammar"]).accepts(r["text"]), r["text"]
        assert r["version"] == 0
    assert len({r["text"] for r in results}) > 3, "sampling at temperature 1 should vary"
    assert_logprobs_are_the_learners(learner, obs, results)
    # the image is read: one prompt with two screenshots gets two distributions, far enough apart that an
    # engine that read another image (or none) would miss the learner's log-probs
    same_prompt = [observation(5, (0, 0, 0)), observation(5, (255, 255, 255))]
    with torch.no_grad():
        logp, _ = learner.token_logprobs(same_prompt, ["click [1]"] * 2)
    assert (logp.sum(-1)[0] - logp.sum(-1)[1]).abs() > 4 * TOLERANCE
    _, _, greedy = engine_samples(engine, cfg, same_prompt, greedy=True)
    assert_logprobs_are_the_learners(learner, same_prompt, greedy)


def test_a_new_adapter_is_served_from_the_next_request(engine):
    from rlsys.actors.vllm_placement import EnginePolicy

    engine, store, learner, cfg = engine
    ray.get(store.publish.remote(5, with_adapter_weights(learner, seed=7)))
    obs = observations()[:6]
    samples = EnginePolicy(engine, cfg.policy).act(obs)
    assert {s.version for s in samples} == {5}
    assert all(s.token_ids for s in samples)  # the learner scores the ids the engine sampled
    assert all(s.prompt.startswith("USER: <|vision_start|><|image_pad|>") for s in samples)
    with torch.no_grad():
        logp, _ = learner.token_logprobs(obs, [s.text for s in samples], token_ids=[s.token_ids for s in samples])
    bound = torch.tensor([PER_TOKEN * (len(s.token_ids) + 1) for s in samples])
    assert ((logp.sum(-1) - torch.tensor([s.logprob for s in samples])).abs() < bound).all()
    assert ray.get(engine.stats.remote())["vllm/weight_syncs"] == 2


def test_an_engine_serves_a_vlm_the_way_its_learner_builds_it(tmp_path):
    from rlsys.actors.vllm_placement import engine_args, engine_model

    cfg = vlm_config(tmp_path)
    assert engine_args(cfg)["limit_mm_per_prompt"] == {"image": 1, "video": 0}
    # a released VLM and policy.lora: the adapter the learner puts on every linear layer of its language model
    build_policy(vlm_config(tmp_path, policy__lora={"enabled": False}).policy, seed=1).save_pretrained(tmp_path / "m")
    cfg = vlm_config(tmp_path, policy__path=str(tmp_path / "m"))
    learner = build_policy(cfg.policy)
    name, files, settings = engine_model(cfg)
    assert (name, files) == (str(tmp_path / "m"), None)
    lora = learner.model.peft_config["default"]
    assert settings == {"r": 4, "lora_alpha": 8, "target_modules": sorted(lora.target_modules)}
    assert all(".language_model." in name for name in settings["target_modules"])
