"""`learner.grpo`: its defaults, and the settings no GRPO run can use, each a config error naming the key."""

import pytest

from rlsys.config import ConfigError, load_config

GROUPS = ["learner.algorithm=grpo", "run.group_size=4", "run.rollout_size=8"]
ANDROID = ["env.kind=android", "env.action_space=autoui", "policy.kind=autoui", "tasks.suite=aitw-general"]


def test_defaults_are_grpo_with_dapos_clip_higher_and_token_mean():
    g = load_config(None, GROUPS).learner.grpo
    assert (g.scale_by_std, g.clip_low, g.clip_high, g.reduction, g.kl_coef, g.epochs) == (
        True, 0.2, 0.28, "token_mean", 0.0, 1,
    )  # fmt: skip
    dr_grpo = load_config(None, GROUPS + ["learner.grpo.scale_by_std=false", "learner.grpo.reduction=sequence_mean"])
    assert (dr_grpo.learner.grpo.scale_by_std, dr_grpo.learner.grpo.reduction) == (False, "sequence_mean")
    assert (g.step_groups, g.step_weight, g.step_gamma) == (False, 1.0, 0.95)  # GiGPO's omega and gamma, off
    assert (g.success_replay, g.replay_per_task, g.replay_tasks, g.replay_max_bytes) == (False, 4, 1000, 1 << 28)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["learner.grpo.clip_low=1.0"], r"learner\.grpo\.clip_low must be below 1"),
        (["learner.grpo.clip_low=-0.1"], r"learner\.grpo\.clip_low must be at least 0"),
        (["learner.grpo.clip_high=-0.1"], r"learner\.grpo\.clip_high must be at least 0"),
        (["learner.grpo.kl_coef=-1"], r"learner\.grpo\.kl_coef must be at least 0"),
        (["learner.grpo.epochs=0"], r"learner\.grpo\.epochs must be at least 1"),
        (["learner.grpo.reduction=sum"], r"learner\.grpo\.reduction"),
        (["learner.grpo.step_weight=-0.5"], r"learner\.grpo\.step_weight must be at least 0"),
        (["learner.grpo.step_gamma=1.5"], r"learner\.grpo\.step_gamma must be at most 1"),
        (["learner.grpo.step_gamma=-0.1"], r"learner\.grpo\.step_gamma must be at least 0"),
        (["learner.grpo.step_groups=true", *ANDROID], r"learner\.grpo\.step_groups .* an Android screen has none"),
        (["learner.grpo.replay_per_task=0"], r"learner\.grpo\.replay_per_task must be at least 1"),
        (["learner.grpo.replay_tasks=0"], r"learner\.grpo\.replay_tasks must be at least 1"),
        (["learner.grpo.replay_max_bytes=0"], r"learner\.grpo\.replay_max_bytes must be at least 1"),
        (
            ["learner.grpo.replay_tasks=2000000"],
            r"learner\.grpo\.replay_tasks must be at most 1000000, got 2000000: .*memory",
        ),
        (["learner.grpo.replay_per_task=5000"], r"learner\.grpo\.replay_per_task must be at most 1000"),
        (["learner.grpo.clip_hi=0.3"], r"learner\.grpo\.clip_high"),  # the closest valid key
        (["learner.prob_clamp=true"], r"learner\.prob_clamp"),
        (
            ["learner.grpo.kl_coef=0.1", "learner.sharding=fsdp2", "policy.kind=causal_lm"],
            r"learner\.grpo\.kl_coef > 0 keeps a frozen copy",
        ),
    ],
)
def test_settings_no_grpo_run_can_use_name_their_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, GROUPS + overrides)


def test_a_lora_policy_may_keep_its_reference_under_fsdp2():
    lora = ["policy.kind=causal_lm", "policy.lora.enabled=true", "learner.sharding=fsdp2", "learner.grpo.kl_coef=0.1"]
    assert load_config(None, GROUPS + lora).learner.grpo.kl_coef == 0.1
