"""An untrained policy decoding under the grammar a real page publishes writes only actions the env
parses, in every web action space: RL can start from step one whatever the space."""

from dataclasses import replace

import pytest

from rlsys.config import PolicyConfig
from rlsys.envs import web
from rlsys.envs.tasks import miniwob_task
from rlsys.envs.web.miniwob import MiniWoBEnv
from rlsys.policies import build_policy
from tests.conftest import make_config

# Longer than the longest action the default grammars allow: a 200-character thought or plan, then the
# action (a coords tap is ~150 characters): a cut action would not parse.
CFG = PolicyConfig(d_model=32, d_ff=64, num_heads=2, max_new_tokens=400, temperature=1.5)


@pytest.mark.parametrize("space", ["pae", "coords"])
def test_untrained_policy_writes_only_parseable_actions_on_a_real_page(tmp_path, space):
    # Set on the env's config alone: the config check still pairs tiny_t5 with the element space.
    env = MiniWoBEnv(replace(make_config(tmp_path).env, action_space=space), "test-grammar")
    try:
        obs = env.reset(miniwob_task("enter-text", 3, "train"))
        assert "sequences" in obs.extras["grammar"]
        policy = build_policy(CFG, seed=0)
        samples = policy.act([obs] * 4)
        elements = len(obs.extras["elements"])
        actions = [web.spaces.get(space).parse(s.text, elements) for s in samples]  # a ParseError fails here
        assert len({a.kind for a in actions}) > 1, [s.text for s in samples]
        assert policy.log_probs([obs] * 4, [s.text for s in samples]).isfinite().all()
        result = env.step(samples[0].text)
        assert result.info["parse_error"] is None
    finally:
        env.close()
