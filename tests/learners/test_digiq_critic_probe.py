"""The probe of what Digi-Q's critic can learn from its inputs (benchmarks/digiq_critic_probe.py)."""

import argparse
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import digiq_critic_probe  # noqa: E402

from rlsys.data.shards import read_trajectories  # noqa: E402
from tests.support.synthweb_s4 import scripted_s4_episodes  # noqa: E402


def probe_args(**kw):
    return argparse.Namespace(**({"steps": 400, "batch": 128, "lr": 1e-3, "dropout": 0.0} | kw))


def test_a_probe_reads_returns_that_its_inputs_hold_and_not_ones_they_do_not():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3000, 8, generator=g)
    held_out = torch.arange(3000) % 10 == 0
    y = torch.sigmoid(2 * x[:, 0]) * (x[:, 1] > 0)
    held = digiq_critic_probe.probe(x, y, held_out, 0, probe_args(), 64, norm=False)
    noise = digiq_critic_probe.probe(x, torch.rand(3000, generator=g), held_out, 0, probe_args(), 64, norm=False)
    assert held["held_out_r2"] > 0.8
    assert noise["held_out_r2"] < 0.05 < noise["train_r2"]  # it fits the train rows' noise, which does not carry over
    # the critic's head normalises each row of inputs: on eight inputs that hides much of what one of them says
    assert digiq_critic_probe.probe(x, y, held_out, 0, probe_args(), 64)["held_out_r2"] < held["held_out_r2"] - 0.1


def test_where_a_state_is_comes_from_the_page_and_detour_the_step_left(tmp_path):
    detours = 0
    for t in read_trajectories(scripted_s4_episodes(tmp_path / "data")):
        depth, rows = int(t.task.meta["depth"]), digiq_critic_probe.where(t, 30, 15)
        assert len(rows) == len(t.steps) and rows[0] == pytest.approx([depth / 15, 0.0, 1.0])
        for i in range(1, len(t.steps)):
            left = t.steps[i - 1].info["synthweb"]  # where step i - 1 led is where step i is taken
            assert rows[i] == pytest.approx([(depth - left["page"]) / 15, left["detours"] / 4, (30 - i) / 30])
            detours += left["detours"] > 0
    assert detours > 0  # the scripted chooser clicks wrong links 30% of the time
