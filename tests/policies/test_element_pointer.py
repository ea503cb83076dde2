import random

import pytest
import torch

from rlsys.config import PolicyConfig
from rlsys.core.grammar import Grammar
from rlsys.core.types import Observation
from rlsys.envs.web.spaces.element import grammar
from rlsys.policies import build_policy
from rlsys.policies.element_pointer import candidate_texts, elements_of, ordinal_of

CFG = PolicyConfig(kind="element_pointer", d_model=32, d_ff=64)
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def observation(task: str, labels: list[str], editable=(), previous=(), roles=False) -> Observation:
    elements = [
        {"tag": "input" if i in editable else "button", "text": t, "editable": i in editable}
        for i, t in enumerate(labels)
    ]
    if roles:
        ui = "\n".join(f'[{i}] {e["tag"]} "{e["text"]}"' for i, e in enumerate(elements))
    else:
        ui = "\n".join(f'[{i}]: <{e["tag"]}> "{e["text"]}";' for i, e in enumerate(elements))
    extras = {"grammar": grammar(elements).to_dict(), "previous_actions": list(previous)}
    return Observation(b"", ui, "about:blank", task, extras)


def word(rng: random.Random) -> str:
    return "".join(rng.choice(LETTERS) for _ in range(rng.randint(3, 7)))


def link_problem(rng: random.Random) -> tuple[Observation, str]:
    """`Click on the link "w"` among 2-6 made-up words: the answer is wherever the named word is."""
    labels = list({word(rng) for _ in range(rng.randint(2, 6))})
    k = rng.randrange(len(labels))
    return observation(f'Click on the link "{labels[k]}".', labels), f"click [{k}]"


def enter_problem(rng: random.Random) -> tuple[Observation, str]:
    """Type the quoted word into the field, then press Submit: two dependent actions."""
    name = word(rng).capitalize()
    task = f'Enter "{name}" into the text field and press Submit.'
    if rng.random() < 0.5:
        return observation(task, ["", "Submit"], editable={0}), f"type [0] {name}"
    return observation(task, [name, "Submit"], editable={0}, previous=[f"type [0] {name}"]), "click [1]"


def imitate(policy, problems: list[tuple[Observation, str]], steps: int, lr: float = 3e-3) -> None:
    optimizer = torch.optim.Adam(policy.parameters(), lr=lr)
    policy.train()
    rng = random.Random(0)
    for _ in range(steps):
        batch = rng.sample(problems, 16)
        logp, mask = policy.token_logprobs([o for o, _ in batch], [a for _, a in batch])
        loss = -(logp * mask).sum() / mask.sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def accuracy(policy, problems: list[tuple[Observation, str]]) -> float:
    samples = policy.act([o for o, _ in problems], greedy=True)
    return sum(s.text == a for s, (_, a) in zip(samples, problems)) / len(problems)


def test_points_at_the_named_element_for_words_it_never_saw():
    """Trained on a few made-up words, it picks the named element among words it has never seen, at any
    position; untrained it is near chance."""
    policy = build_policy(CFG, seed=0)
    train = [link_problem(random.Random(i)) for i in range(64)]
    unseen = [link_problem(random.Random(10_000 + i)) for i in range(100)]
    before = accuracy(policy, unseen)
    imitate(policy, train, steps=60)
    assert before < 0.6
    assert accuracy(policy, unseen) >= 0.95


def test_types_the_quoted_text_then_submits():
    policy = build_policy(CFG, seed=1)
    imitate(policy, [enter_problem(random.Random(i)) for i in range(64)], steps=80)
    assert accuracy(policy, [enter_problem(random.Random(10_000 + i)) for i in range(60)]) >= 0.95


@pytest.mark.parametrize("greedy", [False, True])
def test_behaviour_logprob_is_the_teacher_forced_one(greedy):
    policy = build_policy(CFG, seed=2)
    rng = random.Random(2)
    obs = [
        observation(f'Enter "{word(rng)}" and the password "{word(rng)}", then Login.', ["", "", "Login"], {0, 1})
        for _ in range(12)
    ] + [link_problem(rng)[0] for _ in range(12)]
    samples = policy.act(obs, greedy=greedy)
    for s, o in zip(samples, obs):
        assert Grammar.from_dict(o.extras["grammar"]).accepts(s.text), s.text
    assert any(s.text.startswith("type") for s in policy.act(obs[:12] * 4))
    torch.testing.assert_close(
        policy.log_probs(obs, [s.text for s in samples]),
        torch.tensor([s.logprob for s in samples]),
        rtol=1e-5,
        atol=1e-5,
    )


def test_scores_actions_it_would_not_say():
    policy = build_policy(CFG, seed=3)
    obs = observation('Enter "Ann" here.', ["", "OK"], editable={0})
    logp = policy.log_probs([obs, obs, obs], ["type [0] not in the task", "click [7]", "scroll down"])
    assert torch.isfinite(logp[0]) and logp[1] == -torch.inf and logp[2] == -torch.inf
    (empty,) = policy.act([observation("Click it.", [])])
    assert empty.text == "click [0]"


def test_save_and_from_pretrained_round_trip(tmp_path):
    policy = build_policy(CFG, seed=4)
    obs = [link_problem(random.Random(i))[0] for i in range(6)]
    actions = [s.text for s in policy.act(obs)]
    policy.save_pretrained(tmp_path / "p")
    loaded = build_policy(PolicyConfig(kind="element_pointer", path=str(tmp_path / "p")))
    torch.testing.assert_close(policy.log_probs(obs, actions), loaded.log_probs(obs, actions))


def test_reads_both_element_renderings_and_the_instruction():
    pae = observation('Click "b".', ["a", "b c"])
    roles = observation('Click "b".', ["a", "b c"], roles=True)
    assert [(e.index, e.text, e.tag) for e in elements_of(pae)] == [(0, "a", "button"), (1, "b c", "button")]
    assert [(e.index, e.text, e.tag) for e in elements_of(roles)] == [(0, "a", "button"), (1, "b c", "button")]
    assert [c[0] for c in candidate_texts("Enter 10/11/2011 as the date.", 32)][:3] == ["Enter", "10/11/2011", "as"]
    assert [c[0] for c in candidate_texts('Enter "Ann" and "Bo" for "Ann".', 32)] == ["Ann", "Bo"]
    assert ordinal_of("Focus into the 2nd input textbox.") == 2 and ordinal_of("the third one") == 3
    assert ordinal_of("Click on Tab #1.") is None
