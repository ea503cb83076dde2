"""benchmarks/gpu_speed.py at toy sizes on the CPU: every case runs and reports its numbers (no timing is
asserted), without Ray, as on a GPU machine that has none."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WITHOUT_RAY = (
    "import runpy, sys; sys.modules.update(ray=None, wandb=None, selenium=None, adbutils=None); "
    "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


def test_gpu_speed_runs_every_kind_of_case_at_toy_sizes_without_ray(tmp_path):
    out = tmp_path / "rows.jsonl"
    cmd = [sys.executable, "-c", WITHOUT_RAY, str(ROOT / "benchmarks" / "gpu_speed.py"), "--device", "cpu",
           "--scale", "tiny", "--only", "1.5B lora r64", "autoui-base", "--out", str(out)]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[0]["device"] == "cpu"
    assert not [r for r in rows if "error" in r or "plain_error" in r]
    acts = [r for r in rows if r.get("what") == "act"]
    assert sorted(r["lora_merged"] for r in acts) == [False, True]
    assert all(r["ms_per_token_step"] > 0 for r in acts) and acts[0]["hf_generate_ms_per_token_step"] > 0
    updates = {(r["case"], r["algorithm"]): r for r in rows if r.get("what") == "update"}
    assert set(updates) == {("1.5B lora r64", "filtered_bc"), ("autoui-base", "filtered_bc"), ("autoui-base", "digirl")}
    assert all(r["samples_per_s"] > 0 for r in updates.values())
    assert updates["1.5B lora r64", "filtered_bc"]["plain_samples_per_s"] > 0
    assert updates["1.5B lora r64", "filtered_bc"]["tokens_per_sample"] > 100
