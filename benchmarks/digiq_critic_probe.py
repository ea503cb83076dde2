"""Whether Digi-Q's critic could learn S4-read's values from what it reads. Heads of the critic's own shape are
regressed on the true discounted return of the dataset's action (no bootstrapping, no target heads) from (a) where
the state is (pages left on the path, detour depth, steps left), (b) the critic's own inputs for that action, exactly
as the critic reads them, and (c) both; each is scored by R^2 on the critic's held-out split (0 is a constant's).

    python benchmarks/digiq_critic_probe.py --run runs/bench-synthweb/S4-read/DQ-seed0 --seeds 0 1 2 3 4

`--run` is a Digi-Q run of the bench: its config gives the critic's encoders, gamma and split, and the prepared
dataset (candidates and z) it trained on.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from synthweb_s4_analysis import discounted_return, walk

from rlsys.config import load_config
from rlsys.data.shards import read_trajectories
from rlsys.learners.digiq.critic import mlp_head
from rlsys.learners.digiq.inputs import CriticInputs, step_refs
from rlsys.learners.selection import is_validation

RESULTS = Path(__file__).parent / "results" / "digiq_critic_probe.json"
HEADS = {"critic": True, "no_layernorm": False}  # the critic's head, and one without its input LayerNorm


def where(trajectory, max_steps: int, max_depth: int) -> list[list[float]]:
    """Per step: pages left on the path, detour depth and steps left, each scaled to about [0, 1]."""
    depth = int(trajectory.task.meta["depth"])
    return [[(depth - before["page"]) / max_depth, before["detours"] / 4, (max_steps - i) / max_steps]
            for i, _, before, _ in walk(trajectory)]  # fmt: skip


def probe(x: torch.Tensor, y: torch.Tensor, held_out: torch.Tensor, seed: int, args, width: int, norm=True) -> dict:
    """A critic-shaped head regressed on the returns of the train rows; R^2 on both splits. Without `norm` the head
    drops its input LayerNorm, which (less each row's mean, over its spread) leaves three inputs (where the state
    is) one degree of freedom of their three."""
    train = ~held_out
    torch.manual_seed(seed)
    head = mlp_head(x.shape[1], width, args.dropout)
    if not norm:
        head[0] = torch.nn.Identity()
    optimizer = torch.optim.Adam(head.parameters(), lr=args.lr)
    rows = torch.nonzero(train).squeeze(1)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(args.steps):
        batch = rows[torch.randint(len(rows), (args.batch,), generator=generator)]
        loss = F.mse_loss(head(x[batch]).squeeze(-1), y[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    head.eval()
    with torch.no_grad():
        predicted = head(x).squeeze(-1)

    def r2(mask: torch.Tensor) -> float:
        return float(1 - F.mse_loss(predicted[mask], y[mask]) / y[mask].var(unbiased=False))

    return {"held_out_r2": r2(held_out), "train_r2": r2(train)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True, help="a Digi-Q run folder of the bench")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--steps", type=int, default=3000, help="regression steps per probe")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--dropout", type=float, default=0.0)
    args = parser.parse_args(argv)
    command = shlex.join(["python", "benchmarks/digiq_critic_probe.py", *(sys.argv[1:] if argv is None else argv)])
    cfg = load_config(str(args.run / "config.yaml"))
    d = cfg.learner.digiq
    shards = [shard for folder in cfg.offline.data for shard in sorted(Path(folder).glob("shard-*.parquet"))]
    # the steps Digi-Q's update reads
    trajectories = [t for shard in shards for t in read_trajectories(shard) if t.trainable and t.steps]
    refs = step_refs(trajectories)
    t0 = time.perf_counter()
    inputs = CriticInputs(d)
    with torch.no_grad():
        critic_inputs = torch.cat([inputs.states(refs), inputs.actions([(r, 0) for r in refs])], dim=-1)
    encode_s = time.perf_counter() - t0
    bounds = cfg.env.max_steps, cfg.tasks.synthweb.max_depth
    place = torch.tensor([row for t in trajectories for row in where(t, *bounds)])
    y = torch.tensor([discounted_return(r.traj, r.index, d.gamma) for r in refs], dtype=torch.float32)
    held_out = torch.tensor([is_validation(r.traj, d.validation_fraction) for r in refs])
    features = {"where": place, "critic_inputs": critic_inputs, "both": torch.cat([place, critic_inputs], dim=-1)}
    print(f"{len(refs)} steps encoded in {encode_s:.0f} s", file=sys.stderr, flush=True)
    probes = {}  # (head, inputs) -> one probe per seed
    for head, norm in HEADS.items():
        for name, x in features.items():
            for seed in args.seeds:
                probes.setdefault((head, name), []).append(probe(x, y, held_out, seed, args, d.critic_hidden, norm))
                print(f"{head} {name} seed {seed}: {probes[head, name][-1]}", file=sys.stderr, flush=True)
    result = {
        "command": command,
        "run": str(args.run),
        "data": [str(f) for f in cfg.offline.data],
        "steps": len(refs),
        "held_out_steps": int(held_out.sum()),
        "gamma": d.gamma,
        "widths": {name: x.shape[1] for name, x in features.items()},
        "probe": {"head_width": d.critic_hidden, **{k: getattr(args, k) for k in ("steps", "batch", "lr", "dropout")}},
        "encode_seconds": encode_s,
        **{f"{head}_head": {measure: {name: [p[measure] for p in probes[head, name]] for name in features}
                            for measure in ("held_out_r2", "train_r2")} for head in HEADS},
        "held_out_r2_mean": {f"{head}_head": {name: float(np.mean([p["held_out_r2"] for p in probes[head, name]]))
                                              for name in features} for head in HEADS},
    }  # fmt: skip
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
