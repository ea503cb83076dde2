"""What S4's write-up (benchmarks/README.md, "The synthweb bench, S4") reads beside the bench's own results:

- how often a path page shows a distractor whose words all occur in the instruction (S1, S2, S4; a policy that
  matches words one by one cannot tell it from the named link);
- whether the S4 dataset holds the information DigiRL's step critic should learn: success from a detour page
  against a page of the path, and the log-loss of a table over (pages left, steps left) against a constant
  (in-sample: at most 15 x 11 cells, twice that with the detour flag, over ~50k states);
- per S4 run folder (the bench's, its clean-data controls', S4-long's and S4-read's with its start): the
  first-click share at every evaluation, split at the first and last by whether the page shows such a
  look-alike, the actor's first and last loss, and what DigiRL's curriculum kept at its last actor iteration;
- what an in-sample critic of the dataset's discounted returns makes of the named link, a wrong one and `Back`
  (Digi-Q's advantage at its gamma, against its threshold), and a Digi-Q run's critic loss and Best-of-N's choices.

    python benchmarks/synthweb_s4_analysis.py --dataset runs/synthweb-s4-data
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from synthweb_bench import BASE, SETTINGS, first_clicks, named_link_share

from rlsys.config import load_config
from rlsys.data.shards import read_trajectories
from rlsys.envs.synthweb import build_site, suite_tasks
from rlsys.learners.selection import is_validation
from rlsys.policies.pointing import elements_of, parse_action

RESULTS = Path(__file__).parent / "results" / "synthweb_s4_analysis.json"


def bag_of_words_ties(setting: str) -> float:
    """The share of a setting's path pages (held-out split, solvable pages) where some distractor's words all
    occur in the instruction."""
    cfg = load_config(BASE, overrides=SETTINGS[setting])
    pages = tied = 0
    for task in suite_tasks(cfg.tasks.synthweb, "heldout"):
        site = build_site(task.meta)
        for page, right in enumerate(site.right):
            if right is not None:
                pages += 1
                tied += has_lookalike(site, page)
    return tied / pages


def has_lookalike(site, page: int) -> bool:
    """Whether a distractor on this page of the path has all its words in the instruction."""
    words = set(re.findall(r"[a-z]+", site.instruction.lower()))
    right = site.right[page]
    return any(set(link.split()) <= words for k, link in enumerate(site.links[page]) if k != right)


def first_clicks_by_lookalike(trajectories: list) -> dict:
    """`named_link_share` on the path pages without a look-alike distractor and on those with one."""
    named, sites = {False: [], True: []}, {}
    for t, page, right in first_clicks(trajectories):
        if t.task.id not in sites:  # a task's pages are visited many times
            sites[t.task.id] = build_site(t.task.meta)
        named[has_lookalike(sites[t.task.id], page)].append(right)
    return {key: sum(named[tied]) / len(named[tied]) if named[tied] else None
            for key, tied in (("without_lookalike", False), ("with_lookalike", True))}  # fmt: skip


def _log_loss(p: float, y: bool) -> float:
    p = min(max(p, 1e-3), 1 - 1e-3)
    return -math.log(p if y else 1 - p)


def walk(t) -> Iterator[tuple[int, object, dict, dict]]:
    """Each step of a synthweb trajectory with where it was taken (`page`, `detours`) and where it led."""
    before = {"page": 0, "detours": 0}
    for i, step in enumerate(t.steps):
        after = step.info["synthweb"]
        yield i, step, before, after
        before = after


def discounted_return(t, i: int, gamma: float) -> float:
    """The trajectory's reward (1 for a success) discounted from step `i` to its last."""
    return float(t.outcome == "success") * gamma ** (len(t.steps) - i - 1)


