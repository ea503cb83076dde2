"""What `rlsys-train` writes before Ray starts: run folders stay inside runs/, a folder that is not a
run is never overwritten, a run that got further than its start is never started over in place unless asked
(--restart moves it aside), a resume checks its config and chooses its checkpoint first and never rewrites
config.yaml, and a literal secret on the command line is redacted with a warning. Training itself is replaced by
a recorder: these are the checks that come before it."""

import pytest
import yaml

import rlsys.cli.train
from rlsys.cli.train import main
from rlsys.config import REDACTED, config_path
from rlsys.data import checkpoint
from tests.data.test_checkpoint import fill


@pytest.fixture
def trained(monkeypatch):
    """The (config, run folder, resume) each `main` call would have trained with."""
    calls = []

    def record(cfg, run_dir, resume):
        calls.append((cfg, run_dir, resume))
        return 0

    monkeypatch.setattr(rlsys.cli.train, "train", record)
    return calls


def write(path, data):
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_a_path_like_run_name_writes_nothing_outside_runs(tmp_path, monkeypatch, capsys, trained):
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    victim = tmp_path / "x"
    victim.mkdir()
    (victim / "config.yaml").write_text("mine: true\n")
    monkeypatch.chdir(work)
    assert main(["--config", "quickstart", "run.name=../../x"]) == 2
    assert "config error: run.name must be a plain folder name" in capsys.readouterr().err
    assert (victim / "config.yaml").read_text() == "mine: true\n" and not trained


def test_a_folder_that_is_not_a_run_is_refused(tmp_path, capsys, trained):
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "cat.jpg").write_bytes(b"\xff\xd8")
    assert main(["--config", "quickstart", f"run.output_dir={folder}"]) == 2
    assert f"{folder} is not empty and is not an rlsys run" in capsys.readouterr().err
    assert sorted(p.name for p in folder.iterdir()) == ["cat.jpg"] and not trained
    # an empty folder, or a run that never reached a checkpoint, is fine
    assert main(["--config", "quickstart", f"run.output_dir={tmp_path / 'empty'}"]) == 0
    assert main(["--config", "quickstart", f"run.output_dir={tmp_path / 'empty'}", "run.seed=3"]) == 0
    assert len(trained) == 2


@pytest.fixture
def run(tmp_path, trained):
    """A run folder as a first `main` leaves it."""
    folder = tmp_path / "run"
    assert main(["--config", "quickstart", f"run.output_dir={folder}", "policy.d_model=32"]) == 0
    trained.clear()
    return folder


