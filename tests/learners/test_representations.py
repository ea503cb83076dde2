"""Digi-Q's representation pipeline: screen-change labels, their SFT, and z(s, a) from the tuned VLM,
through real tiny LLaVA and Qwen2-VL models saved and loaded like released checkpoints."""

import copy
import io
import shutil

import numpy as np
import pytest
import safetensors.numpy
import torch
from PIL import Image

from rlsys.config import LearnerConfig, LoraConfig, PolicyConfig
from rlsys.core.types import Observation, Step, Task, Trajectory
from rlsys.data.shards import read_shard, write_shard
from rlsys.learners.digiq.representations import (
    METHOD_KEY,
    METHODS,
    MODEL_KEY,
    Z_KEY,
    RepresentationMismatch,
    RepresentationProvider,
    annotate,
    change_observation,
    check_representations,
    expected_model_id,
    model_id,
)
from rlsys.learners.digiq.screen_change import CHANGE_PROMPT, change_examples, change_score
from rlsys.learners.filtered_bc import FilteredBC
from rlsys.policies import build_policy
from rlsys.policies.prompts import agent_prompt

ARCHS = ["llava", "qwen2_vl"]
W, H = 64, 48
RERUN = "rlsys-digiq represent"


def png(color, size=(W, H), box=None, box_color=(255, 255, 255)) -> bytes:
    im = Image.new("RGB", size, color)
    if box is not None:
        im.paste(Image.new("RGB", (box[2] - box[0], box[3] - box[1]), box_color), box[:2])
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def observation(color, task="open the settings", location="com.android.launcher", **extras) -> Observation:
    return Observation(png(color), "", location, task, extras)


def step(obs: Observation, action: str, error=None, **info) -> Step:
    return Step(obs, action, None, 0.0, False, 3, -1.5, error=error, info=info)


def trajectory(steps, final=None, task_id="t") -> Trajectory:
    task = Task(id=task_id, instruction=steps[0].observation.task, suite="android")
    return Trajectory(task=task, steps=steps, outcome="failure", final_observation=final)


def policy_config(arch: str, **kw) -> PolicyConfig:
    base = dict(kind="vlm", arch=arch, d_model=32, d_ff=64, num_heads=2, num_layers=2, max_new_tokens=8)
    return PolicyConfig(**(base | kw))


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models gain nothing from intra-op threads, and on a busy machine they stall on each other."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny base model of each family, saved like a released checkpoint."""
    root = tmp_path_factory.mktemp("models")
    for arch in ARCHS:
        build_policy(policy_config(arch), seed=0).save_pretrained(root / arch)
    return root


@pytest.fixture(scope="module")
def providers(saved):
    cache = {}

    def get(arch, method, batch_size=8):
        key = (arch, method, batch_size)
        if key not in cache:
            cache[key] = RepresentationProvider(saved / arch, method, batch_size=batch_size)
        return cache[key]

    return get


def mixed_pairs():
    """Prompts of different lengths, so batched rows are padded."""
    obs = [
        observation((200, 30, 30)),
        observation((20, 20, 220), task="a much longer task that makes this prompt a good deal longer", location="x"),
        observation((30, 160, 30), task="call mom", grammar={"rules": "never read"}),
    ]
    return obs, ["tap [[500,300]]", 'type "hello there"', "press home"]


# -- screen change labels


def test_change_score_matches_a_hand_computation():
    assert change_score(png((0, 0, 0)), png((255, 255, 255))) == 255.0**2
    assert change_score(png((10, 20, 30)), png((13, 24, 35))) == pytest.approx(50 / 3, abs=1e-12)
    # the left half changes by 60 in one channel: half of the downscaled pixels, one channel of three
    assert change_score(png((0, 0, 0)), png((0, 0, 0), box=(0, 0, 32, 48), box_color=(0, 60, 0))) == pytest.approx(600)
    # one pixel changes by 255 everywhere: averaged into one 4x4 box of the 16x12 downscaled image, which
    # PIL keeps as 8-bit (255 / 16 rounds to 16)
    one = change_score(png((0, 0, 0)), png((0, 0, 0), box=(5, 5, 6, 6)))
    assert one == pytest.approx(16**2 / (16 * 12), rel=1e-12)
    assert change_score(png((0, 0, 0)), png((0, 0, 0), box=(5, 5, 6, 6)), downscale=1) == pytest.approx(
        255**2 / (64 * 48)
    )
    # the after screenshot is resized to the before's size
    assert change_score(png((10, 20, 30)), png((13, 24, 35), size=(128, 96))) == pytest.approx(50 / 3)
    assert change_score(png((1, 2, 3), size=(3, 2)), png((1, 2, 4), size=(3, 2))) == pytest.approx(1 / 3)


