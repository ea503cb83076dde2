"""What fails in a runner or a learner reaches the driver's console: the error's own text and the actor's name,
at most a few times a minute per actor. Ray does not stream the actors' output (`log_to_driver=False`), so the
driver says it itself."""

import logging
import subprocess

import yaml

from rlsys.actors.pool import RunnerPool
from rlsys.config import to_dict
from rlsys.core.remote_errors import FailureLog
from rlsys.policies import build_policy
from tests.driver.test_fault_tolerance import collect, sim_config, submit, task, unreadable_store
from tests.support.train_command import run_train


def train_cli(tmp_path, cfg) -> subprocess.CompletedProcess:
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(to_dict(cfg)))
    return run_train("--config", str(path), timeout=400)


def test_a_learner_that_raises_in_its_constructor_shows_its_error_and_name_on_the_console(tmp_path):
    """A model folder whose weights are damaged: the learner's from_pretrained raises, and the console says what."""
    cfg = sim_config(tmp_path, step_s=0.05, max_steps=2, run__iterations=1)
    folder = tmp_path / "policy"
    build_policy(cfg.policy, seed=0).save_pretrained(folder)
    (folder / "model.safetensors").write_bytes(b"not a safetensors file")
    cfg.policy.path = str(folder)

    done = train_cli(tmp_path, cfg)

    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    failure = next((line for line in done.stderr.splitlines() if line.startswith("run failed: ")), "")
    assert failure.startswith("run failed: learner-0 died during publishing weights: "), done.stderr[-3000:]
    assert "SafetensorError" in failure and "header" in failure.lower(), failure  # the error's own text
    assert "learner-0's traceback:" in done.stderr and "from_pretrained" in done.stderr


def test_a_runner_whose_env_keeps_breaking_says_why_on_the_console(tmp_path):
    """Every step hangs past env.step_timeout_s: each episode is an env_error the runner survives, and the console
    shows the runner, its node and pid and the env's error, at most three times a minute per runner."""
    sim = {"reset_median_s": 0.01, "step_median_s": 0.01, "step_sigma": 0.0, "hang_prob": 1.0}
    # element_pointer: no transformers to import, so the run's actors start sooner
    cfg = sim_config(tmp_path, step_s=0.01, max_steps=2, env__sim=sim, env__step_timeout_s=0.2, run__iterations=1,
                     run__rollout_size=10, policy__kind="element_pointer")  # fmt: skip

    done = train_cli(tmp_path, cfg)

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    shown = [line for line in done.stderr.splitlines() if "ended as env_error" in line]
    assert shown, done.stderr[-3000:]
    assert all(line.startswith("runner-0 (node ") and ", pid " in line for line in shown), shown
    assert "got no answer within env.step_timeout_s=0.2s: hung (simulated)" in shown[0]  # the env's own words
    assert len(shown) == 3, shown  # ten broken episodes, three shown


def test_a_runner_that_raises_is_named_with_its_error(ray_session, tmp_path, caplog):
    cfg = sim_config(tmp_path, step_s=0.05, max_steps=2, policy__kind="random", runners__restart_backoff_s=0.01,
                     runners__restart_backoff_max_s=0.01)  # fmt: skip
    pool = RunnerPool(cfg, unreadable_store())  # every runner's weight pull raises inside run_episode
    caplog.set_level(logging.WARNING, logger="rlsys.actors.pool")
    try:
        for i in range(2):
            submit(pool, task(i))
            assert collect(pool).outcome == "env_error"
    finally:
        pool.shutdown()
    shown = [r.getMessage() for r in caplog.records if "replaced in" in r.getMessage()]
    assert len(shown) == 2 and shown[0].startswith("runner-0 (node ") and shown[1].startswith("runner-0-r1 (node ")
    # the exception the runner raised, with the one the actor it called raised
    assert "runner raised mid-episode: " in shown[0] and "OSError: the weights could not be read" in shown[0]


def test_the_failure_log_holds_back_past_its_rate_and_says_how_many_it_held(caplog):
    now = [0.0]
    failures = FailureLog(logging.getLogger("rlsys.test.failures"), per_minute=2, clock=lambda: now[0])
    caplog.set_level(logging.WARNING, logger="rlsys.test.failures")
    shown = [failures.warn("runner-0", f"runner-0: error {i}") for i in range(5)]
    assert shown == [True, True, False, False, False]
    assert failures.warn("runner-1", "runner-1: error 0")  # another actor has its own allowance
    now[0] = 61.0
    assert failures.warn("runner-0", "runner-0: error 5")
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "runner-0: error 0",
        "runner-0: error 1",
        "runner-1: error 0",
        "runner-0: error 5 (3 more from runner-0 not shown in the last minute)",
    ]
