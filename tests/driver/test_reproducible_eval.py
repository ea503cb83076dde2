"""One seed, one evaluation: the quick start's iteration-0 evaluation (an untrained policy, whose greedy choices
are all ties) plays the same actions on every problem whatever number of runners shares the episodes out.
Before each evaluation episode drew from its runner's stream, so the result hung on which runner played what."""

from rlsys.config import load_config
from rlsys.data.shards import read_trajectories
from rlsys.driver.trainer import Trainer
from tests.conftest import _chromium_paths


def iteration_zero(tmp_path, runners: int) -> tuple[dict, dict]:
    """The quick start, shrunk to its iteration-0 evaluation: (the eval metrics, each problem's actions)."""
    chromium, chromedriver = _chromium_paths()
    overrides = [f"run.output_dir={tmp_path / f'runners-{runners}'}", "run.iterations=0", "run.eval_episodes=8",
                 f"runners.num={runners}", "runners.num_cpus=0.25", "learner.num_cpus=0.25", "ray.dashboard=false",
                 "metrics.progress=false", "metrics.report=false", f"env.chromium={chromium}",
                 f"env.chromedriver={chromedriver}"]  # fmt: skip
    cfg = load_config("quickstart", overrides)
    trainer = Trainer(cfg, cfg.output_dir)
    try:
        (record,) = trainer.run()
    finally:
        trainer.shutdown()
    episodes = read_trajectories(cfg.output_dir / "eval")
    return record, {t.task.id: ([s.action_text for s in t.steps], t.outcome) for t in episodes}


def test_one_seed_gives_one_iteration_zero_evaluation(ray_session, tmp_path):
    one_record, one = iteration_zero(tmp_path, runners=1)
    two_record, two = iteration_zero(tmp_path, runners=2)
    assert len(one) == 8 and one == two
    assert one_record["eval/success_rate"] == two_record["eval/success_rate"]