def test_change_examples_label_skip_and_round_trip(tmp_path):
    red = observation((200, 30, 30), grammar={"kind": "element"}, history=[{"action": "press home"}])
    red.features["stale"] = np.ones(3, dtype=np.float32)
    blue, blue_again = observation((20, 20, 220)), observation((20, 20, 220))
    boundary, above = observation((100, 100, 100)), observation((109, 103, 100))  # score exactly 30
    above2 = observation((109, 103, 101))  # 91 / 3 > 30
    t1 = trajectory(
        [step(red, "tap [[1,1]]"), step(blue, 'type "x"', error="no field focused"), step(blue, "press back")],
        final=blue_again,
    )
    t2 = trajectory([step(boundary, "swipe up"), step(above, "swipe down"), step(above2, "press home")])
    t3 = trajectory([step(blue, "")], final=red)
    assert change_score(boundary.screenshot_png, above.screenshot_png) == 30.0
    assert change_score(above.screenshot_png, above2.screenshot_png) == pytest.approx(1 / 3)

    examples, stats = change_examples([t1, t2, t3])
    assert stats == {"examples": 4, "yes": 1, "no": 3, "skipped_no_next": 1, "skipped_error": 2}
    by_id = {e.id: e for e in examples}
    assert set(by_id) == {f"{t1.id}:0", f"{t1.id}:2", f"{t2.id}:0", f"{t2.id}:1"}
    assert [by_id[f"{t1.id}:{i}"].steps[0].action_text for i in (0, 2)] == ["yes", "no"]
    assert by_id[f"{t2.id}:0"].steps[0].action_text == "no"  # exactly at the threshold
    assert change_examples([t2], threshold=29.9)[0][0].steps[0].action_text == "yes"

    first = by_id[f"{t1.id}:0"]
    assert first.outcome == "success" and first.trainable and first.task == t1.task and len(first.steps) == 1
    s = first.steps[0]
    assert s.observation.extras == {"history": [{"action": "press home"}], "candidate_action": "tap [[1,1]]"}
    assert s.observation.features == {} and s.observation.screenshot_png == red.screenshot_png
    assert (s.reward, s.done, s.policy_version, s.logprob) == (0.0, True, 3, None)
    assert s.info == {"change_score": pytest.approx(change_score(red.screenshot_png, blue.screenshot_png)),
                      "source": {"trajectory_id": t1.id, "step": 0}}  # fmt: skip
    assert "grammar" in red.extras and "stale" in red.features  # the source data is untouched

    write_shard(tmp_path / "change.parquet", examples)
    back = {t.id: t for t in read_shard(tmp_path / "change.parquet")}
    assert set(back) == set(by_id)
    for key, e in by_id.items():
        a, b = back[key].steps[0], e.steps[0]
        assert (a.action_text, a.info, a.observation.extras) == (b.action_text, b.info, b.observation.extras)
        assert back[key].outcome == "success" and back[key].task == e.task


def test_the_change_prompt_shows_the_action_and_other_templates_ignore_it():
    obs = observation((0, 0, 0), task="turn on wifi", location="com.android.settings", candidate_action="tap [[1,2]]")
    text = agent_prompt(obs, CHANGE_PROMPT)
    assert "turn on wifi" in text and "com.android.settings" in text and "tap [[1,2]]" in text
    assert "yes" in text and "no" in text
    assert "tap [[1,2]]" not in agent_prompt(obs, "android_autoui")


# -- SFT on the change set, then representations of the tuned model


