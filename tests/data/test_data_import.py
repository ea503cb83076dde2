"""rlsys.data: importing DigiRL's published .pt files into shards, exporting them back, summarising."""

import io
import json
import pickle

import numpy as np
import pytest
import torch
from PIL import Image

import rlsys.data.digirl_files
from rlsys.cli.data import main
from rlsys.core.returns import discounted_returns
from rlsys.core.types import Observation, Step, Task, Trajectory
from rlsys.data.shards import ShardWriter, read_trajectories

F = 1408
# (task, actions, rewards): one success of 3 steps, one failure of 2 steps, one success of 1 step
EPISODES = [
    ("Open the settings app", ["tap a", "tap b", "press home"], [0, 0, 1]),
    ("Search for hotels in Paris", ["type paris", "press enter"], [0, 0]),
    ("Go to the home screen", ["press home"], [1]),
]
# Screenshot per step: "a" and "b" are written, "missing" is not.
SCREENSHOTS = [["a", "b", "missing"], ["a", "missing"], ["b"]]
MC_RETURNS_095 = [[0.9025, 0.95, 1.0], [0.0, 0.0], [1.0]]
RETURNS_05 = [[0.25, 0.5, 1.0], [0.0, 0.0], [1.0]]


def frame(trajectory: int, state: int) -> np.ndarray:
    """f_state of a trajectory: distinct values everywhere, so a wrong slice shows."""
    return (np.arange(F) * 1e-3 + 100 * trajectory + state).astype(np.float32)


def prompt(actions: list[str], task: str) -> str:
    return f"Previous Actions: {actions[-1] if actions else ''} Goal: {task}"


