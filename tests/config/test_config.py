from pathlib import Path

import pytest
import yaml

from rlsys.config import REDACTED, ConfigError, load_config, save_config, to_dict, unresolved_dict
from tests.support.train_command import run_train


def write(path, data):
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def test_unknown_key_names_key_and_suggests_closest(tmp_path):
    cfg = write(tmp_path / "c.yaml", {"learner": {"lr_rate": 0.1}})
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    assert "'learner.lr_rate'" in str(e.value) and "did you mean 'learner.lr'" in str(e.value)


def test_unknown_section(tmp_path):
    with pytest.raises(ConfigError, match="unknown config key 'lerner'.*did you mean 'learner'"):
        load_config(write(tmp_path / "c.yaml", {"lerner": {}}))


def test_wrong_type_names_path_and_expected_type(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path / "c.yaml", {"run": {"iterations": "ten"}}))
    assert "'run.iterations' must be int" in str(e.value) and "'ten'" in str(e.value)
    with pytest.raises(ConfigError, match=r"'run.mode' must be one of 'sync', 'async'"):
        load_config(write(tmp_path / "d.yaml", {"run": {"mode": "fast"}}))
    with pytest.raises(ConfigError, match=r"'tasks.train\[1\]' must be str"):
        load_config(write(tmp_path / "e.yaml", {"tasks": {"train": ["a", 3]}}))


def test_missing_file_and_missing_parent(tmp_path):
    with pytest.raises(ConfigError, match="config file not found: .*nope.yaml"):
        load_config(tmp_path / "nope.yaml")
    child = write(tmp_path / "child.yaml", {"extends": "base.yaml"})
    with pytest.raises(ConfigError, match="base.yaml"):
        load_config(child)


def test_extends_and_dotted_overrides(tmp_path):
    write(tmp_path / "base.yaml", {"run": {"iterations": 3, "name": "base"}, "learner": {"lr": 0.5}})
    child = write(tmp_path / "child.yaml", {"extends": "base.yaml", "run": {"name": "child"}})
    cfg = load_config(child, ["learner.lr=1e-5", "tasks.train=[a, b]", "run.max_policy_lag=2"])
    assert cfg.run.iterations == 3 and cfg.run.name == "child"
    assert cfg.learner.lr == pytest.approx(1e-5) and cfg.tasks.train == ["a", "b"]
    assert cfg.run.max_policy_lag == 2
    with pytest.raises(ConfigError, match="'learner.lrr'"):
        load_config(child, ["learner.lrr=1"])


def test_env_secrets_resolve_and_are_redacted_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("RLSYS_TEST_KEY", "sk-very-secret")
    path = write(tmp_path / "c.yaml", {"metrics": {"wandb_api_key": "${env:RLSYS_TEST_KEY}"}})
    cfg = load_config(path)
    assert cfg.metrics.wandb_api_key == "sk-very-secret"
    save_config(unresolved_dict(path), cfg, tmp_path / "out.yaml")
    text = (tmp_path / "out.yaml").read_text()
    assert "sk-very-secret" not in text and "${env:RLSYS_TEST_KEY}" in text
    assert yaml.safe_load(text)["learner"]["lr"] == cfg.learner.lr  # defaults are filled in

    literal = write(tmp_path / "lit.yaml", {"metrics": {"wandb_api_key": "pasted-by-mistake"}})
    save_config(unresolved_dict(literal), load_config(literal), tmp_path / "out2.yaml")
    saved = yaml.safe_load((tmp_path / "out2.yaml").read_text())
    assert saved["metrics"]["wandb_api_key"] == REDACTED

    assert saved["policy"]["max_new_tokens"] == cfg.policy.max_new_tokens  # not a secret

    monkeypatch.delenv("RLSYS_TEST_KEY")
    with pytest.raises(ConfigError, match="RLSYS_TEST_KEY, which is not set"):
        load_config(path)


def test_cli_reports_config_error_before_ray_starts(tmp_path):
    bad = write(tmp_path / "bad.yaml", {"runners": {"numm": 2}})
    proc = run_train("--config", str(bad), timeout=120)
    assert proc.returncode == 2
    assert "config error: unknown config key 'runners.numm'; did you mean 'runners.num'" in proc.stderr
    assert "Ray" not in proc.stdout + proc.stderr


def test_policy_rules_across_sections(tmp_path):
    nested = load_config(
        None, ["policy.kind=vlm", "policy.lora.enabled=true", "policy.lora.r=8", "env.action_space=pae"]
    )

    assert nested.policy.lora.enabled and nested.policy.lora.r == 8
    assert nested.policy.prompt == "pae_agent"  # auto: the prompt of the action space
    assert load_config(None, ["policy.kind=vlm"]).policy.prompt == "element_agent"
    with pytest.raises(ConfigError, match="policy.lora.rank"):
        load_config(None, ["policy.lora.rank=8"])
    with pytest.raises(ConfigError, match="coords"):
        load_config(None, ["policy.kind=api", "env.action_space=coords"])
    with pytest.raises(ConfigError, match="tiny_t5"):
        load_config(None, ["env.action_space=pae"])


def test_a_resume_may_change_how_lora_acts_but_not_the_adapter():
    from rlsys.config.run_dir import resume_changes

    saved = {"policy": {"lora": {"enabled": True, "r": 8}}}  # a run saved before merge_for_acting existed
    assert resume_changes(saved, {"policy": {"lora": {"enabled": True, "r": 8, "merge_for_acting": False}}}) == [
        "policy.lora.merge_for_acting"
    ]
    with pytest.raises(ConfigError, match="policy.lora.r"):
        resume_changes(saved, {"policy": {"lora": {"enabled": True, "r": 16}}})