def test_the_change_set_trains_through_sft_and_feeds_the_provider(tmp_path):
    obs = [observation(c) for c in [(200, 30, 30), (20, 20, 220), (30, 160, 30), (240, 240, 240)]]
    after = [observation(c) for c in [(20, 20, 220), (20, 20, 220), (30, 160, 30), (0, 0, 0)]]
    actions = ["tap [[500,300]]", "press back", "swipe up", 'type "hi"']
    trajectories = [
        trajectory([step(o, a)], final=n, task_id=str(i)) for i, (o, a, n) in enumerate(zip(obs, actions, after))
    ]
    examples, stats = change_examples(trajectories)
    labels = [e.steps[0].action_text for e in examples]
    assert labels == ["yes", "no", "no", "yes"] and stats["examples"] == 4

    # a base whose output head is as confident as a pretrained one: a freshly initialised head (std 0.02 on
    # 32-wide states) keeps every token near 1/vocab whatever LoRA does to the layers below it
    base = build_policy(policy_config("llava"), seed=0)
    with torch.no_grad():
        base.model.get_output_embeddings().weight.mul_(10)
    base.save_pretrained(tmp_path / "base")
    cfg = policy_config(
        "llava",
        path=str(tmp_path / "base"),
        prompt=CHANGE_PROMPT,
        constrained=False,
        lora=LoraConfig(enabled=True, r=4, alpha=8, dropout=0.0),
    )
    torch.manual_seed(0)
    policy = build_policy(cfg)
    sft_obs = [e.steps[0].observation for e in examples]
    yes, no = (policy.tokenizer(w, add_special_tokens=False).input_ids[0] for w in ("yes", "no"))
    labelled = torch.tensor([yes if y == "yes" else no for y in labels])
    unlabelled = torch.tensor([no if y == "yes" else yes for y in labels])

    def answer_logprobs(provider):
        """log p(first token of the label), log p(first token of the other answer), from z(s, a)."""
        z = torch.from_numpy(provider(obs, actions))
        with torch.no_grad():
            logp = torch.log_softmax(provider.model.get_output_embeddings()(z), -1)
        return logp[torch.arange(4), labelled], logp[torch.arange(4), unlabelled], z

    with torch.no_grad():
        before = policy.log_probs(sft_obs, labels)
    sft = FilteredBC(LearnerConfig(algorithm="sft", lr=0.01, batch_size=4, updates_per_iteration=10), policy)
    losses = [sft.update(examples)["actor/loss"] for _ in range(3)]
    assert losses[-1] < losses[0] * 0.5, losses
    with torch.no_grad():
        trained = policy.log_probs(sft_obs, labels)
    assert (trained > before + 1).all(), (before, trained)
    assert [a.text for a in policy.act(sft_obs, greedy=True)] == labels

    policy.save_pretrained(tmp_path / "tuned")
    assert (tmp_path / "tuned" / "adapter").is_dir() and (tmp_path / "tuned" / "base.json").is_file()
    provider = RepresentationProvider(tmp_path / "tuned", "answer_state")
    assert provider.id != model_id(tmp_path / "base") and provider.id.startswith("tuned@")
    # the provider prompts each pair exactly as SFT saw it...
    mine = provider.policy._encoded([change_observation(o, a) for o, a in zip(obs, actions)])
    theirs = policy._encoded(sft_obs)
    for m, t in zip(mine, theirs):
        assert m.keys() == t.keys() and all(torch.equal(m[k], t[k]) for k in m)
    # ...and answer_state is the state whose logits answer it: the head on z scores the answer as SFT does
    right, wrong, z = answer_logprobs(provider)
    with torch.no_grad():
        logp, _ = policy.token_logprobs(sft_obs, labels)
    width = logp.shape[1]
    first = torch.stack([logp[i, width - len(y) - 1] for i, y in enumerate(labels)])  # the answer, then EOS
    torch.testing.assert_close(right, first, atol=1e-4, rtol=1e-4)
    assert (right > wrong).all(), (right, wrong)  # each pair gets its own label
    untuned_right, _, untuned_z = answer_logprobs(RepresentationProvider(tmp_path / "base", "answer_state"))
    assert (right > untuned_right).all() and np.abs(untuned_z - z).max() > 1e-2
    # generated_mean: the mean over the answer the model gives ("yes" / "no" and its EOS), not max_new_tokens
    generated = RepresentationProvider(tmp_path / "tuned", "generated_mean", max_new_tokens=8)
    assert generated.id == provider.id
    means = generated(obs, actions)
    for i, label in enumerate(labels):
        answer = policy.tokenizer(label, add_special_tokens=False).input_ids + [policy.tokenizer.eos_token_id]
        batch, _ = policy.inputs.batch(theirs[i : i + 1], side="left", suffixes=[answer])
        with torch.no_grad():
            states = policy.model(**batch, output_hidden_states=True).hidden_states[-1][0, -len(answer) :]
        np.testing.assert_allclose(means[i], states.mean(0).numpy(), atol=1e-4, rtol=0)