def dataset_values(folder: Path, max_steps: int) -> dict:
    """Success from each state of the dataset, by where the state is, and how well where it is predicts it."""
    states = []  # (succeeded, in a detour, pages left, steps left)
    for shard in sorted(folder.glob("shard-*.parquet")):
        for t in read_trajectories(shard):
            depth, solved = int(t.task.meta["depth"]), t.outcome == "success"
            for i, _, before, _ in walk(t):
                states.append((solved, before["detours"] > 0, depth - before["page"], max_steps - i))

    def table_loss(key) -> float:
        cells = defaultdict(lambda: [0, 0])
        for y, *where in states:
            cells[key(*where)][0] += y
            cells[key(*where)][1] += 1
        return sum(_log_loss(cells[key(*w)][0] / cells[key(*w)][1], y) for y, *w in states) / len(states)

    def success_where(detour: bool) -> float:
        ys = [y for y, d, *_ in states if d == detour]
        return sum(ys) / len(ys)

    def progress(left: int, steps: int) -> tuple:
        return min(left, 16), min(steps // 3, 10)

    return {"states": len(states), "success_from_path": success_where(False),
            "success_from_detour": success_where(True),
            "log_loss_constant": table_loss(lambda d, left, steps: ()),
            "log_loss_detour": table_loss(lambda d, left, steps: (d,)),
            "log_loss_pages_and_steps_left": table_loss(lambda d, left, steps: progress(left, steps)),
            "log_loss_all_three": table_loss(lambda d, left, steps: (d, *progress(left, steps)))}  # fmt: skip


def dataset_advantages(folder: Path, gamma: float, threshold: float) -> dict:
    """What an in-sample critic of the dataset's discounted returns (Digi-Q's, at its gamma) makes of each kind of
    action: by pages left on a path page, the mean return after the named link and after a wrong one less the
    mean over both (the page's value under the data policy); on a detour page, `Back` against going deeper. And
    the share of path steps where the named link's advantage so computed exceeds Digi-Q's threshold."""
    returns = defaultdict(lambda: defaultdict(list))  # where -> kind -> discounted returns
    for shard in sorted(folder.glob("shard-*.parquet")):
        for t in read_trajectories(shard):
            if t.task.meta.get("impossible"):
                continue
            depth = int(t.task.meta["depth"])
            for i, step, before, after in walk(t):
                g = discounted_return(t, i, gamma)
                if before["detours"]:
                    returns["detour"]["back" if after["detours"] < before["detours"] else "deeper"].append(g)
                else:
                    on = step.info.get("outcome") == "success" or after["page"] > before["page"]
                    returns[depth - before["page"]]["named" if on else "wrong"].append(g)

    def advantages(kinds: dict) -> dict:
        value = sum(map(sum, kinds.values())) / sum(map(len, kinds.values()))
        return {"steps": sum(map(len, kinds.values()))} | {f"a_{k}": sum(g) / len(g) - value for k, g in kinds.items()}

    path = {left: advantages(returns[left]) for left in sorted(k for k in returns if k != "detour")}
    above = sum(a["steps"] for a in path.values() if a["a_named"] > threshold)
    return {"gamma": gamma, "threshold": threshold, "path_by_pages_left": path,
            "detour": advantages(returns["detour"]),
            "path_steps_named_above_threshold": above / sum(a["steps"] for a in path.values())}  # fmt: skip


def run_summary(run_dir: Path) -> dict:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line]
    losses = [r["actor/loss"] for r in records if "actor/loss" in r]
    actor = [r for r in records if r.get("digirl/stage") == "actor"]
    evaluations = [read_trajectories(shard) for shard in sorted((run_dir / "eval").glob("shard-*.parquet"))]
    return {
        "first_clicks_right": [named_link_share(trajectories) for trajectories in evaluations],
        "first_clicks_right_first_last": [first_clicks_by_lookalike(evaluations[i]) for i in (0, -1)],
        "success": [r["eval/success_rate"] for r in records if "eval/success_rate" in r],
        "actor_loss_first_last": [losses[0], losses[-1]] if losses else None,
        **({"curriculum_trajectories": actor[-1].get("digirl/curriculum_trajectories"),
            "actor_transitions": actor[-1].get("digirl/actor_transitions")} if actor else {}),
        **digiq_summary(records),
        **({"critic_scores": critic_scores(run_dir / "scored", run_dir / "config.yaml")}
           if (run_dir / "scored").is_dir() else {}),
    }  # fmt: skip


