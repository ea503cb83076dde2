import random
from dataclasses import replace

import pytest
import torch

from rlsys.config import PolicyConfig
from rlsys.core.grammar import Grammar
from rlsys.core.types import Observation
from rlsys.envs.web.spaces import ParseError
from rlsys.envs.web.spaces.element import grammar, parse, render
from rlsys.policies import build_policy

CFG = PolicyConfig(d_model=32, d_ff=64, num_heads=2, max_new_tokens=24)


def observation(n_elements: int, editable=(), task="Click on Tab #2.") -> Observation:
    elements = [
        {"tag": "input" if i in editable else "button", "text": f"e{i}", "editable": i in editable}
        for i in range(n_elements)
    ]
    ui = "\n".join(f'[{i}] {e["tag"]} "{e["text"]}"' for i, e in enumerate(elements))
    return Observation(b"", ui, "about:blank", task, {"grammar": grammar(elements, max_text=8).to_dict()})


def test_fresh_policy_only_emits_valid_actions():
    policy = build_policy(CFG, seed=0)
    rng = random.Random(0)
    obs = [observation(rng.randint(1, 12), editable={0, 3}) for _ in range(24)]
    for sample, o in zip(policy.act(obs), obs):
        g = Grammar.from_dict(o.extras["grammar"])
        assert g.accepts(sample.text), sample.text
        parsed = parse(sample.text, len(g.choices))
        assert render(parsed) == sample.text.strip()
        assert sample.logprob is not None and sample.logprob <= 0


def test_behaviour_logprob_matches_constrained_distribution():
    """With a single legal action the sampling distribution is a point mass: log-prob 0."""
    policy = build_policy(CFG, seed=1)
    (sample,) = policy.act([observation(1)])
    assert sample.text == "click [0]" and sample.logprob == pytest.approx(0.0, abs=1e-5)


def test_save_and_from_pretrained_round_trip(tmp_path):
    policy = build_policy(CFG, seed=2)
    obs = [observation(5), observation(3)]
    actions = ["click [4]", "click [1]"]
    policy.save_pretrained(tmp_path / "p")
    assert (tmp_path / "p" / "model.safetensors").exists()
    loaded = build_policy(PolicyConfig(**{**CFG.__dict__, "path": str(tmp_path / "p")}))
    torch.testing.assert_close(policy.log_probs(obs, actions), loaded.log_probs(obs, actions))
    assert [s.text for s in policy.act(obs, greedy=True)] == [s.text for s in loaded.act(obs, greedy=True)]


def test_log_probs_ignore_padding():
    policy = build_policy(CFG, seed=3)
    obs = [observation(12), observation(2)]
    together = policy.log_probs(obs, ["click [11]", "click [1]"])
    alone = torch.cat([policy.log_probs([obs[0]], ["click [11]"]), policy.log_probs([obs[1]], ["click [1]"])])
    torch.testing.assert_close(together, alone, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "text, n, expected",
    [
        ("click [2]", 3, ("click", 2, "")),
        ("  CLICK[0] ", 1, ("click", 0, "")),
        ('type [1] "hello, world"', 2, ("type", 1, "hello, world")),
        ("type [0] Kasey", 1, ("type", 0, "Kasey")),
    ],
)
def test_parse_actions(text, n, expected):
    a = parse(text, n)
    assert (a.kind, a.element, a.text) == expected


@pytest.mark.parametrize(
    "text, n", [("click [3]", 3), ("press enter", 3), ("type [0]", 1), ("click [0] x", 1), ("", 1)]
)
def test_parse_errors_are_typed(text, n):
    with pytest.raises(ParseError):
        parse(text, n)


def test_each_sample_carries_the_prompt_the_model_read_after_truncation():
    """The byte-level T5 keeps the task and cuts trailing elements at max_prompt_tokens: the sample's prompt is
    that cut text (one byte a token, then the tokenizer's end token), not the whole element list."""
    policy = build_policy(replace(CFG, max_prompt_tokens=120), seed=0)
    short, long = observation(2), observation(40)
    samples = policy.act([short, long])
    assert samples[0].prompt == f"Task: {short.task}\nPrevious: none\nElements:\n{short.ui_text}</s>"
    cut = samples[1].prompt
    assert cut.startswith(f"Task: {long.task}\nPrevious: none\nElements:\n[0] button") and cut.endswith("</s>")
    assert len(cut.removesuffix("</s>").encode()) == 120 - 1 and '"e39"' not in cut