# -- the provider


@pytest.mark.parametrize("arch", ARCHS)
def test_provider_shapes_batches_methods_and_actions(arch, providers):
    obs, actions = mixed_pairs()
    outputs = {}
    for method in METHODS:
        provider = providers(arch, method)
        assert provider.dim == 32 and provider.record == {"model": provider.id, "method": method, "dim": 32}
        z = provider(obs, actions)
        assert z.shape == (3, 32) and z.dtype == np.float32 and np.isfinite(z).all()
        alone = np.concatenate([provider([o], [a]) for o, a in zip(obs, actions)])
        np.testing.assert_allclose(z, alone, atol=1e-4, rtol=0)
        chunked = providers(arch, method, batch_size=2)(obs, actions)
        np.testing.assert_allclose(z, chunked, atol=1e-4, rtol=0)
        same_screen = provider([obs[0], obs[0]], ["tap [[500,300]]", "press back"])
        assert np.abs(same_screen[0] - same_screen[1]).max() > 1e-3
        np.testing.assert_allclose(same_screen[0], z[0], atol=1e-4, rtol=0)
        outputs[method] = z
    assert np.abs(outputs["answer_state"] - outputs["generated_mean"]).max() > 1e-3
    assert providers(arch, "answer_state")([], []).shape == (0, 32)


@pytest.mark.parametrize("arch", ARCHS)
def test_provider_is_deterministic_across_instances(arch, saved, providers):
    obs, actions = mixed_pairs()
    for method in METHODS:
        again = RepresentationProvider(saved / arch, method, batch_size=3)
        assert again.id == providers(arch, method).id
        np.testing.assert_array_equal(again(obs, actions), again(obs, actions))
        np.testing.assert_allclose(again(obs, actions), providers(arch, method)(obs, actions), atol=1e-6, rtol=0)


def test_an_unknown_method_names_the_config_key(saved):
    with pytest.raises(ValueError, match=METHOD_KEY.replace(".", r"\.")):
        RepresentationProvider(saved / "llava", "cls_token")


def test_model_id_follows_content_and_folder_name(saved, tmp_path):
    original = model_id(saved / "llava")
    assert original.startswith("llava@") and len(original.split("@")[1]) == 16
    shutil.copytree(saved / "llava", tmp_path / "elsewhere" / "llava")
    assert model_id(tmp_path / "elsewhere" / "llava") == original
    assert expected_model_id(str(tmp_path / "elsewhere" / "llava")) == original
    assert expected_model_id(original) == original  # an id copied from the extraction's output
    shutil.copytree(saved / "llava", tmp_path / "renamed")
    assert model_id(tmp_path / "renamed").split("@")[1] == original.split("@")[1]
    assert model_id(tmp_path / "renamed") != original
    (tmp_path / "elsewhere" / "llava" / "README.md").write_text("notes")  # not part of the model
    assert model_id(tmp_path / "elsewhere" / "llava") == original

    weights = tmp_path / "elsewhere" / "llava" / "model.safetensors"
    tensors = safetensors.numpy.load_file(weights)
    name = sorted(tensors)[0]
    tensors[name] = tensors[name].copy()
    tensors[name].flat[0] += 1e-3
    safetensors.numpy.save_file(tensors, weights, metadata={"format": "pt"})
    assert model_id(tmp_path / "elsewhere" / "llava") != original

    # a LoRA folder pointing at its base: the base's weights are part of its id
    cfg = policy_config("llava", path=str(tmp_path / "renamed"), lora=LoraConfig(enabled=True, r=4, alpha=8))
    build_policy(cfg).save_pretrained(tmp_path / "lora")
    lora_id = model_id(tmp_path / "lora")
    assert lora_id.startswith("lora@") and lora_id.split("@")[1] != original.split("@")[1]
    tensors = safetensors.numpy.load_file(tmp_path / "renamed" / "model.safetensors")
    tensors[name] = tensors[name].copy()
    tensors[name].flat[0] += 1e-3
    safetensors.numpy.save_file(tensors, tmp_path / "renamed" / "model.safetensors", metadata={"format": "pt"})
    assert model_id(tmp_path / "lora") != lora_id