def critic_scores(scored: Path, config: Path) -> dict:
    """What a Digi-Q run's finished critic (its `scored/` shards: Q, V and A = Q - V of every candidate of every
    step) makes of the named link against a wrong one on pages of the path, and of `Back` on detour pages; how
    often a step's best advantage clears 0, half the threshold and the threshold; and how much of the variance of
    the discounted return its Q of the dataset's action explains on the held-out trajectories (R^2; 0 is a
    constant's)."""
    digiq = load_config(str(config)).learner.digiq
    gamma, threshold = digiq.gamma, digiq.advantage_threshold
    a = defaultdict(list)  # kind of candidate -> advantages
    best_named, named_share, above, q_vs_return = [], [], defaultdict(list), []
    for t in read_trajectories(scored):
        site, held_out = build_site(t.task.meta), is_validation(t, digiq.validation_fraction)
        for i, step, before, _ in walk(t):
            d, texts = step.info["digiq"], {e.index: e.text for e in elements_of(step.observation)}
            targets = [texts.get(p[1]) if (p := parse_action(c)) else None for c in d["candidates"]]
            if held_out:
                q_vs_return.append((d["q"][0], discounted_return(t, i, gamma)))
            for level in (0.0, threshold / 2, threshold):
                above[level].append(max(d["advantage"]) > level)
            if before["detours"]:
                for target, adv in zip(targets, d["advantage"]):
                    a["back" if target == "Back" else "deeper"].append(adv)
            elif not t.task.meta.get("impossible"):
                named = site.links[before["page"]][site.right[before["page"]]]
                kinds = ["named" if target == named else "wrong" for target in targets]
                for kind, adv in zip(kinds, d["advantage"]):
                    a[kind].append(adv)
                if "named" in kinds:
                    best_named.append(kinds[d["best"]] == "named")
                    named_share.append(kinds.count("named") / len(kinds))  # a best chosen at random: named this often
    q, g = np.array(q_vs_return).T
    return {"mean_advantage": {k: float(np.mean(v)) for k, v in a.items()},
            "best_is_named_link": float(np.mean(best_named)), "named_share_of_candidates": float(np.mean(named_share)),
            "steps_best_advantage_above": {str(level): float(np.mean(v)) for level, v in above.items()},
            "held_out_r2_of_q": float(1 - np.mean((q - g) ** 2) / np.var(g))}  # fmt: skip


def digiq_summary(records: list[dict]) -> dict:
    """A Digi-Q run's critic (validation loss, first and last) and what Best-of-N kept at its last actor iteration."""
    critic = [r["critic/validation_loss"] for r in records if r.get("digiq/stage") == "critic" and
              "critic/validation_loss" in r]  # fmt: skip
    actor = [r for r in records if r.get("digiq/stage") == "actor"]
    if not actor:
        return {}
    last = actor[-1]
    return {"critic_validation_loss_first_last": [critic[0], critic[-1]] if critic else None,
            "promising_share": last["digiq/promising_states"] / last["digiq/actor_states"],
            **{k.removeprefix("digiq/"): last.get(k) for k in ("digiq/kept_fraction", "digiq/best_is_dataset_action",
                                                                "digiq/best_advantage")}}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, required=True, help="S4's dataset (benchmarks/synthweb_dataset.py)")
    parser.add_argument("--runs", type=Path, default=Path("runs"), help="where the bench's run folders are")
    args = parser.parse_args()
    cfg = load_config(BASE, overrides=SETTINGS["S4"])
    max_steps, digiq = cfg.env.max_steps, cfg.learner.digiq
    result = {
        "command": "python benchmarks/synthweb_s4_analysis.py --dataset " + str(args.dataset),
        "bag_of_words_ties": {s: bag_of_words_ties(s) for s in ("S1", "S2", "S4")},
        "dataset": dataset_values(args.dataset, max_steps),
        "dataset_advantages": dataset_advantages(args.dataset, digiq.gamma, digiq.advantage_threshold),
        # runs whose folders are not here stay as summarised before
        "runs": json.loads(RESULTS.read_text())["runs"] if RESULTS.exists() else {},
    }  # fmt: skip
    here = [d for d in sorted(args.runs.glob("bench-synthweb*/S4*/*")) if (d / "metrics.jsonl").exists()]
    result["runs"] |= {str(d.relative_to(args.runs)): run_summary(d) for d in here}
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=1))


if __name__ == "__main__":
    main()
