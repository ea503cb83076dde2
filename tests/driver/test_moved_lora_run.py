"""A LoRA run whose frozen base lives inside its run folder resumes after the folder moved: the learner saves and
loads checkpoints through a temporary folder, so the base's path relative to the run is taken from, and read
against, the checkpoint's own place."""

import json
import shutil

import ray

from rlsys.core.types import Step, Task, Trajectory
from rlsys.data.shards import ShardWriter
from rlsys.driver.trainer import Trainer
from rlsys.policies import build_policy
from tests.conftest import make_config
from tests.policies.test_policy_vlm import config, observation

LORA = {"enabled": True, "r": 4, "alpha": 8, "dropout": 0.0}


def shards(folder):
    """A few finished episodes on element pages, successes and failures."""
    out = []
    for i in range(6):
        obs = observation(3 + i % 3)
        steps = [Step(obs, f"click [{i % 3}]", None, float(i % 2 == 0), True, 0, -1.0)]
        task = Task(f"t{i}", obs.task, "test")
        out.append(Trajectory(task, steps, "success" if i % 2 == 0 else "failure", id=f"t{i}", final_observation=obs))
    ShardWriter(folder).write(out)
    return folder


def lora_run_config(tmp_path, run, data):
    return make_config(
        tmp_path,
        run__output_dir=str(run),
        run__training="offline",
        learner__offline_iterations=1,
        offline__data=[str(data)],
        policy__kind="vlm",
        policy__arch="llava",
        policy__num_layers=2,
        policy__max_new_tokens=20,
        policy__lora=LORA,
        policy__path=str(run / "base"),
    )


def learner_digest(trainer) -> str:
    return ray.get(trainer.learners.actors[0].weights_digest.remote(), timeout=60)


def test_a_lora_run_with_its_base_inside_resumes_after_the_run_folder_moved(ray_session, tmp_path):
    data = shards(tmp_path / "data")
    run = tmp_path / "home" / "runs" / "a"
    build_policy(config("llava"), seed=4).save_pretrained(run / "base")
    trainer = Trainer(lora_run_config(tmp_path, run, data), run)
    try:
        trainer.run()
        trained = learner_digest(trainer)
    finally:
        trainer.shutdown()
    pointer = run / "checkpoints" / "000001" / "policy" / "base.json"
    assert json.loads(pointer.read_text()) == {"absolute": str((run / "base").resolve()), "relative": "../../../base"}

    moved = tmp_path / "elsewhere" / "a"
    moved.parent.mkdir()
    shutil.move(run, moved)
    assert not run.exists()
    resumed = Trainer(lora_run_config(tmp_path, moved, data), moved, resume=True)  # what --resume MOVED builds
    try:
        assert resumed.iteration == 1
        assert learner_digest(resumed) == trained
        resumed.save_checkpoint()  # a checkpoint written after the move points at the base's new place
    finally:
        resumed.shutdown()
    pointer = moved / "checkpoints" / "000001" / "policy" / "base.json"
    assert json.loads(pointer.read_text()) == {"absolute": str((moved / "base").resolve()), "relative": "../../../base"}
