"""Sweep the seeds of one rlsys config with Ray Tune: one trial per seed, each a whole rlsys run in a folder of its
own (OUT/SEED), every metrics record reported to Tune as it is written; at the end, each seed's last evaluation
and their mean with a 95% interval.

    python docs/examples/tune_seeds.py --config quickstart --seeds 0 1 2 3 4 --out runs/sweep [key=value ...]

Ray is started here, on 127.0.0.1; each trial's runners and learner join it (rlsys.api.train starts no Ray of its
own inside a trial). Each trial reserves what its run's actors ask for (Tune places a trial's actors in the trial's
placement group). Trials run one at a time: a run's actors have fixed names in its Ray (replay-buffer,
weight-store, learner-N). For policy.placement: runner configs.
"""

import argparse
import os
import statistics
import sys

import ray
from ray import tune

from rlsys.api import train
from rlsys.config import load_config
from rlsys.driver.ray_init import bind_to_loopback

T_975 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}  # Student's t, 95%


def run_bundles(cfg) -> list[dict]:
    """The resources one run's actors ask for: its learners and its runners (rlsys.learners.runtime.group,
    actors.pool)."""
    lc, rc = cfg.learner, cfg.runners
    gpu = lc.device != "cpu" and ray.cluster_resources().get("GPU", 0) >= lc.num_learners
    learner = {"CPU": 1, "GPU": 1} if gpu else {"CPU": lc.num_cpus}
    learner |= {lc.resource: 1} if lc.resource else {}
    return [learner] * lc.num_learners + [{"CPU": rc.num_cpus, rc.resource: 1}] * rc.num


def trial(params: dict) -> None:
    seed = params["seed"]
    overrides = [*params["overrides"], f"run.seed={seed}", f"run.output_dir={os.path.join(params['out'], str(seed))}"]
    train(params["config"], overrides, on_record=tune.report)


def interval(values: list[float]) -> str:
    mean = statistics.fmean(values)
    if len(values) < 2:
        return f"{mean:.3f}"
    half = T_975.get(len(values) - 1, 1.96) * statistics.stdev(values) / len(values) ** 0.5
    return f"{mean:.3f} [{mean - half:.3f}, {mean + half:.3f}]"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True, help="experiment YAML or a packaged config's name")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--out", default="runs/sweep", help="each seed's run goes to OUT/SEED")
    p.add_argument("--metric", default="eval/success_rate")
    p.add_argument("overrides", nargs="*", help="dotted overrides for every seed, e.g. run.iterations=4")
    args = p.parse_args(argv)
    cfg = load_config(args.config, args.overrides)  # a bad config is named before Ray starts
    if cfg.policy.placement != "runner":
        p.error(f"policy.placement {cfg.policy.placement!r}: this example sweeps runs whose runners hold the policy")
    out = os.path.abspath(args.out)  # Tune runs each trial in a working directory of its own
    bind_to_loopback()
    ray.init(resources={cfg.runners.resource: cfg.runners.num}, include_dashboard=False)
    try:
        # the trial itself only waits on its run's actors (Tune refuses a bundle of nothing)
        reserved = tune.PlacementGroupFactory([{"CPU": 0.001}, *run_bundles(cfg)])
        tuner = tune.Tuner(
            tune.with_resources(trial, reserved),
            param_space={
                "seed": tune.grid_search(args.seeds),
                "config": args.config,
                "overrides": args.overrides,
                "out": out,
            },
            tune_config=tune.TuneConfig(max_concurrent_trials=1),
            run_config=tune.RunConfig(storage_path=os.path.join(out, "tune"), name="seeds", verbose=0),
        )
        results = tuner.fit()
    finally:
        ray.shutdown()
    finals = {}
    for result in results:
        if result.error:
            print(f"seed {result.config['seed']}: failed: {result.error}", file=sys.stderr)
            continue
        frame = result.metrics_dataframe
        evaluated = frame[args.metric].dropna() if frame is not None and args.metric in frame else []
        if len(evaluated):
            finals[result.config["seed"]] = float(evaluated.iloc[-1])
    for seed, value in sorted(finals.items()):
        print(f"seed {seed}: {args.metric} {value:.3f}  ({os.path.join(out, str(seed))})")
    if finals:
        print(f"mean over {len(finals)} seeds, 95% interval: {interval(list(finals.values()))}")
    return 0 if len(finals) == len(args.seeds) else 1


if __name__ == "__main__":
    sys.exit(main())
