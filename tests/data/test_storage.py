import io

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from rlsys.core.types import Observation, Step, Task, Trajectory
from rlsys.data.shards import ShardWriter, StorageError, read_shard, read_trajectories


def png(seed: int, size=(64, 48)) -> bytes:
    rng = np.random.default_rng(seed)
    img = np.zeros((*size, 3), dtype=np.uint8)
    img[rng.integers(0, size[0]), :, :] = rng.integers(0, 255, 3)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")
    return buf.getvalue()


def trajectory(n_steps: int, outcome: str = "success", version: int = 0, seed: int = 0) -> Trajectory:
    task = Task(
        id=f"t{seed}", instruction="Click button ONE.", suite="miniwob", start="click-test-2", meta={"seed": seed}
    )
    steps = [
        Step(
            observation=Observation(
                png(seed + i),
                '[0] button "ONE"',
                "file:///x.html",
                task.instruction,
                {"grammar": {"choices": ["click [0]"], "text_prefixes": [], "max_text": 8}},
            ),
            action_text="click [0]",
            action={"kind": "click", "element": 0, "text": ""},
            reward=float(i == n_steps - 1 and outcome == "success"),
            done=i == n_steps - 1,
            policy_version=version,
            logprob=-0.5 * (i + 1),
            timings={"act_s": 0.01},
            error=None if i else "ElementClickInterceptedException",
        )
        for i in range(n_steps)
    ]
    final = Observation(png(seed + 99), "", "file:///done.html", task.instruction, features={"f": np.ones(3, "f4")})
    return Trajectory(task, steps, outcome, env_id="e", runner_id="r", final_observation=final if n_steps else None)


def test_round_trip_preserves_everything(tmp_path):
    trajs = [
        trajectory(3, seed=1),
        trajectory(1, "failure", version=4, seed=2),
        Trajectory(Task("t3", "x", "miniwob"), [], "env_error", error="browser died"),
    ]
    writer = ShardWriter(tmp_path)
    writer.write(trajs[:2])
    writer.write(trajs[2:])
    back = read_trajectories(tmp_path)
    assert [t.id for t in back] == [t.id for t in trajs]
    for a, b in zip(trajs, back):
        assert a.task == b.task and a.outcome == b.outcome and a.error == b.error
        assert len(a.steps) == len(b.steps)
        for sa, sb in zip(a.steps, b.steps):
            assert sa.observation.screenshot_png == sb.observation.screenshot_png
            assert sa.observation.extras == sb.observation.extras
            assert (sa.action_text, sa.action, sa.reward, sa.done, sa.policy_version, sa.logprob, sa.error) == (
                sb.action_text,
                sb.action,
                sb.reward,
                sb.done,
                sb.policy_version,
                sb.logprob,
                sb.error,
            )
    assert back[0].steps[0].observation.screenshot.shape == (64, 48, 3)
    for a, b in zip(trajs, back):
        assert (a.final_observation is None) == (b.final_observation is None)
    assert back[0].final_observation.screenshot_png == trajs[0].final_observation.screenshot_png
    assert back[0].final_observation.location == "file:///done.html"
    np.testing.assert_array_equal(back[0].final_observation.features["f"], np.ones(3))
    assert back[0].next_observation(2) is back[0].final_observation
    assert back[0].next_observation(0) is back[0].steps[1].observation
    print(f"bytes per step: {writer.bytes_written / writer.steps_written:.0f}")


def test_shards_are_readable_by_pandas_and_numbering_continues(tmp_path):
    ShardWriter(tmp_path).write([trajectory(2)])
    ShardWriter(tmp_path).write([trajectory(1, seed=5)])  # a restarted run appends
    assert sorted(p.name for p in tmp_path.glob("*.parquet")) == ["shard-000000.parquet", "shard-000001.parquet"]
    df = pd.read_parquet(tmp_path)
    assert len(df) == 5 and set(df["outcome"]) == {"success"}  # 3 steps and 2 final observations
    assert df["action_text"].isna().sum() == 2


def test_corrupt_shard_is_a_clear_error(tmp_path):
    bad = tmp_path / "shard-000000.parquet"
    bad.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(StorageError, match="shard-000000.parquet: not a readable trajectory shard"):
        read_shard(bad)


