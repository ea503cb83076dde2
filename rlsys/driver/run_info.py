"""run_info.json: what produced a run, one entry per session (the first run and every `--resume`).

Each session records the start time (UTC), the git commit and dirty flag of the checkout rlsys runs
from (null when it is installed from a wheel), the versions of Python and of the packages a run depends
on, the host, its CPUs and GPUs, and the Ray cluster the driver joined. The file also keeps the wandb run
id, so that a resumed run goes on logging to the same wandb run. Nothing here may stop a run: whatever
cannot be found is null, and a file that cannot be written costs a warning. No environment variables and
no command line are recorded (a command line can hold a literal secret).
"""

from __future__ import annotations

import json
import logging
import os
import platform
import socket
import subprocess
import sys
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

log = logging.getLogger(__name__)

FILE = "run_info.json"
PACKAGES = ("rlsys", "torch", "ray", "transformers", "peft", "accelerate", "safetensors", "tokenizers", "numpy",
            "pyarrow", "pandas", "pillow", "wandb", "selenium", "miniwob", "adbutils", "gymnasium", "bitsandbytes",
            "boto3")  # fmt: skip


def record_session(run_dir: Path, resumed: bool) -> dict | None:
    """Add this session to the run's run_info.json (a new run starts the file afresh); returns what was written,
    or None when it could not be."""
    path = Path(run_dir) / FILE
    try:
        info = read(run_dir) if resumed else {}
        info["sessions"] = [*info.get("sessions", []), session(resumed)]
        write(run_dir, info)
        return info
    except Exception as e:  # noqa: BLE001 - provenance is never worth a run
        log.warning("%s could not be written (%s: %s); the run goes on without it", path, type(e).__name__, e)
        return None


def session(resumed: bool) -> dict:
    return {
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "resumed": resumed,
        "git": _quietly(git_state),
        "python": platform.python_version(),
        "packages": {name: _version(name) for name in PACKAGES},
        "host": _quietly(socket.gethostname),
        "platform": _quietly(platform.platform),
        "cpu": {"count": os.cpu_count(), "model": _quietly(cpu_model)},
        "gpus": _quietly(gpus),
        "ray": _quietly(ray_state),
    }


def read(run_dir: Path) -> dict:
    """The run's run_info.json ({} when there is none). One that does not parse is kept beside it, renamed, and
    {} is returned: the next write starts a new file rather than losing it."""
    path = Path(run_dir) / FILE
    if not path.is_file():
        return {}
    try:
        info = json.loads(path.read_text())
        if isinstance(info, dict):
            return info
        problem = "it is not a JSON object"
    except (ValueError, UnicodeDecodeError) as e:
        problem = f"it does not parse: {e}"
    kept = path.with_name(f"{FILE}.unreadable-{datetime.now(timezone.utc):%Y%m%dT%H%M%S}")
    path.rename(kept)
    log.warning("%s was set aside as %s (%s); a new one is started", path, kept.name, problem)
    return {}


def write(run_dir: Path, info: dict) -> None:
    """Replace run_info.json whole (a crash mid-write leaves the old file)."""
    path = Path(run_dir) / FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{FILE}.tmp")
    tmp.write_text(json.dumps(info, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def wandb_run_id(run_dir: Path) -> str | None:
    """The wandb run this run logs to, once it has one."""
    found = read(run_dir).get("wandb_run_id")
    return found if isinstance(found, str) and found else None


def keep_wandb_run_id(run_dir: Path, run_id: str) -> None:
    info = read(run_dir)
    if info.get("wandb_run_id") != run_id:
        write(run_dir, {**info, "wandb_run_id": run_id})


# ---------------------------------------------------------------------------------------------- the probes


def git_state() -> dict | None:
    """Commit and dirty flag of the git checkout rlsys is imported from; None when it is not one (an installed
    wheel: site-packages may sit inside someone else's repository, which is not what produced the run)."""
    root = Path(__file__).resolve().parents[2]  # rlsys/driver/ -> the checkout
    if not (root / ".git").exists():
        return None
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}  # `git status` must not take the index lock

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=20, check=True, env=env
        ).stdout.strip()

    if Path(git("rev-parse", "--show-toplevel")).resolve() != root:
        return None
    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain"))}


def cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def gpus() -> dict:
    """GPUs on the driver's host (counted by PyTorch only where the driver already imported it: the driver
    never loads it for this) and in the Ray cluster (Ray's own detection, with the accelerator types)."""
    here = None
    torch = sys.modules.get("torch")
    if torch is not None:
        here = torch.cuda.device_count() if torch.cuda.is_available() else 0
    cluster, types = None, None
    import ray

    if ray.is_initialized():
        resources = ray.cluster_resources()
        cluster = resources.get("GPU", 0)
        types = sorted(k.split(":", 1)[1] for k in resources if k.startswith("accelerator_type:"))
    return {"driver_host": here, "cluster": cluster, "accelerator_types": types}


def ray_state() -> dict | None:
    """The cluster this driver is connected to: its GCS address, this driver's node and job."""
    import ray

    if not ray.is_initialized():
        return None
    context = ray.get_runtime_context()
    return {"address": context.gcs_address, "node_id": context.get_node_id(), "job_id": context.get_job_id()}


def _version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _quietly(probe):
    try:
        return probe()
    except Exception:  # noqa: BLE001 - an unknown value is null, never an error
        return None