# -- annotating data and checking it against the config


def annotated_data(provider):
    a, b, c = observation((200, 30, 30)), observation((20, 20, 220)), observation((30, 160, 30), task="call mom")
    candidates = ["tap [[500,300]]", "press back", "swipe up"]
    t1 = trajectory([step(a, "press back", digiq={"candidates": candidates, "kept": 1}), step(b, "press home")], c)
    t2 = trajectory([step(c, 'type "mom"')], task_id="u")
    stats = annotate([t1, t2], provider, progress=False)
    return [t1, t2], stats, candidates


def test_annotate_round_trips_through_storage_and_checks(saved, providers, tmp_path):
    provider = providers("llava", "answer_state", batch_size=2)
    data, stats, candidates = annotated_data(provider)
    assert stats["steps"] == 3 and stats["pairs"] == 5 and stats["seconds"] > 0 and stats["pairs_per_s"] > 0
    first = data[0].steps[0]
    assert first.info["digiq"] == {"candidates": candidates, "kept": 1, "representation": provider.record}
    assert data[0].steps[1].info["digiq"]["candidates"] == ["press home"]
    write_shard(tmp_path / "z.parquet", data)
    back = read_shard(tmp_path / "z.parquet")
    for t, original in zip(back, data):
        for s, o in zip(t.steps, original.steps):
            z = s.observation.features[Z_KEY]
            assert z.dtype == np.float16 and z.shape == (len(s.info["digiq"]["candidates"]), 32)
            np.testing.assert_array_equal(z, o.observation.features[Z_KEY])
            assert s.info["digiq"]["representation"] == provider.record
    expected = provider([first.observation] * 3, candidates)
    np.testing.assert_allclose(back[0].steps[0].observation.features[Z_KEY], expected, atol=2e-3, rtol=2e-3)

    assert check_representations(back, str(saved / "llava"), "answer_state") == 32
    assert check_representations(back, provider.id, "answer_state") == 32

    def fails(trajectories, model=str(saved / "llava"), method="answer_state"):
        with pytest.raises(RepresentationMismatch) as info:
            check_representations(trajectories, model, method)
        assert RERUN in str(info.value)
        return str(info.value)

    message = fails(back, model=str(saved / "qwen2_vl"))
    assert MODEL_KEY in message and provider.id in message and model_id(saved / "qwen2_vl") in message
    message = fails(back, method="generated_mean")
    assert METHOD_KEY in message and "'answer_state'" in message and "'generated_mean'" in message

    other_data, _, _ = annotated_data(providers("llava", "generated_mean"))
    message = fails([back[0], other_data[1]])
    assert "mixed" in message and "'answer_state'" in message and "'generated_mean'" in message
    assert back[0].id in message and other_data[1].id in message

    missing = copy.deepcopy(back)
    del missing[1].steps[0].info["digiq"]["representation"]
    message = fails(missing)
    assert "no representation record" in message and f"trajectory {missing[1].id} step 0" in message

    rows = copy.deepcopy(back)
    rows[0].steps[0].observation.features[Z_KEY] = rows[0].steps[0].observation.features[Z_KEY][:2]
    message = fails(rows)
    assert "(2, 32)" in message and "3 candidates" in message and f"trajectory {rows[0].id} step 0" in message

    no_z = copy.deepcopy(back)
    del no_z[0].steps[1].observation.features[Z_KEY]
    assert Z_KEY in fails(no_z)