def test_resume_with_another_model_is_refused_and_keeps_the_config(run, tmp_path, capsys, trained):
    saved = (run / "config.yaml").read_text()
    other = write(tmp_path / "other.yaml", {"extends": str(config_path("quickstart")), "learner": {"algorithm": "sft"}})
    assert main(["--resume", str(run), "--config", other, "policy.d_model=64", "policy.num_layers=3"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("config error:") and "learner.algorithm" in err and "policy.d_model" in err, err
    assert "policy.num_layers" in err and (run / "config.yaml").read_text() == saved and not trained


def test_resume_validates_before_anything_is_written(run, tmp_path, capsys, trained):
    saved = (run / "config.yaml").read_text()
    broken = write(tmp_path / "broken.yaml", {"runners": {"num": 0}})
    assert main(["--resume", str(run), "--config", broken]) == 2
    assert "runners.num" in capsys.readouterr().err
    assert (run / "config.yaml").read_text() == saved and not trained


def test_resume_applies_safe_overrides_without_rewriting_the_config(run, capsys, trained):
    saved = (run / "config.yaml").read_text()
    checkpoint.write(run, 1, fill, keep=1)
    assert main(["--resume", str(run), "run.iterations=7"]) == 0
    ((cfg, run_dir, resume),) = trained
    assert cfg.run.iterations == 7 and resume == run / "checkpoints" / "000001" and run_dir == run
    assert "run.iterations" in capsys.readouterr().out
    assert (run / "config.yaml").read_text() == saved


def a_session_that_stopped_before_its_first_checkpoint(run):
    """What `main` and an interrupted session leave: config.yaml, a metrics line, a shard (and no checkpoint)."""
    (run / "metrics.jsonl").write_text('{"iteration": 1}\n')
    (run / "trajectories").mkdir()
    (run / "trajectories" / "shard-000000.parquet").write_bytes(b"episodes")
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / ".tmp-000002-99").mkdir()  # a checkpoint interrupted while it was written
    return {p.relative_to(run).as_posix(): p.read_bytes() for p in run.rglob("*") if p.is_file()}


def files_in(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_run_stopped_before_its_first_checkpoint_is_not_started_over_in_place(run, capsys, trained):
    before = a_session_that_stopped_before_its_first_checkpoint(run)
    assert main(["--config", "quickstart", f"run.output_dir={run}", "run.seed=3"]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(f"config error: {run} holds a run that stopped before its first checkpoint")
        and "--restart" in err
    )
    assert main(["--resume", str(run)]) == 2  # nothing to continue from: no "starting from scratch" beside it
    err = capsys.readouterr().err
    assert err.startswith(f"config error: --resume {run}: no complete checkpoint there")
    assert f"rlsys-train --resume {run} --restart" in err
    assert files_in(run) == before and not trained


def test_restart_moves_the_earlier_run_aside_and_starts_clean(run, capsys, trained):
    before = a_session_that_stopped_before_its_first_checkpoint(run)
    assert main(["--config", "quickstart", f"run.output_dir={run}", "run.seed=3", "--restart"]) == 0
    ((aside,),) = [list(run.parent.glob(f"{run.name}.old-*"))]
    assert f"--restart: the earlier run in {run} was moved to {aside}" in capsys.readouterr().out
    assert files_in(aside) == before  # nothing lost
    assert (
        sorted(files_in(run)) == ["config.yaml"]
        and yaml.safe_load((run / "config.yaml").read_text())["run"]["seed"] == 3
    )
    ((_, run_dir, resume),) = trained
    assert run_dir == run and resume is False

    # --resume RUN --restart: the run starts over with its own config.yaml; one with checkpoints may be too
    a_session_that_stopped_before_its_first_checkpoint(run)
    checkpoint.write(run, 1, fill, keep=1)
    assert main(["--config", "quickstart", f"run.output_dir={run}"]) == 2
    assert "--restart to move it aside" in capsys.readouterr().err
    assert main(["--resume", str(run), "--restart"]) == 0
    assert len(list(run.parent.glob(f"{run.name}.old-*"))) == 2
    assert (
        sorted(files_in(run)) == ["config.yaml"]
        and yaml.safe_load((run / "config.yaml").read_text())["run"]["seed"] == 3
    )
    assert trained[-1][1:] == (run, False)


def test_restart_never_moves_a_folder_that_is_not_a_run(tmp_path, capsys, trained):
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "cat.jpg").write_bytes(b"\xff\xd8")
    assert main(["--config", "quickstart", f"run.output_dir={folder}", "--restart"]) == 2
    assert "is not empty and is not an rlsys run" in capsys.readouterr().err
    assert files_in(folder) == {"cat.jpg": b"\xff\xd8"} and not list(tmp_path.glob("photos.old-*")) and not trained


def test_a_dangling_run_folder_link_is_a_config_error_naming_it(tmp_path, monkeypatch, capsys, trained):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "gone").symlink_to(tmp_path / "unmounted" / "gone")
    assert main(["--config", "quickstart", "run.name=gone"]) == 2
    err = capsys.readouterr().err
    assert err == f"config error: runs/gone is a symbolic link to {tmp_path / 'unmounted' / 'gone'}, which does not " \
        "exist; create that folder or remove the link\n"  # fmt: skip
    assert main(["--resume", "runs/gone"]) == 2
    assert "runs/gone is a symbolic link to" in capsys.readouterr().err and not trained


def test_resume_of_a_folder_that_is_not_a_run(tmp_path, capsys, trained):
    (tmp_path / "nothing").mkdir()
    assert main(["--resume", str(tmp_path / "nothing"), "--config", "quickstart"]) == 2
    assert "not an rlsys run" in capsys.readouterr().err and not trained


def test_a_literal_secret_on_the_command_line_is_redacted_with_a_warning(tmp_path, monkeypatch, capsys, trained):
    monkeypatch.setenv("RLSYS_TEST_EMULATOR_SECRET", "in-a-list")
    folder = tmp_path / "run"
    args = [
        "--config",
        "quickstart",
        f"run.output_dir={folder}",
        "metrics.wandb_api_key=sk-typed-on-the-command-line",
        "env.android.emulator_args=[-x, '${env:RLSYS_TEST_EMULATOR_SECRET}']",
    ]
    assert main(args) == 0
    assert "warning: metrics.wandb_api_key" in capsys.readouterr().err
    text = (folder / "config.yaml").read_text()
    assert "sk-typed" not in text and "in-a-list" not in text
    saved = yaml.safe_load(text)
    assert saved["metrics"]["wandb_api_key"] == REDACTED
    assert saved["env"]["android"]["emulator_args"] == ["-x", "${env:RLSYS_TEST_EMULATOR_SECRET}"]
    assert saved["env"]["android"]["console_token_file"] == "~/.emulator_console_auth_token"
