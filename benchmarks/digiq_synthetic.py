"""Digi-Q on a synthetic offline dataset with a known better action, and representation throughput.

The dataset (tests/support/digiq_data.py): two-step episodes whose second action decides the outcome;
`click [2]` succeeds with probability 0.9, the other three with 0.1, and the behaviour policy picks
uniformly (about 30% success). The pipeline is the product's: candidates sampled from a tiny T5 policy
at temperature 1.2 inside the action grammar, z(s, a) from a tiny LLaVA saved and loaded like a
checkpoint, then the critic phase and the Best-of-N actor phase of `rlsys.learners.digiq.algorithm.DigiQ` (the code the
learner actor runs). The extracted policy acts greedily on fresh deciding screens; its success is the
mean success probability of the actions it picks.

    python benchmarks/digiq_synthetic.py --episodes 128
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from rlsys.config import PolicyConfig, load_config  # noqa: E402
from rlsys.envs import action_validator  # noqa: E402
from rlsys.learners.digiq.algorithm import DigiQ  # noqa: E402
from rlsys.learners.digiq.candidates import sample_candidates  # noqa: E402
from rlsys.learners.digiq.representations import RepresentationProvider, annotate  # noqa: E402
from rlsys.policies import build_policy  # noqa: E402
from tests.support.digiq_data import GOOD, P_SUCCESS, synthetic_dataset, tiny_learner  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "digiq_synthetic.json"


def config(vlm: Path, args) -> object:
    learner = tiny_learner(vlm, args.k)
    learner["digiq"] |= {"critic_steps": args.critic_steps, "actor_steps": args.actor_steps}
    data = {
        "run": {"training": "offline"},
        "offline": {"data": ["prepared in memory"]},
        "policy": {"d_model": 32, "d_ff": 64, "num_heads": 2, "temperature": 1.2},
        "learner": learner,
    }
    return load_config(None, data=data)


def throughput(provider: RepresentationProvider, observations, actions, repeats: int = 2) -> float:
    provider(observations[:4], actions[:4])  # warm-up
    t0 = time.perf_counter()
    for _ in range(repeats):
        provider(observations, actions)
    return repeats * len(observations) / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=128)
    parser.add_argument("--k", type=int, default=6)
    parser.add_argument("--critic-steps", type=int, default=300)
    parser.add_argument("--actor-steps", type=int, default=40)
    parser.add_argument("--eval-states", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)

    with tempfile.TemporaryDirectory() as tmp:
        vlm = Path(tmp) / "change-vlm"
        build_policy(PolicyConfig(kind="vlm", d_model=32, d_ff=64, num_heads=2, num_layers=2), seed=0).save_pretrained(
            vlm
        )
        cfg = config(vlm, args)
        data = synthetic_dataset(args.episodes, seed=args.seed)
        steps = [s for t in data for s in t.steps]

        t0 = time.perf_counter()
        sampler = build_policy(cfg.policy, seed=args.seed)
        observations, actions = [s.observation for s in steps], [s.action_text for s in steps]
        lists, cand_stats = sample_candidates(sampler, observations, actions, args.k, action_validator(cfg.env), 4, 64)
        for step, found in zip(steps, lists):
            step.info["digiq"] = {"candidates": found}
        candidates_s = time.perf_counter() - t0

        provider = RepresentationProvider(vlm, "answer_state", batch_size=32)
        rep_stats = annotate(data, provider, progress=False)

        algo = DigiQ(cfg.learner, build_policy(cfg.policy, seed=args.seed), seed=args.seed)
        t0 = time.perf_counter()
        history = [algo.update(data, i) for i in range(4)]
        train_s = time.perf_counter() - t0

        fresh = synthetic_dataset(args.eval_states, seed=args.seed + 1000)
        deciding = [t.steps[1].observation for t in fresh]
        chosen = [s.text for s in algo.actor.policy.act(deciding, greedy=True)]
        behaviour = float(np.mean([t.outcome == "success" for t in data]))
        extracted = float(np.mean([P_SUCCESS[a] for a in chosen]))

        obs = [s.observation for s in steps[:64]]
        acts = [s.action_text for s in steps[:64]]
        rates = {
            method: throughput(RepresentationProvider(vlm, method, batch_size=32), obs, acts)
            for method in ("answer_state", "generated_mean")
        }

    result = {
        "command": "python benchmarks/digiq_synthetic.py " + " ".join(sys.argv[1:]),
        "machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads, CPU",
        "episodes": args.episodes,
        "k": args.k,
        "behaviour_success": round(behaviour, 3),
        "extracted_success_expected": round(extracted, 3),
        "ratio": round(extracted / behaviour, 2),
        "extracted_picks_good": round(float(np.mean([a == GOOD for a in chosen])), 3),
        "candidates": cand_stats | {"seconds": round(candidates_s, 1)},
        "representation_pairs": rep_stats["pairs"],
        "representation_pairs_per_s_tiny_llava_cpu": {m: round(r, 1) for m, r in rates.items()},
        "train_seconds": round(train_s, 1),
        "stages": [
            {k: v for k, v in h.items() if k.startswith(("digiq/", "critic/", "actor/updates"))} for h in history
        ],
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