def png_bytes(color: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((8, 6, 3), color, dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def digirl_data(shot_dir, stacked: bool = True) -> list:
    """Trajectories in DigiRL's published step-dict layout; trajectory 1 holds torch tensors."""

    def features(i: int, state: int):
        if not stacked:
            return frame(i, state)
        return np.concatenate([frame(i, max(state - 1, 0)), frame(i, state)])

    data = []
    for i, (task, actions, rewards) in enumerate(EPISODES):
        convert = torch.from_numpy if i == 1 else (lambda a: a)
        steps = []
        for t, action in enumerate(actions):
            steps.append(
                {
                    "observation": prompt(actions[:t], task),
                    "next_observation": prompt(actions[: t + 1], task),
                    "image_features": convert(features(i, t)),
                    "next_image_features": convert(features(i, t + 1)),
                    "image_path": str(shot_dir / f"{SCREENSHOTS[i][t]}.png"),
                    "video_path": "",
                    "task": task,
                    "action": action,
                    "reward": rewards[t],
                    "done": t == len(actions) - 1,
                    "trajectory_reward": float(sum(rewards)),
                    "mc_return": MC_RETURNS_095[i][t],
                }
            )
        data.append(steps)
    return data


def save(data, path, how: str = "torch"):
    if how == "torch":
        torch.save(data, path)
    elif how == "torch-legacy":
        torch.save(data, path, _use_new_zipfile_serialization=False)
    else:
        with open(path, "wb") as f:
            pickle.dump(data, f)
    return path


@pytest.fixture
def shots(tmp_path):
    folder = tmp_path / "shots"
    folder.mkdir()
    (folder / "a.png").write_bytes(png_bytes(10))
    (folder / "b.png").write_bytes(png_bytes(200))
    return folder


def leftovers(folder, name: str) -> list:
    return [p.name for p in folder.iterdir() if p.name.startswith(f".{name}")]


def test_discounted_returns():
    assert discounted_returns([0, 0, 1], 0.5) == [0.25, 0.5, 1.0]
    assert discounted_returns([1, 0, 1], 0.5) == [1.25, 0.5, 1.0]
    assert discounted_returns([], 0.5) == []


def test_import_refuses_without_trust_pickle(tmp_path, shots, capsys):
    file = save(digirl_data(shots), tmp_path / "data.pt")
    assert main(["import-digirl", str(file), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "--trust-pickle" in err and "runs any code" in err
    assert not (tmp_path / "out").exists()
    assert leftovers(tmp_path, "out") == []


@pytest.mark.parametrize("how", ["torch", "torch-legacy", "pickle"])
def test_import_digirl(tmp_path, shots, capsys, how):
    file = save(digirl_data(shots), tmp_path / "data.pt", how)
    out = tmp_path / "out"
    assert main(["import-digirl", str(file), str(out), "--trust-pickle", "--suite", "aitw-general"]) == 0

    summary = json.loads((out / "import.json").read_text())
    assert summary["trajectories"] == 3
    assert summary["steps"] == 6
    assert summary["success_rate"] == pytest.approx(2 / 3)
    assert summary["mean_steps"] == pytest.approx(2.0)
    assert (summary["feature_dim"], summary["stacked"]) == (F, True)
    assert (summary["screenshots_found"], summary["screenshots_missing"]) == (4, 2)
    # gamma 0.5 gives [0.25, 0.5, 1.0] for the first trajectory where 0.95 stored [0.9025, 0.95, 1.0]; the rest agree
    assert summary["mc_return_mismatches"] == 2
    printed = capsys.readouterr().out
    assert "66.7%" in printed and "4 found, 2 missing" in printed and "2 of 6 differ" in printed

    trajectories = read_trajectories(out)
    assert [t.outcome for t in trajectories] == ["success", "failure", "success"]
    for i, (traj, (task, actions, rewards)) in enumerate(zip(trajectories, EPISODES)):
        assert traj.task.instruction == task and traj.task.suite == "aitw-general" and traj.task.split == "train"
        assert traj.task.id.startswith("aitw-") and len(traj.task.id) == len("aitw-") + 12
        assert traj.task.meta == {"source": "digirl-import", "file": "data.pt"}
        assert [s.reward for s in traj.steps] == rewards
        assert [s.action_text for s in traj.steps] == actions
        assert [s.done for s in traj.steps] == [t == len(actions) - 1 for t in range(len(actions))]
        assert all(s.policy_version == -1 and s.action is None and s.logprob is None for s in traj.steps)
        for t, step in enumerate(traj.steps):
            obs = step.observation
            np.testing.assert_array_equal(obs.features["blip2_pooled"], frame(i, t))
            assert obs.extras == {"previous_actions": actions[:t], "prompt": prompt(actions[:t], task)}
            expected_png = {"a": png_bytes(10), "b": png_bytes(200), "missing": b""}[SCREENSHOTS[i][t]]
            assert obs.screenshot_png == expected_png
        final = traj.final_observation
        np.testing.assert_array_equal(final.features["blip2_pooled"], frame(i, len(actions)))
        assert final.extras == {"previous_actions": actions, "prompt": prompt(actions, task)}
        assert final.screenshot_png == b""
    assert trajectories[0].task.id != trajectories[1].task.id
    assert leftovers(tmp_path, "out") == []


def test_import_finds_screenshots_under_images_dir(tmp_path, shots):
    data = digirl_data(shots)
    for trajectory in data:
        for step in trajectory:
            step["image_path"] = "/collector/machine/images/" + step["image_path"].rsplit("/", 1)[-1]
    file = save(data, tmp_path / "data.pt")
    out = tmp_path / "out"
    assert main(["import-digirl", str(file), str(out), "--trust-pickle", "--images-dir", str(shots)]) == 0
    summary = json.loads((out / "import.json").read_text())
    assert (summary["screenshots_found"], summary["screenshots_missing"]) == (4, 2)
    assert read_trajectories(out)[2].steps[0].observation.screenshot_png == png_bytes(200)


def test_import_unstacked_features(tmp_path, shots):
    file = save(digirl_data(shots, stacked=False), tmp_path / "data.pt")
    out = tmp_path / "out"
    assert main(["import-digirl", str(file), str(out), "--trust-pickle"]) == 0
    summary = json.loads((out / "import.json").read_text())
    assert (summary["feature_dim"], summary["stacked"]) == (F, False)
    trajectories = read_trajectories(out)
    np.testing.assert_array_equal(trajectories[0].steps[2].observation.features["blip2_pooled"], frame(0, 2))
    np.testing.assert_array_equal(trajectories[1].final_observation.features["blip2_pooled"], frame(1, 2))


@pytest.mark.parametrize("how", ["torch", "pickle"])
def test_export_round_trip(tmp_path, shots, capsys, how):
    original = digirl_data(shots)
    file = save(original, tmp_path / "data.pt", how)
    out = tmp_path / "out"
    assert main(["import-digirl", str(file), str(out), "--trust-pickle"]) == 0
    exported_file = tmp_path / "exported.pt"
    assert main(["export-digirl", str(out), str(exported_file), "--gamma", "0.5"]) == 0
    assert "exported 3 trajectories (6 steps" in capsys.readouterr().out

    exported = torch.load(exported_file, weights_only=False)
    assert [len(t) for t in exported] == [3, 2, 1]
    for i, (ours, theirs) in enumerate(zip(exported, original)):
        for t, (mine, orig) in enumerate(zip(ours, theirs)):
            for key in ("observation", "next_observation", "action", "reward", "done", "task", "trajectory_reward"):
                assert mine[key] == orig[key], (i, t, key)
            for key in ("image_features", "next_image_features"):
                assert mine[key].dtype == np.float32 and mine[key].shape == (2 * F,)
                np.testing.assert_array_equal(mine[key], np.asarray(orig[key]), err_msg=f"{i} {t} {key}")
            assert (mine["image_path"], mine["video_path"]) == ("", "")
        assert [s["mc_return"] for s in ours] == pytest.approx(RETURNS_05[i])


def test_export_needs_features_and_skips_untrainable(tmp_path, capsys):
    def trajectory(outcome: str, features: dict) -> Trajectory:
        obs = Observation(b"", "", "", "Open the settings app", {"previous_actions": []}, features)
        step = Step(obs, "tap a", None, 1.0, True, 0, None)
        return Trajectory(Task("t", "Open the settings app", "aitw"), [step], outcome, id=f"traj-{outcome}")

    with_features = tmp_path / "with"
    ShardWriter(with_features).write(
        [trajectory("success", {"blip2_pooled": frame(0, 0)}), trajectory("env_error", {})]
    )
    exported_file = tmp_path / "exported.pt"
    assert main(["export-digirl", str(with_features), str(exported_file)]) == 0
    exported = torch.load(exported_file, weights_only=False)
    assert len(exported) == 1
    step = exported[0][0]
    assert step["observation"] == "Previous Actions:  Goal: Open the settings app"  # autoui_prompt, no stored prompt
    np.testing.assert_array_equal(step["next_image_features"], np.concatenate([frame(0, 0), frame(0, 0)]))

    without = tmp_path / "without"
    ShardWriter(without).write([trajectory("failure", {})])
    assert main(["export-digirl", str(without), str(tmp_path / "x.pt")]) == 2
    err = capsys.readouterr().err
    assert "traj-failure" in err and "features" in err
    assert not (tmp_path / "x.pt").exists()


def test_summary(tmp_path, shots, capsys):
    file = save(digirl_data(shots), tmp_path / "data.pt")
    assert main(["import-digirl", str(file), str(tmp_path / "out"), "--trust-pickle"]) == 0
    capsys.readouterr()
    assert main(["summary", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert "trajectories    3" in printed and "steps           6" in printed
    assert "failure 1, success 2" in printed and "66.7% of 3 trainable" in printed and "2.00" in printed
    assert main(["summary", str(tmp_path / "nothing")]) == 2


def import_fails(tmp_path, data, capsys, monkeypatch) -> str:
    """Import `data` and check it fails cleanly; returns the error message."""
    monkeypatch.setattr(rlsys.data.digirl_files, "SHARD_SIZE", 1)  # so shards were already written when the error comes
    file = tmp_path / "data.pt"
    if isinstance(data, bytes):
        file.write_bytes(data)
    else:
        save(data, file)
    out = tmp_path / "out"
    assert main(["import-digirl", str(file), str(out), "--trust-pickle"]) == 2
    assert not out.exists()
    assert leftovers(tmp_path, "out") == []
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "data.pt" in err
    return err


def test_missing_key_names_trajectory_step_and_key(tmp_path, shots, capsys, monkeypatch):
    data = digirl_data(shots)
    del data[1][0]["action"]
    err = import_fails(tmp_path, data, capsys, monkeypatch)
    assert "trajectory 1 step 0" in err and "'action'" in err


def test_non_numeric_reward(tmp_path, shots, capsys, monkeypatch):
    data = digirl_data(shots)
    data[2][0]["reward"] = "yes"
    err = import_fails(tmp_path, data, capsys, monkeypatch)
    assert "trajectory 2 step 0" in err and "'reward'" in err


def test_wrong_feature_size(tmp_path, shots, capsys, monkeypatch):
    data = digirl_data(shots)
    data[2][0]["next_image_features"] = np.zeros(F, dtype=np.float32)
    err = import_fails(tmp_path, data, capsys, monkeypatch)
    assert "trajectory 2 step 0" in err and "'next_image_features'" in err and str(F) in err


def test_not_a_list(tmp_path, capsys, monkeypatch):
    err = import_fails(tmp_path, {"trajectories": []}, capsys, monkeypatch)
    assert "list of trajectories" in err


def test_corrupt_file(tmp_path, capsys, monkeypatch):
    err = import_fails(tmp_path, b"\x00this is not a pickle", capsys, monkeypatch)
    assert "cannot be read" in err


def test_refuses_folder_with_shards(tmp_path, shots, capsys):
    file = save(digirl_data(shots), tmp_path / "data.pt")
    out = tmp_path / "out"
    assert main(["import-digirl", str(file), str(out), "--trust-pickle"]) == 0
    before = sorted(p.name for p in out.iterdir())
    assert main(["import-digirl", str(file), str(out), "--trust-pickle"]) == 2
    assert "already holds trajectory shards" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == before
    assert len(read_trajectories(out)) == 3


def test_import_into_existing_empty_folder(tmp_path, shots):
    file = save(digirl_data(shots), tmp_path / "data.pt")
    out = tmp_path / "out"
    out.mkdir()
    assert main(["import-digirl", str(file), str(out), "--trust-pickle"]) == 0
    assert len(read_trajectories(out)) == 3 and (out / "import.json").is_file()