def test_grouping_columns_are_plain_columns(tmp_path):
    ShardWriter(tmp_path, split="eval").write([trajectory(2, seed=3), trajectory(1, "failure", seed=4)], iteration=7)
    df = pd.read_parquet(tmp_path)
    assert list(df["task_id"].unique()) == ["t3", "t4"]
    assert set(df["task_group"]) == {"click-test-2"} and set(df["split"]) == {"eval"} and set(df["iteration"]) == {7}
    assert df["is_final"].tolist() == [False, False, True, False, True]  # each trajectory ends in its final screen
    per_outcome = df[~df["is_final"]].groupby("outcome")["trajectory_id"].nunique().to_dict()
    assert per_outcome == {"failure": 1, "success": 1}
    ShardWriter(tmp_path / "imported").write([trajectory(1)])  # no iteration collected imported data
    assert pd.read_parquet(tmp_path / "imported")["iteration"].isna().all()


def test_shards_written_before_the_grouping_columns_still_read(tmp_path):
    import pyarrow.parquet as pq

    from rlsys.data.shards import GROUPING_COLUMNS, to_table

    trajs = [trajectory(2, seed=8)]
    old = to_table(trajs).drop_columns(list(GROUPING_COLUMNS))
    pq.write_table(old, tmp_path / "shard-000000.parquet")
    (back,) = read_trajectories(tmp_path)
    assert back.id == trajs[0].id and [s.action_text for s in back.steps] == ["click [0]", "click [0]"]
    assert back.final_observation.screenshot_png == trajs[0].final_observation.screenshot_png


def test_sampled_token_ids_round_trip_and_older_shards_read_without_them(tmp_path):
    import pyarrow.parquet as pq

    from rlsys.data.shards import to_table

    traj = trajectory(2, seed=9)
    traj.steps[0].token_ids = [99, 108, 105, 99, 107]  # the second step's policy reported none
    ShardWriter(tmp_path / "new").write([traj])
    back = read_trajectories(tmp_path / "new")[0]
    assert [s.token_ids for s in back.steps] == [[99, 108, 105, 99, 107], None]
    pq.write_table(to_table([traj]).drop_columns(["token_ids"]), tmp_path / "shard-000000.parquet")
    assert [s.token_ids for s in read_trajectories(tmp_path)[0].steps] == [None, None]


def noisy_trajectory(seed: int) -> Trajectory:
    """Screenshots of noise: zstd stores them nearly verbatim, so zeroed bytes there decode without an error."""
    traj = trajectory(2, seed=seed)
    rng = np.random.default_rng(seed)
    for step in traj.steps:
        step.observation.screenshot_png = rng.integers(0, 256, 20_000, dtype=np.uint8).tobytes()
    return traj


def zero_inside_the_screenshots(path, n: int = 64) -> None:
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(path).metadata
    columns = [meta.row_group(0).column(i) for i in range(meta.num_columns)]
    (column,) = [c for c in columns if c.path_in_schema == "screenshot_png"]
    middle = (column.dictionary_page_offset or column.data_page_offset) + column.total_compressed_size // 2
    data = bytearray(path.read_bytes())
    data[middle : middle + n] = bytes(n)
    path.write_bytes(bytes(data))


def test_zeroed_bytes_inside_a_shard_are_an_error_naming_it(tmp_path):
    path = ShardWriter(tmp_path).write([noisy_trajectory(1), noisy_trajectory(2)])
    zero_inside_the_screenshots(path)
    with pytest.raises(StorageError, match="shard-000000.parquet: .*checksum"):
        read_shard(path)


def test_reading_a_folder_can_skip_a_damaged_shard_with_a_warning(tmp_path, caplog):
    writer = ShardWriter(tmp_path)
    writer.write([noisy_trajectory(1)])
    damaged = writer.write([noisy_trajectory(2)])
    writer.write([noisy_trajectory(3)])
    zero_inside_the_screenshots(damaged)
    with pytest.raises(StorageError, match="shard-000001.parquet"):
        read_trajectories(tmp_path)
    back = read_trajectories(tmp_path, skip_damaged=True)
    assert [t.task.id for t in back] == ["t1", "t3"]
    assert any("shard-000001.parquet" in r.getMessage() and "skipped" in r.getMessage() for r in caplog.records)