def test_train_refuses_an_api_policy_before_ray_starts(tmp_path, capsys):
    from rlsys.cli.train import main

    config = write(tmp_path / "c.yaml", {"policy": {"kind": "api"}, "run": {"output_dir": str(tmp_path / "run")}})
    assert main(["--config", str(config)]) == 2
    assert "no weights to train" in capsys.readouterr().err


RECIPES = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize("name", sorted(p.name for p in RECIPES.glob("*.yaml")))
def test_shipped_configs_load(name):
    cfg = load_config(RECIPES / name)
    assert cfg.run.name


@pytest.mark.parametrize("name", ["quickstart", "quickstart.yaml", "digirl_off2on"])
def test_a_packaged_config_loads_by_name_from_any_folder(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no configs/ here: the name resolves inside the installed package
    by_name = load_config(name)
    by_path = load_config(RECIPES / (name if name.endswith(".yaml") else f"{name}.yaml"))
    assert by_name == by_path


def test_a_file_wins_over_a_packaged_config_of_the_same_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "quickstart", {"run": {"name": "mine"}})
    assert load_config("quickstart").run.name == "mine"


def test_an_unknown_config_name_lists_the_packaged_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"config file not found: quickstrat \(nor a packaged config: .*quickstart"):
        load_config("quickstrat")
    with pytest.raises(ConfigError, match="config file not found: elsewhere/quickstart$"):
        load_config("elsewhere/quickstart")


@pytest.mark.parametrize(
    "name, first_missing",
    [
        ("digirl_offline.yaml", "policy.path"),
        ("digirl_off2on.yaml", "policy.path"),
        ("filteredbc_offline.yaml", "policy.path"),
        ("pae_webvoyager.yaml", "tasks.file"),
        ("grpo_aitw_general.yaml", "tasks.file"),
        ("grpo_webvoyager.yaml", "tasks.file"),
    ],
)
def test_recipes_name_the_model_path_to_set(name, first_missing, tmp_path, monkeypatch, capsys):
    """The published recipes run on models the user downloads; until then train says which key to set."""
    from rlsys.cli.train import main

    monkeypatch.chdir(tmp_path)  # no models/ or data/ here
    assert main(["--config", str(RECIPES / name), f"run.output_dir={tmp_path / 'run'}"]) == 2
    err = capsys.readouterr().err
    assert f"{first_missing}: " in err and "does not exist" in err


def test_recipe_defaults_are_the_published_ones():
    digirl = load_config(RECIPES / "digirl_off2on.yaml")
    d = digirl.learner.digirl
    assert (digirl.learner.lr, d.critic_lr, digirl.learner.grad_clip) == (1e-4, 1e-4, 0.01)
    assert (digirl.learner.batch_size * digirl.learner.grad_accumulation, digirl.run.rollout_size) == (128, 16)
    assert (d.instruction_critic_steps, d.step_critic_steps, d.actor_steps) == (5, 5, 20)
    offline = (d.offline_instruction_critic_iterations, d.offline_step_critic_iterations, d.offline_actor_iterations)
    assert offline == (20, 20, 30) and d.gamma == 0.5 and digirl.learner.prob_clamp
    assert digirl.run.training == "off2on" and digirl.run.mode == "sync"
    pae = load_config(RECIPES / "pae_webvoyager.yaml")
    assert (pae.learner.filter, pae.learner.lr, pae.learner.grad_accumulation) == ("shortest", 2e-5, 32)
    assert (pae.policy.lora.r, pae.policy.lora.alpha, pae.run.rollout_size) == (256, 256, 256)
    judge = pae.evaluator.judge
    assert (pae.evaluator.kind, judge.provider, judge.style, judge.screenshots) == ("judge", "bedrock", "pae", 3)
    assert (judge.model_id, judge.max_tokens, judge.temperature) == ("anthropic.claude-3-sonnet-20240229-v1:0", 1000, 0)
    proposer = load_config(RECIPES / "pae_propose.yaml").proposer
    assert (proposer.llm.provider, proposer.tasks_per_site, proposer.llm.max_tokens) == ("bedrock", 25, 4096)


@pytest.mark.parametrize(
    "name, derives_from",
    [
        ("grpo_quickstart", "quickstart"),
        ("grpo_aitw_general", "digirl_aitw_general"),
        ("grpo_webvoyager", "pae_webvoyager"),
    ],
)
def test_grpo_recipes_learn_each_iterations_groups_on_their_parents_setting(name, derives_from):
    """A GRPO recipe is its parent's env, tasks, policy and judge learnt with GRPO (LoRA dropout aside, which would
    move the first step's ratios off 1), each update on its own iteration's groups, and a KL only where the reference
    is the LoRA base rather than a second copy of the model."""
    grpo, parent = load_config(RECIPES / f"{name}.yaml"), load_config(RECIPES / f"{derives_from}.yaml")
    assert grpo.learner.algorithm == "grpo" and grpo.run.group_size >= 2
    assert grpo.learner.sample_trajectories == grpo.run.rollout_size
    assert (grpo.env, grpo.tasks, grpo.evaluator) == (parent.env, parent.tasks, parent.evaluator)
    policy, parent_policy = to_dict(grpo.policy), to_dict(parent.policy)
    if grpo.policy.lora.enabled:
        assert policy["lora"].pop("dropout") == 0
        parent_policy["lora"].pop("dropout")
    assert policy == parent_policy
    assert grpo.learner.grpo.kl_coef == 0 or grpo.policy.lora.enabled
