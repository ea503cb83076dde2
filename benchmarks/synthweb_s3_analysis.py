"""What S3's write-up (benchmarks/README.md, "The synthweb bench, S3-noise") reads beside the bench's own results:
per run folder of a reward-noise setting, from its training trajectories (the env keeps the true result in
`outcome`; the reward holds the noise):

- how many failures end with a noisy reward above the actor's threshold (P3.2 expects 43% at sigma 0.3);
- what share of the transitions DigiRL's actor would imitate come from failures, with the run's own lambda and
  flat critics (the advantage is then lambda^k r_H, k steps before the end: `doubly_robust` with V = 0). Beside it,
  the step critic's last validation AUC (how near flat it was) and the actor transitions the learner logged an
  iteration over the run's last quarter (how much each arm imitates), with the share of them from failures; for
  filtered BC, the trajectories its filter kept and the share of those that failed, and its reward quantile
  recomputed over the run's history at each update (the non-successes it let in, checked against the logged count);
- in the run's last (greedy) evaluation, how often the step after a wrong click (the page stayed) clicks the same
  element again: a failure of S3 is mostly such repeats, so imitating failures teaches them;
- where clicks slip (S3-slips, S3-both), the share of steps that slipped, and of the steps of successes those
  whose wrong click a slip carried onto the named link (P3.8);
- steps beyond the task's depth per solved episode of the last evaluation, by depth (P3.12: a weaker policy
  solves a shallower mix, so the overall figure alone compares mixes);
- for GRPO, its rollout groups: the share whose members all ended alike over the run's first and last quarter
  (P3.11), and how many groups that failed whole had their task solved earlier in the run: what the replay of
  successes would have had to replay.

Runs that have not finished (no benchmark-overrides.json yet) are left out. With `--difference A B`, the
difference of arm A's mean minus arm B's over seeds (Welch's 95% interval) at each evaluation point of the bench's
results, and of the measures above, as the write-up's verdicts quote them. With `--noise-cost ARM ...`, each arm's
success on this setting minus the same arm's on `--clean` (P3.3 and P3.8: what the noise or the slips cost it). With
`--arms ARM ...`, only those arms' run folders are read again (reading every run takes minutes).

    python benchmarks/synthweb_s3_analysis.py runs/bench-synthweb/S3-noise --difference D-c S
    python benchmarks/synthweb_s3_analysis.py runs/bench-synthweb-read/S3-noise --difference D-c S  # --tag read
    python benchmarks/synthweb_s3_analysis.py runs/bench-synthweb-read/S3-noise --noise-cost D \
        --clean runs/bench-synthweb-read/S3-clean
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
from digirl_vs_filteredbc import RESULTS as BENCH_RESULTS
from digirl_vs_filteredbc import difference, results_lock
from synthweb_bench import per_solved

from rlsys.config import load_config
from rlsys.core.types import rollout_group
from rlsys.data.shards import read_trajectories
from rlsys.driver.metrics import read_metrics
from rlsys.envs.synthweb import FORWARD, build_site, path_page
from rlsys.learners.digirl.advantages import doubly_robust
from rlsys.learners.grpo.replay import replay_key
from rlsys.learners.selection import above_reward_quantile, failed

RESULTS = Path(__file__).parent / "results" / "synthweb_s3_analysis.json"


def run_summary(folder: Path) -> dict:
    cfg = load_config(str(folder / "config.yaml"))
    threshold, lam = cfg.learner.digirl.advantage_threshold, cfg.learner.digirl.lam
    trajectories = [t for t in read_trajectories(folder / "trajectories") if t.task.split == "train" and t.steps]
    failures = [t for t in trajectories if t.outcome != "success"]
    imitated = {"success": 0, "failure": 0}
    for t in trajectories:
        zeros = np.zeros(len(t.steps) + 1)
        advantages = doubly_robust([s.reward for s in t.steps], zeros[:-1], zeros[1:], lam)
        imitated["success" if t.outcome == "success" else "failure"] += int((advantages > threshold).sum())
    last_eval = read_trajectories(sorted((folder / "eval").glob("shard-*.parquet"))[-1])
    metrics = read_metrics(folder)
    aucs = [m["step_critic/validation_auc"] for m in metrics if m.get("step_critic/validation_auc") is not None]
    return {
        "lam": lam,
        "trajectories": len(trajectories),
        "train_success": 1 - len(failures) / len(trajectories),
        "failures_above_threshold": float(np.mean([t.reward > threshold for t in failures])),
        "flat_critic_imitated_from_failures": imitated["failure"] / max(1, sum(imitated.values())),
        **imitated_from_failures(metrics),
        **quantile_kept_non_successes(cfg, trajectories, metrics),
        **slips(cfg, trajectories),
        **rollout_groups(trajectories),
        "step_critic_validation_auc_last": aucs[-1] if aucs else None,
        "repeats_after_wrong_click_last_eval": repeats_after_wrong_click(last_eval),
        "wasted_per_solved_by_depth_last_eval": wasted_by_depth(last_eval),
    }


IMITATED = {  # what each learner logs it imitated, how much of that came from failures, and the name given here
    "digirl/actor_transitions": ("digirl/actor_failure_transitions", "actor_transitions_last_quarter"),
    "learner/selected_trajectories": ("learner/selected_failures", "selected_trajectories_last_quarter"),
}


def imitated_from_failures(metrics: list[dict]) -> dict:
    """How much the learner imitated an iteration over the run's last quarter, and the share of it from failures
    (over the iterations that logged it: runs older than the metric leave it out)."""
    for total, (from_failures, name) in IMITATED.items():
        rows = [m for m in metrics if m.get(total) is not None]
        if rows:
            last_quarter = rows[len(rows) * 3 // 4 :]
            logged = [m for m in last_quarter if from_failures in m]
            return {
                name: float(np.mean([m[total] for m in last_quarter])),
                "imitated_from_failures_last_quarter": (
                    sum(m[from_failures] for m in logged) / max(1, sum(m[total] for m in logged)) if logged else None
                ),
            }
    return {}


def quantile_kept_non_successes(cfg, trajectories: list, metrics: list[dict]) -> dict:
    """Filtered BC's reward quantile recomputed over the run's history before each update (its trajectories in
    the order they were collected, one iteration's worth more each update): how many non-successes it let in, over
    all updates, and at how many updates the recomputed kept count equals the one the learner logged."""
    if cfg.learner.algorithm != "filtered_bc" or cfg.learner.filter != "quantile":
        return {}
    logged = [m["learner/selected_trajectories"] for m in metrics if "learner/selected_trajectories" in m]
    rewards = np.array([t.reward for t in trajectories])
    non_success = np.array([failed(t) for t in trajectories])
    per_update = len(trajectories) // max(1, len(logged))
    kept = [above_reward_quantile(rewards[: per_update * (k + 1)], cfg.learner.quantile) for k in range(len(logged))]
    return {
        "quantile_kept_non_successes": int(sum((keep & non_success[: len(keep)]).sum() for keep in kept)),
        "quantile_kept_count_as_logged": float(  # the learner reads back at most sample_trajectories of them
            np.mean([min(int(keep.sum()), cfg.learner.sample_trajectories) == n for keep, n in zip(kept, logged)])
        ),
    }


def repeats_after_wrong_click(trajectories: list) -> float:
    """Of the steps that follow a click which left the page where it was, the share that click the same element.
    A click that slipped is not counted as wrong: clicking the named link again after its slip is right."""
    followed = repeated = 0
    for t in trajectories:
        page, wrong_click = 0, None
        for step in t.steps:
            if wrong_click is not None:
                followed += 1
                repeated += step.action_text == wrong_click
            stayed = step.info["synthweb"]["page"] == page and step.info.get("outcome") != "success"
            stayed = stayed and not step.info.get("slipped")
            wrong_click, page = (step.action_text if stayed else None), step.info["synthweb"]["page"]
    return repeated / max(followed, 1)


def slips(cfg, trajectories: list) -> dict:
    """Where the setting slips (P3.8): the share of training steps that slipped, and over the run's first and last
    quarter, the share of the steps of successes (what filtered BC imitates) whose chosen click was wrong but
    slipped onto the named link, so that it led on as if it had been right."""
    if not cfg.env.synthweb.slip_prob:
        return {}
    back_link = cfg.env.synthweb.back_link

    def carried(t) -> int:
        site, before, count = build_site(t.task.meta), {"page": 0, "detours": 0}, 0
        for step in t.steps:
            after, chosen = step.info["synthweb"], (step.action or {}).get("element")
            led_on = after["page"] > before["page"] or step.info.get("outcome") == "success"
            if step.info.get("slipped") and led_on and not before["detours"] and chosen is not None:
                kinds = path_page(site, before["page"], back_link).kinds
                count += chosen >= len(kinds) or kinds[chosen] != FORWARD
            before = after
        return count

    def share_carried(part: list) -> float | None:
        successes = [t for t in part if t.outcome == "success"]
        steps = sum(len(t.steps) for t in successes)
        return sum(carried(t) for t in successes) / steps if steps else None

    quarter = len(trajectories) // 4
    steps = [s for t in trajectories for s in t.steps]
    return {
        "slipped_steps": sum(bool(s.info.get("slipped")) for s in steps) / max(1, len(steps)),
        "success_steps_carried_by_a_slip_first_quarter": share_carried(trajectories[:quarter]),
        "success_steps_carried_by_a_slip_last_quarter": share_carried(trajectories[-quarter:]),
    }


def wasted_by_depth(trajectories: list) -> dict[str, float | None]:
    by_depth = defaultdict(list)
    for t in trajectories:
        if "depth" in t.task.meta:
            by_depth[int(t.task.meta["depth"])].append(t)
    return {str(d): per_solved(by_depth[d])["wasted_per_solved"] for d in sorted(by_depth)}


def rollout_groups(trajectories: list) -> dict:
    """A GRPO run's groups, in the order they were collected: the share whose members all ended alike (success or
    not, as the binary reward), over the first and last quarter, and of the groups that failed whole, how many
    played a task (as the replay of successes keys it) one of the run's earlier groups had solved. Nothing for runs
    without groups."""
    groups, tasks = defaultdict(list), {}
    for t in trajectories:
        if (group := rollout_group(t.task)) is not None:
            groups[group].append(t.outcome == "success")
            tasks[group] = replay_key(t.task)
    if not groups:
        return {}
    uniform = [len(set(outcomes)) == 1 for outcomes in groups.values()]
    quarter = len(uniform) // 4
    solved, failed_whole, solved_before = set(), 0, 0
    for group, outcomes in groups.items():
        if any(outcomes):
            solved.add(tasks[group])
        else:
            failed_whole += 1
            solved_before += tasks[group] in solved
    return {
        "groups": len(uniform),
        "distinct_group_tasks": len(set(tasks.values())),
        "uniform_groups": float(np.mean(uniform)),
        "uniform_groups_first_quarter": float(np.mean(uniform[:quarter])),
        "uniform_groups_last_quarter": float(np.mean(uniform[-quarter:])),
        "failed_whole_groups": failed_whole,
        "failed_whole_groups_solved_before": solved_before,
    }


def setting_name(folder: Path) -> str:
    """The setting as the bench's results name it: runs/bench-synthweb-read/S3-noise is S3-noise-read."""
    tag = folder.resolve().parent.name.removeprefix("bench-synthweb").lstrip("-")
    return folder.name + (f"-{tag}" if tag else "")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("setting_folder", type=Path, help="the bench's folder of one setting (its runs' parent)")
    parser.add_argument("--difference", nargs=2, metavar=("A", "B"), help="arm A minus arm B, over seeds")
    parser.add_argument("--noise-cost", nargs="+", metavar="ARM", help="each arm here minus the same arm on --clean")
    parser.add_argument("--clean", type=Path, help="the setting folder without the noise (with --noise-cost)")
    parser.add_argument("--arms", nargs="+", metavar="ARM", help="read these arms' runs only (the rest kept as saved)")
    args = parser.parse_args(argv)
    if args.noise_cost and not args.clean:
        parser.error("--noise-cost needs --clean, the folder of the same setting without noise")
    name, read = setting_name(args.setting_folder), {}
    for folder in sorted(d for d in args.setting_folder.glob("*-seed*") if (d / "benchmark-overrides.json").exists()):
        if args.arms and folder.name.rsplit("-seed", 1)[0] not in args.arms:
            continue
        read[folder.name] = summary = run_summary(folder)
        print(folder.name, json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in summary.items()}))
    save(args, name, read)


