"""The wheel installs one import namespace, `rlsys`, and works beside packages named like its folders.

PyPI has packages named `envs`, `actors` and `learners`, and research repositories often have folders
of those names. The wheel is built and installed into a fresh virtual environment (sharing this
environment's dependencies, among them PyPI's `envs`, which the dev extra installs), and rlsys is run
from a folder that holds its own `envs/` and `learners/` packages."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.hub_cache import fill_hub_cache

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def run(*args, cwd=None, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    # built from a copy of the files git knows, so nothing left in a local build/ folder can slip in
    source, dist = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("dist")
    listed = run("git", "ls-files", "--cached", "--others", "--exclude-standard", cwd=ROOT)
    for name in listed.stdout.splitlines():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / name).is_symlink():  # actors -> rlsys/actors and its siblings
            (source / name).symlink_to(os.readlink(ROOT / name))
        elif (ROOT / name).is_file():
            shutil.copy2(ROOT / name, source / name)
    built = run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", dist, source)
    assert built.returncode == 0, built.stderr
    (found,) = dist.glob("rlsys-*.whl")
    return found


@pytest.fixture(scope="module")
def venv(tmp_path_factory, wheel) -> Path:
    home = tmp_path_factory.mktemp("venv")
    assert run(sys.executable, "-m", "venv", "--system-site-packages", home).returncode == 0
    before = set(os.listdir(site_packages(home)))
    installed = run(home / "bin" / "python", "-m", "pip", "install", "--no-deps", "--no-index", wheel)
    assert installed.returncode == 0, installed.stderr
    (home / "added.txt").write_text("\n".join(sorted(set(os.listdir(site_packages(home))) - before)))
    return home


def site_packages(venv: Path) -> Path:
    (found,) = (venv / "lib").glob("python3*/site-packages")
    return found


def test_the_wheel_holds_only_the_rlsys_namespace_with_its_configs_and_templates(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"rlsys"}
    for expected in (
        "rlsys/envs/web/webenv.py",
        "rlsys/actors/runner.py",
        "rlsys/learners/digiq/algorithm.py",
        "rlsys/configs/quickstart.yaml",
        "rlsys/policies/templates/pae_agent.txt",
        "rlsys/envs/evaluators/templates/pae_judge.txt",
        "rlsys/envs/web/elements.js",
        "rlsys/templates/propose_tasks.txt",
    ):
        assert expected in names, expected
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    scripts = zipfile.ZipFile(wheel).read(entry_points).decode()
    for script in (
        "rlsys-train",
        "rlsys-eval",
        "rlsys-data",
        "rlsys-digiq",
        "rlsys-propose-tasks",
        "rlsys-report",
        "rlsys-models",
    ):
        assert f"{script} = " in scripts


def test_the_installed_wheel_resolves_a_hub_id_offline_from_a_filled_cache(venv, tmp_path):
    """A config naming its policy by Hub id, in a fresh virtual environment with the network off: the model comes
    from the Hugging Face cache the environment names, through the real from_pretrained."""
    from rlsys.config import PolicyConfig
    from rlsys.policies import build_policy

    build_policy(PolicyConfig(kind="tiny_t5"), seed=0).save_pretrained(tmp_path / "saved")
    fill_hub_cache(tmp_path / "cache", "tiny-org/tiny-t5", tmp_path / "saved")
    (tmp_path / "run.yaml").write_text(
        f"policy: {{kind: tiny_t5, path: tiny-org/tiny-t5}}\nrun: {{output_dir: {tmp_path / 'runs'}}}\n"
    )
    script = (
        "import sys, rlsys\nfrom rlsys.config import load_config, check_paths\n"
        "from rlsys.policies import build_policy\n"
        "cfg = load_config(sys.argv[1]); check_paths(cfg); policy = build_policy(cfg.policy)\n"
        "print(type(policy).__name__, rlsys.__file__)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env |= {"HF_HUB_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    args = [venv / "bin" / "python", "-c", script, tmp_path / "run.yaml"]
    done = subprocess.run([str(a) for a in args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    kind, location = done.stdout.split()[-2:]
    assert kind == "TinyT5Policy" and location.startswith(str(site_packages(venv)))


def test_installed_next_to_pypi_envs_both_work_from_a_repo_with_its_own_envs(venv, tmp_path):
    python = venv / "bin" / "python"
    added = (venv / "added.txt").read_text().split()
    assert [name for name in added if not name.endswith(".dist-info")] == ["rlsys"]

    # PyPI's `envs` (from the shared site-packages) still imports as itself
    pypi_envs = run(python, "-c", "from envs import env; print(env.__module__)", cwd=tmp_path)
    assert pypi_envs.returncode == 0, pypi_envs.stderr

    # a research repository with its own envs/ and learners/ packages, rlsys run from inside it
    repo = tmp_path / "research"
    for package in ("envs", "learners", "actors"):
        (repo / package).mkdir(parents=True)
        (repo / package / "__init__.py").write_text(f"OWNER = 'research {package}'\n")
    every_module = (
        "import importlib, pkgutil, rlsys, envs, learners\n"
        "names = [m.name for m in pkgutil.walk_packages(rlsys.__path__, 'rlsys.')]\n"
        "skipped = [n for n in names if n.endswith('__main__')]\n"
        "[importlib.import_module(n) for n in names if n not in skipped]\n"
        "print(len(names), rlsys.__file__, envs.OWNER, learners.OWNER)\n"
    )
    imported = run(python, "-c", every_module, cwd=repo)
    assert imported.returncode == 0, imported.stderr
    count, location, *owners = imported.stdout.split()
    assert int(count) > 80
    assert location.startswith(str(site_packages(venv)))
    assert owners == ["research", "envs", "research", "learners"]

    version = run(venv / "bin" / "rlsys-train", "--version", cwd=repo)
    assert version.returncode == 0 and version.stdout.startswith("rlsys "), version.stderr


def test_a_packaged_config_runs_by_name_from_any_folder(venv, tmp_path):
    """`rlsys-train --config quickstart` from a foreign repository: a short real run (one
    iteration, two browsers), with the packaged config found by name."""
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    repo = tmp_path / "research"
    (repo / "envs").mkdir(parents=True)
    (repo / "envs" / "__init__.py").write_text("raise ImportError('the research repo envs, not rlsys')\n")
    out = tmp_path / "run"
    trained = run(
        venv / "bin" / "python", "-m", "rlsys.cli.train", "--config", "quickstart",
        f"run.output_dir={out}", "run.iterations=1", "run.rollout_size=2", "run.eval_every=0",
        "run.eval_at_start=false", "ray.dashboard=false", f"env.chromium={chromium}", f"env.chromedriver={driver}",
        cwd=repo,
    )  # fmt: skip
    assert trained.returncode == 0, trained.stdout[-2000:] + trained.stderr[-4000:]
    assert (out / "metrics.jsonl").read_text().count("\n") == 1
    assert list((out / "checkpoints").iterdir())
