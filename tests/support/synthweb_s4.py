"""Scripted episodes of a small S4 (the synthweb bench's long-horizon setting, at depth 3-4), made by the bench's own
dataset script: real synthweb episodes with wrong clicks and detours, for tests of Digi-Q on the bench."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import synthweb_bench  # noqa: E402
import synthweb_dataset  # noqa: E402

SMALL_S4 = [*synthweb_bench.SETTINGS["S4"], "tasks.synthweb.min_depth=3", "tasks.synthweb.max_depth=4"]


def scripted_s4_episodes(out: Path, episodes: int = 12) -> Path:
    """`episodes` episodes of the scripted S4 chooser (right 70% of the time, so wrong clicks and detours occur)."""
    synthweb_dataset.main(["--out", str(out), "--episodes", str(episodes), "--config", synthweb_bench.BASE,
                           "--set", *SMALL_S4])  # fmt: skip
    return out