def save(args, name: str, read: dict) -> None:
    """Merge the runs just read into the saved results and write them back with what is computed from them,
    holding the results folder's lock from the read to the write (another analysis may be adding to the file)."""
    with results_lock(RESULTS.parent):
        results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        runs = dict(results.get(name, {})) if args.arms else {}  # with --arms, the other arms' saved summaries stay
        results[name] = runs = dict(sorted((runs | read).items()))
        if args.difference:
            results[f"{name}: {' - '.join(args.difference)}"] = found = differences(name, runs, *args.difference)
            print(json.dumps(found, indent=1))
        for arm in args.noise_cost or []:
            results[f"{name}: {arm} - {arm} on {setting_name(args.clean)}"] = found = noise_cost(name, args.clean, arm)
            print(arm, json.dumps(found, indent=1))
        RESULTS.write_text(json.dumps(results, indent=1) + "\n")


def differences(name: str, runs: dict, a: str, b: str) -> dict:
    """Arm a minus arm b at each evaluation point the bench reports (the last is each run's end), in first clicks
    on the named link, and in this script's measures."""
    bench = bench_runs(name)

    def runs_of(arm: str) -> list[dict]:
        return [r for folder, r in runs.items() if folder.startswith(f"{arm}-seed")]

    def measure(arm: str, key: str) -> list[float]:
        return [r[key] for r in runs_of(arm)]

    out = success_differences(list(bench[a].values()), list(bench[b].values()))
    for key in ("named_link_share", "wasted_per_solved"):  # the bench's own episode measures
        out[key] = difference(*([r["episodes"][key] for r in bench[arm].values()] for arm in (a, b)))
    for key in ("flat_critic_imitated_from_failures", "repeats_after_wrong_click_last_eval"):
        out[key] = difference(measure(a, key), measure(b, key))
    # runs summarised before this measure existed have none: a depth is compared where both arms have it
    by_depth = {arm: [r.get("wasted_per_solved_by_depth_last_eval", {}) for r in runs_of(arm)] for arm in (a, b)}
    per_depth = {d: [[w for seed in by_depth[arm] if (w := seed.get(d)) is not None] for arm in (a, b)]
                 for d in sorted({d for arm in (a, b) for seed in by_depth[arm] for d in seed}, key=int)}  # fmt: skip
    out["wasted_per_solved_by_depth"] = {d: difference(*arms) for d, arms in per_depth.items() if all(arms)}
    return out


def noise_cost(name: str, clean: Path, arm: str) -> dict:
    """The arm's success with the noise minus without it, at each evaluation point both settings reached."""
    noisy, quiet = (list(bench_runs(n)[arm].values()) for n in (name, setting_name(clean)))
    return {"seeds": [len(noisy), len(quiet)]} | success_differences(noisy, quiet)


def bench_runs(name: str) -> dict:
    """The bench's runs of a setting, by arm and seed, from its results JSON."""
    return json.loads((BENCH_RESULTS / f"synthweb_bench-{name}.json").read_text())["runs"]


def success_differences(a: list[dict], b: list[dict]) -> dict:
    """Runs a minus runs b in success at each evaluation point all of them reached, the last being each run's end."""
    points = min(len(r["curve"]) for r in a + b)

    def success(runs: list[dict], i: int) -> list[float]:
        return [r["curve"][i if i < points - 1 else -1]["success"] for r in runs]

    return {f"success, evaluation {i + 1}": difference(success(a, i), success(b, i)) for i in range(points)}


if __name__ == "__main__":
    main()
