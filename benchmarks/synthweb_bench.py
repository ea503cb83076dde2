"""Every algorithm on the synthetic suite's settings, and on a MiniWoB++ suite played the same way, at equal env
steps, over seeds: the runs that test the predictions written before them in docs/algorithms/predictions.md
(settings S1-S4, S4-read and MW, arms FBC-s, FBC-q, D, D-c, D-lam1, the sanity arm S, GRPO (G), GRPO with
step-level groups (G-step), Dr. GRPO (G-dr), GRPO with the replay of successes (G-rep) and, offline from a start,
Digi-Q (DQ), whose dataset it prepares through `rlsys-digiq`). This script is the
protocol; it changes no setting or arm after seeing results (a new setting is added under a new name, as the
predictions page says).

    python benchmarks/synthweb_bench.py --settings S1 --seeds 0 1 2 3 4 5 6 7 8 9
    python benchmarks/synthweb_bench.py --settings S4 --dataset runs/synthweb-s4-data   # benchmarks/synthweb_dataset.py

Every arm of an online setting starts from one policy (`shared_start`: offline filtered BC on scripted
demonstrations of the setting's training tasks, which on MW are its tasks' demonstrators,
benchmarks/miniwob_demos.py; the predictions page says why), as do the arms of S4-read, from demonstrations of
shorter tasks (`START_DATA`); S4's start from the untrained policy. Each run is `rlsys-train` with
the setting's and the arm's overrides: online settings train to `--env-steps` training env steps
(`run.max_env_steps`), the offline one for the same number of gradient steps in every arm, and all are evaluated
greedily on `--eval-episodes` held-out tasks of the same mix. Per arm: success at each evaluation point (mean and
95% t-interval over seeds), success by depth at the end, steps and wasted steps per solved episode (steps beyond
the task's depth, in the last evaluation's episodes and in the last quarter's training episodes), and for DigiRL's
arms the critics' validation losses, p_instr per task and what the curriculum kept, per iteration. A run that
finished under the same overrides is read back instead of repeated.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
from math import isclose
from pathlib import Path

import miniwob_demos
import numpy as np
import synthweb_dataset
from digirl_vs_filteredbc import RESULTS, finished, interval, plot, results_lock, summarize, train

from rlsys.cli.digiq import main as digiq_cli
from rlsys.data.shards import read_trajectories
from rlsys.envs.web.miniwob_demos import SUITE
from rlsys.learners.digiq.representations import model_id

BASE = str(Path(__file__).with_name("synthweb_bench.yaml"))  # the suite, held-out evaluation, element actions
# the multi-step MiniWoB++ tasks with scripted demonstrations but enter-text-2, which asks for a word in another case
# than the instruction's: a pointing policy types only spans of the instruction
MW_TASKS = [t for t in SUITE if t != "enter-text-2"]
S3 = ["tasks.synthweb.min_depth=2", "tasks.synthweb.max_depth=4", "tasks.synthweb.min_distractors=2",
      "tasks.synthweb.max_distractors=6", "env.synthweb.wrong_link=stay", "tasks.synthweb.impossible=0.0",
      "env.max_steps=10"]  # fmt: skip
S4 = ["env.synthweb.wrong_link=detour", "tasks.synthweb.min_depth=8", "tasks.synthweb.max_depth=15",
      "tasks.synthweb.min_distractors=1", "tasks.synthweb.max_distractors=4", "tasks.synthweb.impossible=0.1",
      "env.max_steps=30"]  # fmt: skip
# the settings of docs/algorithms/predictions.md, as written there
SETTINGS = {
    "S1": ["env.synthweb.wrong_link=detour", "env.synthweb.detour_links=1", "tasks.synthweb.min_depth=3",
           "tasks.synthweb.max_depth=6", "tasks.synthweb.min_distractors=2", "tasks.synthweb.max_distractors=6",
           "tasks.synthweb.confusable=0.5", "tasks.synthweb.impossible=0.0", "env.max_steps=20"],
    "S1-control": ["env.synthweb.wrong_link=end", "tasks.synthweb.min_depth=3", "tasks.synthweb.max_depth=6",
                   "tasks.synthweb.min_distractors=2", "tasks.synthweb.max_distractors=6",
                   "tasks.synthweb.confusable=0.5", "tasks.synthweb.impossible=0.0", "env.max_steps=20"],
    "S2": ["env.synthweb.wrong_link=stay", "tasks.synthweb.min_depth=1", "tasks.synthweb.max_depth=6",
           "tasks.synthweb.min_distractors=2", "tasks.synthweb.max_distractors=6", "tasks.synthweb.confusable=0.5",
           "tasks.synthweb.impossible=0.2", "env.max_steps=12"],
    "S3-clean": S3,  # P3.3's noise-free result, added before any S3 run (predictions.md)
    "S3-slips": [*S3, "env.synthweb.slip_prob=0.15"],
    "S3-noise": [*S3, "env.synthweb.reward_noise=0.3"],
    "S3-both": [*S3, "env.synthweb.slip_prob=0.15", "env.synthweb.reward_noise=0.3"],
    "S4": S4,
    "S4-read": S4,  # S4 from a start that reads short instructions (predictions.md, "S4-read")
    # the MiniWoB++ suite (predictions.md, "The MiniWoB++ suite"); 8 steps, one more than the longest demonstration
    "MW": [f"tasks.train=[{','.join(MW_TASKS)}]", "env.max_steps=8"],
}  # fmt: skip
MINIWOB = {"MW": str(Path(__file__).with_name("miniwob_bench.yaml"))}  # settings on real pages: their base config
OFFLINE = {"S4", "S4-read"}
# the shared start's demonstrations, where they are not of the setting's own tasks: S4-read's start learns the
# matching on instructions of 3-6 links, which the untrained policy did not learn from S4's 8-15 (predictions.md)
START_DATA = {"S4-read": [*S4, "tasks.synthweb.min_depth=3", "tasks.synthweb.max_depth=6"]}
ARMS = {
    "FBC-s": ["learner.algorithm=filtered_bc", "learner.filter=success"],
    "FBC-q": ["learner.algorithm=filtered_bc", "learner.filter=quantile", "learner.quantile=0.9"],
    "D": ["learner.algorithm=digirl"],
    "D-c": ["learner.algorithm=digirl", "learner.digirl.curriculum_quantile=0.0"],
    "D-lam1": ["learner.algorithm=digirl", "learner.digirl.lam=1.0"],
    "S": ["learner.algorithm=digirl", "learner.digirl.curriculum_quantile=0.0", "learner.digirl.lam=1.0",
          "learner.digirl.actor_reduction=token_mean"],
    # GRPO (predictions.md, "GRPO on S1"): groups of 4, each update on that iteration's groups alone
    "G": ["learner.algorithm=grpo", "run.group_size=4", "learner.sample_trajectories=32", "learner.grpo.epochs=2"],
    "G-step": ["learner.algorithm=grpo", "run.group_size=4", "learner.sample_trajectories=32", "learner.grpo.epochs=2",
               "learner.grpo.step_groups=true"],  # GiGPO's step-level groups (predictions.md)
    "G-dr": ["learner.algorithm=grpo", "run.group_size=4", "learner.sample_trajectories=32", "learner.grpo.epochs=2",
             "learner.grpo.scale_by_std=false"],  # Dr. GRPO's advantages, R - mean (predictions.md)
    "G-rep": ["learner.algorithm=grpo", "run.group_size=4", "learner.sample_trajectories=32", "learner.grpo.epochs=2",
              "learner.grpo.success_replay=true"],  # ARPO's replay of successes, for suites whose tasks recur (MW)
    # Digi-Q (predictions.md, "Digi-Q on S4-read"), offline from a start: its published keys but the critics' sizes
    # and learning rate of DigiRL's here, and z(s, a) the start policy's element vector (no VLM runs on a CPU)
    "DQ": ["learner.algorithm=digiq", "learner.digiq.critic_lr=1e-4", "learner.digiq.text_hidden=32",
           "learner.digiq.image_feature_dim=32", "learner.digiq.critic_steps=20", "learner.digiq.actor_steps=20",
           "learner.digiq.representation.method=pointer_hidden"],
}  # fmt: skip
DIGIRL_SIZES = ["learner.digirl.text_hidden=32", "learner.digirl.image_feature_dim=32"]
# filtered BC takes as many actor steps an iteration as DigiRL's actor (learner.digirl.actor_steps)
FBC_STEPS = "learner.updates_per_iteration=20"


def shared_start(args, out: Path, setting: str) -> tuple[str, dict]:
    """The weak policy every arm of an online setting starts from: filtered BC trained offline, for
    `--start-iterations` iterations, on `--start-episodes` episodes of a scripted policy on the setting's training
    tasks (benchmarks/synthweb_dataset.py's, or on MW the demonstrators). Its policy folder and its evaluation."""
    data, base = out / setting / "start-data", MINIWOB.get(setting, BASE)
    if not (data / "dataset.json").exists():
        shutil.rmtree(data, ignore_errors=True)
        common = ["--out", str(data), "--config", base, "--episodes", str(args.start_episodes), "--seed", "1000"]
        if setting in MINIWOB:  # the suite's demonstrators, on training problems
            miniwob_demos.main([*common, "--tasks", *MW_TASKS, "--set", *SETTINGS[setting]])
        else:
            synthweb_dataset.main([*common, "--p-right", str(args.start_p_right), "--p-back", "1.0",
                                   "--set", *START_DATA.get(setting, SETTINGS[setting])])  # fmt: skip
    n = args.start_iterations
    run_dir = out / setting / "start"
    records = train(run_dir, [*SETTINGS[setting], f"policy.kind={args.policy}", "run.seed=1000",
                              f"run.eval_episodes={args.eval_episodes}", "metrics.progress=false",
                              "metrics.report=false", "ray.dashboard=false", "run.training=offline",
                              f"offline.data=[{data}]", "replay.capacity=4000", "learner.algorithm=filtered_bc",
                              "learner.filter=success", FBC_STEPS, f"learner.lr={args.start_lr}",
                              f"learner.offline_iterations={n}", f"run.checkpoint_every={n}",
                              # an evaluation on real pages takes minutes: there, at the start's end only
                              f"run.eval_every={n if setting in MINIWOB else 1}", *args.set], config=base)  # fmt: skip
    evaluations = [r for r in records if "eval/success_rate" in r]
    return str(sorted((run_dir / "checkpoints").iterdir())[-1] / "policy"), evaluations[-1]


def out_dir(args) -> Path:
    return Path(f"runs/bench-synthweb{'-' + args.tag if args.tag else ''}")


def digiq_data(args, setting: str) -> Path:
    return out_dir(args) / setting / "digiq-data"


def prepare_digiq_data(args, setting: str, start: str) -> None:
    """The dataset with Digi-Q's candidates (16 a step, sampled from the start at temperature 1.2) and their
    representations by the start policy (`pointer_hidden`), made once per setting, dataset and start."""
    ready = digiq_data(args, setting)
    source = {"dataset": str(Path(args.dataset).resolve()), "model": model_id(start)}
    if (ready / "source.json").exists() and json.loads((ready / "source.json").read_text()) == source:
        return
    shutil.rmtree(ready, ignore_errors=True)
    candidates = ready.with_name("digiq-candidates")
    shutil.rmtree(candidates, ignore_errors=True)
    keys = [*SETTINGS[setting], f"policy.kind={args.policy}", f"policy.path={start}", "run.seed=1000", *ARMS["DQ"],
            f"learner.digiq.representation.model={start}", "learner.digiq.representation.batch_size=1024",
            "run.training=offline", f"offline.data=[{args.dataset}]"]  # what a Digi-Q config must hold  # fmt: skip
    for command, data, out in (("candidates", args.dataset, candidates), ("represent", candidates, ready)):
        if digiq_cli([command, "--config", BASE, "--data", str(data), "--out", str(out), *keys]) != 0:
            sys.exit(f"rlsys-digiq {command} failed for {setting}")
    shutil.rmtree(candidates)
    (ready / "source.json").write_text(json.dumps(source) + "\n")


def overrides(args, setting: str, arm: str, seed: int, start: str | None = None) -> list[str]:
    base = [*SETTINGS[setting], f"policy.kind={args.policy}", f"run.seed={seed}",
            f"run.rollout_size={args.rollout_size}", f"run.eval_episodes={args.eval_episodes}",
            "run.checkpoint_every=0", "metrics.progress=false", "metrics.report=false", "ray.dashboard=false",
            *ARMS[arm], *(DIGIRL_SIZES if "digirl" in ARMS[arm][0] else [FBC_STEPS]), *args.set]  # fmt: skip
    # the start policy's evaluation is the shared start run's
    start_keys = [f"policy.path={start}", "run.eval_at_start=false"] if start else []
    if setting in OFFLINE:
        if not args.dataset:
            sys.exit(f"{setting} trains offline: give --dataset (benchmarks/synthweb_dataset.py writes one)")
        n = args.offline_iterations  # of each DigiRL or Digi-Q stage, or of filtered BC's actor: the same actor steps
        algorithm = ARMS[arm][0]
        data = args.dataset
        if "digirl" in algorithm:
            length = [f"learner.digirl.offline_{part}_iterations={n}" for part in ("instruction_critic", "step_critic",
                      "actor")]  # fmt: skip
        elif "digiq" in algorithm:
            if not start:
                sys.exit(f"{arm} on {setting}: Digi-Q's representations come from the start policy, which it has not")
            length = [f"learner.digiq.critic_iterations={n}", f"learner.digiq.actor_iterations={n}",
                      f"learner.digiq.representation.model={start}"]  # fmt: skip
            data = digiq_data(args, setting)
        else:
            length = [f"learner.offline_iterations={n}"]
        return base + ["run.training=offline", f"offline.data=[{data}]", "replay.capacity=4000", *length,
                       f"run.eval_every={max(n // 5, 1)}", *start_keys]  # fmt: skip
    return base + ["run.iterations=100000", f"run.max_env_steps={args.env_steps}", f"run.eval_every={args.eval_every}",
                   *start_keys]  # fmt: skip


# GRPO's groups per iteration: all, those with one reward in every member (no advantage), those too small to
# score, and the step-level anchor groups
GROUP_COUNTS = ("grpo/groups", "grpo/uniform_groups", "grpo/skipped_small_groups", "grpo/step_groups")


def solved_steps(run_dir: Path) -> dict:
    """Steps and wasted steps (beyond the task's depth) per solved episode: in the last (greedy) evaluation, and
    in the training episodes of the last quarter of the run (sampled: where detours and recoveries happen)."""
    shards = sorted((run_dir / "eval").glob("shard-*.parquet"))
    if not shards:
        return {}
    evaluated = read_trajectories(shards[-1])
    out = per_solved(evaluated) | {"named_link_share": named_link_share(evaluated)}
    trained = read_trajectories(run_dir / "trajectories") if (run_dir / "trajectories").exists() else []
    late = per_solved(trained[3 * len(trained) // 4 :])
    return out | {f"train_{k}": v for k, v in late.items()}


def per_solved(trajectories: list) -> dict:
    solved = [t for t in trajectories if t.outcome == "success"]
    steps = [len(t.steps) for t in solved]
    wasted = [len(t.steps) - int(t.task.meta["depth"]) for t in solved if "depth" in t.task.meta]  # synthweb
    return {"solved": len(solved), "steps_per_solved": float(np.mean(steps)) if steps else None,
            "wasted_per_solved": float(np.mean(wasted)) if wasted else None}  # fmt: skip


def named_link_share(trajectories: list) -> float | None:
    """Of the first steps taken on each page of a solvable task's path, the share that clicked the link the
    instruction names (led on, or solved the task); None off synthweb. Whether a policy learnt the matching, even
    where it seldom reaches the end (P4.3); later visits are left out, so that a policy stuck clicking one wrong
    link back and forth does not weigh that page fifteen times."""
    clicks = first_clicks(trajectories)
    return sum(named for *_, named in clicks) / len(clicks) if clicks else None


def first_clicks(trajectories: list) -> list[tuple] | None:
    """(trajectory, page, whether it clicked the named link) for the first step on each page of a solvable task's
    path; None off synthweb."""
    clicks = []
    for t in trajectories:
        if t.task.meta.get("impossible"):
            continue
        before, seen = {"page": 0, "detours": 0}, set()
        for step in t.steps:
            after = step.info.get("synthweb")
            if after is None:
                return None
            if before["detours"] == 0 and before["page"] not in seen:
                seen.add(before["page"])
                named = step.info.get("outcome") == "success" or after["page"] > before["page"]
                clicks.append((t, before["page"], named))
            before = after
    return clicks


def run(args, out: Path, setting: str, arm: str, seed: int, start: str | None) -> dict | None:
    """One run's summary; with `--finished-only`, None for a run that has not finished under these overrides."""
    run_dir = out / setting / f"{arm}-seed{seed}"
    settings = overrides(args, setting, arm, seed, start)
    if args.finished_only and not finished(run_dir, settings):
        return None
    records = train(run_dir, settings, config=MINIWOB.get(setting, BASE))
    curve = [{"iteration": r["iteration"], "env_steps": r.get("env_steps", 0), "success": r["eval/success_rate"]}
             | {k.removeprefix("eval/success_rate/"): v for k, v in r.items() if k.startswith("eval/success_rate/")}
             for r in records if "eval/success_rate" in r]  # fmt: skip
    critics = [{"iteration": r["iteration"]} | {k: v for k, v in r.items() if k.startswith(
        ("digirl/curriculum_kept/", "digirl/p_instr/", "instruction_critic/", "step_critic/"))}
        for r in records if any(k.startswith("digirl/") for k in r)]  # fmt: skip
    groups = [{"iteration": r["iteration"]} | {k: v for k, v in r.items() if k in GROUP_COUNTS}
              for r in records if "grpo/groups" in r]  # fmt: skip
    return {"curve": curve, "final": curve[-1] if curve else {}, "episodes": solved_steps(run_dir),
            "critics": by_key(critics), **({"groups": by_key(groups)} if groups else {})}  # fmt: skip


def by_key(records: list[dict]) -> dict[str, list]:
    """Per-iteration records as one list per key (None where an iteration lacks the key): a results file holds dozens
    of runs of ~100 iterations, and the names written into every record took it past 5 MB."""
    return {key: [r.get(key) for r in records] for key in dict.fromkeys(k for r in records for k in r)}


# what must be equal for runs reported earlier to be reported beside new ones
PROTOCOL = ("policy", "env_steps", "rollout_size", "eval_every", "eval_episodes", "offline_iterations", "dataset",
            "start_episodes", "start_iterations", "start_lr", "start_p_right", "set")  # fmt: skip


def reported(path: Path, args, setting: str, start_eval: dict | None) -> tuple[dict, list[str], dict | None]:
    """The runs earlier calls wrote to `path`, by arm and seed, for `--add` (their run folders need not be here),
    the commands that ran them and the start's evaluation they reported. Refuses, naming what differs, when they
    were made under another protocol or from another start policy.

    The start is compared by its training, not its evaluation: where clicks slip or rewards are noisy, each env
    instance draws from its own stream, so which runner plays which episode changes an evaluation of the same
    weights (S3-slips' start: 0.450 to 0.490 in three trainings of one machine, losses equal to the last digit).
    Across machines the losses agree to float rounding."""
    if not path.exists():
        return {}, [], start_eval
    earlier = json.loads(path.read_text())
    differs = [k for k in PROTOCOL if earlier["settings"].get(k) != vars(args)[k]]
    if earlier["overrides"] != SETTINGS[setting]:
        differs.append(f"the overrides of {setting}")

    def same_training(new: dict | None, old: dict | None) -> bool:
        if new is None or old is None:
            return new is old  # no start (offline from scratch) on both sides
        return new["learner/samples"] == old["learner/samples"] and isclose(
            new["actor/loss"], old["actor/loss"], rel_tol=1e-5
        )

    if not same_training(start_eval, earlier["start"]):
        differs.append("the shared start's training")
    if differs:
        sys.exit(f"--add: {path} was made under other settings ({', '.join(differs)}); run without --add")
    runs = {arm: {int(seed): r for seed, r in by_seed.items()} for arm, by_seed in earlier["runs"].items()}
    commands = list(dict.fromkeys([*earlier.get("earlier_commands", []), earlier["command"]]))  # once each
    return runs, commands, earlier["start"]


def report(args, setting: str, runs: dict, start_eval: dict | None) -> None:
    """Write the setting's results JSON and plot: these runs, with --add beside those reported before."""
    name = f"synthweb_bench-{setting}{'-' + args.tag if args.tag else ''}"
    if args.add:  # the start point stays the one first reported
        earlier, commands, start_eval = reported(RESULTS / f"{name}.json", args, setting, start_eval)
    else:
        earlier, commands = {}, []
    runs = {a: dict(sorted((earlier.get(a, {}) | runs.get(a, {})).items()))
            for a in [*earlier, *(a for a in runs if a not in earlier)]}  # fmt: skip
    runs = {a: by_seed for a, by_seed in runs.items() if by_seed}  # --finished-only: an arm with none left out
    if not runs:
        print(f"{setting}: no finished run to report", flush=True)
        return
    start_point = (
        [{"iteration": 0, "env_steps_mean": 0.0} | interval([start_eval["eval/success_rate"]])] if start_eval else []
    )
    table = {a: [*start_point, *summarize(by_seed)] for a, by_seed in runs.items()}
    final = {a: interval([r["final"]["success"] for r in by_seed.values()]) for a, by_seed in runs.items()}
    for a, by_seed in runs.items():
        for key in ("wasted_per_solved", "train_wasted_per_solved", "named_link_share"):
            known = [w for r in by_seed.values() if (w := r["episodes"].get(key)) is not None]
            final[a][key] = interval(known) if known else None
        print(f"{setting} {a:>7}: {final[a]['mean']:.3f} [{final[a]['ci95'][0]:.3f}, {final[a]['ci95'][1]:.3f}]")
    plot(table, RESULTS / f"{name}.png")
    command = "python benchmarks/synthweb_bench.py " + " ".join(sys.argv[1:])
    result = {"command": command,
              "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
              "setting": setting, "overrides": SETTINGS[setting], "settings": vars(args), "at_budget": final,
              "start": start_eval, "earlier_commands": [c for c in commands if c != command],
              "table": table, "runs": {a: {str(k): r for k, r in b.items()} for a, b in runs.items()}}  # fmt: skip
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--settings", nargs="+", choices=sorted(SETTINGS), default=["S1"])
    p.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    p.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    p.add_argument("--policy", default="learned_pointer")
    p.add_argument("--env-steps", type=int, default=20000, help="training env steps per online run")
    p.add_argument("--rollout-size", type=int, default=32)
    p.add_argument("--eval-every", type=int, default=25, help="iterations between evaluations (online)")
    p.add_argument("--eval-episodes", type=int, default=200)
    p.add_argument("--offline-iterations", type=int, default=30)
    p.add_argument("--dataset", help="trajectory shards for the offline setting (S4)")
    p.add_argument("--start-episodes", type=int, default=300, help="scripted episodes the shared start learns from")
    p.add_argument("--start-iterations", type=int, default=2, help="offline filtered BC iterations of the start")
    p.add_argument("--start-lr", type=float, default=1e-2, help="the start's learning rate")
    p.add_argument("--start-p-right", type=float, default=1.0, help="how often the start's demonstrations are right")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="extra overrides for every run")
    p.add_argument("--tag", default="")
    p.add_argument(
        "--finished-only",
        action="store_true",
        help="report the runs that finished under these settings and start none (arms may differ in seeds)",
    )
    p.add_argument(
        "--add",
        action="store_true",
        help="report the runs already in the setting's results JSON beside these (same protocol and start; a "
        "run given here replaces the reported run of its arm and seed)",
    )
    args = p.parse_args()
    out = out_dir(args)
    for setting in args.settings:
        from_scratch = setting in OFFLINE and setting not in START_DATA
        start, start_eval = (None, None) if from_scratch else shared_start(args, out, setting)
        if start_eval:
            print(f"{setting} start policy: {start_eval['eval/success_rate']:.3f} greedy success", flush=True)
        if "DQ" in args.arms and start and not args.finished_only:
            prepare_digiq_data(args, setting, start)
        runs = {a: {s: r for s in args.seeds if (r := run(args, out, setting, a, s, start)) is not None}
                for a in args.arms}  # fmt: skip
        with results_lock():
            report(args, setting, runs, start_eval)


if __name__ == "__main__":
    main()
