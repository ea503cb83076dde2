"""MiniWoB++ step latency against the floor: how much longer does `MiniWoBEnv.step` take than a bare loop that
does only what a step must (act over DevTools, wait until the page is idle, one screenshot, one element list;
web_floor.py defines it), on the same task pages, in the same browser, in the same run?

Each task is reset with a fixed seed and played for --steps steps by a script that keeps the episode going: step k
clicks the k-th element (cycling) of those listed that are no button, so no Submit, OK or Close ends it (the
default tasks are ones where that holds; a task that ends all the same is reported, and its walk stops there). The
page's episode timer is set long enough not to end it either. Then the floor clicks the same points on the same page,
one step each: a click's viewport point is where the env clicked the element (its "point", else its box's centre,
from the observed task area drawn `task_area_scale` times as large back into the viewport, as `WebEnv._centre`
does). The floor never reloads the page, which would end the task's episode. The commands each env step sends are
counted too, through chromedriver and over the browser's own DevTools connection (web_real_pages.count_commands).

    python benchmarks/miniwob_floor.py --steps 10 --seed 0
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
from miniwob_all_tasks import env_config, first_lines
from web_floor import Floor, timed
from web_real_pages import CHANNELS, count_commands, percentiles
from web_step_latency import machine

from rlsys.envs.tasks import miniwob_task
from rlsys.envs.web.miniwob import MiniWoBEnv, available_tasks
from rlsys.envs.web.webenv import viewport_point

# Click and type tasks whose page loads and lists elements other than buttons, none of which ends the episode
# when clicked (checked with this script's own walk: "ended_at_step" stays null).
DEFAULT_TASKS = (
    "book-flight",
    "choose-date",
    "click-checkboxes",
    "click-checkboxes-large",
    "click-checkboxes-soft",
    "click-checkboxes-transfer",
    "click-option",
    "click-scroll-list",
    "email-inbox",
    "enter-password",
    "enter-text",
    "enter-text-2",
    "form-sequence",
    "form-sequence-2",
    "guess-number",
    "login-user",
    "search-engine",
    "use-autocomplete",
    "use-colorwheel",
    "use-spinner",
)
TARGET_RATIO_P50 = 1.3


def clickable(elements: list[dict]) -> list[int]:
    """The listed elements the script clicks: any but a button (which would submit or close the task)."""
    return [i for i, e in enumerate(elements) if e.get("tag") != "button"]


def timed_click(env: MiniWoBEnv, index: int):
    t0 = time.perf_counter()
    result = env.step(f"click [{index}]")
    return result, round((time.perf_counter() - t0) * 1000, 1)


def env_walk(env: MiniWoBEnv, name: str, seed: int, steps: int, record: dict) -> list[tuple[float, float]]:
    """The env's timed steps on one task; the viewport points it clicked, for the floor."""
    obs = env.reset(miniwob_task(name, seed, "test"))
    points = []
    for k in range(steps):
        targets = clickable(obs.extras["elements"])
        if not targets:
            record["stopped"] = "no element to click"
            break
        index = targets[k % len(targets)]
        points.append(viewport_point(obs.extras["elements"][index], env.area, env.scale))
        result, ms, commands = count_commands(env, timed_click, index)
        record["env_ms"].append(ms)
        for channel in CHANNELS:
            record[f"{channel}_commands"].append(commands[channel])
        obs = result.observation
        if result.done:
            record["ended_at_step"] = k + 1
            break
    return points


def floor_walk(env: MiniWoBEnv, points: list[tuple[float, float]], record: dict) -> None:
    """The floor's clicks at the env's points, on the page the env left (a fresh DevTools session: the task's
    tab is the env's current one)."""
    floor = Floor(env.browser, env.cfg.settle_quiet_ms, env.cfg.settle_timeout_s)
    try:
        for x, y in points:
            _, ms = timed(floor.click, x, y)
            record["floor_ms"].append(ms)
    finally:
        floor.close()


def run_task(env: MiniWoBEnv, name: str, seed: int, steps: int) -> dict:
    record = {"task": name, "env_ms": [], "floor_ms": [], "ended_at_step": None}
    record |= {f"{channel}_commands": [] for channel in CHANNELS}
    try:
        points = env_walk(env, name, seed, steps, record)
        floor_walk(env, points, record)
    except Exception as e:  # reported with the task; the next task starts with a reset
        record["error"] = f"{type(e).__name__}: {first_lines(e)[:300]}"
    return record


# -- summaries ------------------------------------------------------------------------------


def summarise(records: list[dict]) -> dict:
    env = percentiles([ms for r in records for ms in r["env_ms"]])
    floor = percentiles([ms for r in records for ms in r["floor_ms"]])
    ratio = None
    if env and floor:
        ratio = {q: round(env[q] / floor[q], 2) for q in ("p50", "p90")}
    return {
        "env_step_ms": env,
        "floor_step_ms": floor,
        "ratio_to_floor": ratio,
        **{f"{channel}_commands": command_summary(records, channel) for channel in CHANNELS},
    }


def command_summary(records: list[dict], channel: str) -> dict:
    """The commands the env sent on one channel per step: the median count, and the mean of each command."""
    commands = [c for r in records for c in r[f"{channel}_commands"]]
    by_command = Counter()
    for c in commands:
        by_command.update(c)
    return {
        "step_p50": float(np.median([sum(c.values()) for c in commands])) if commands else None,
        "by_command": {name: round(n / len(commands), 2) for name, n in by_command.most_common()},
    }


def print_report(results: dict) -> None:
    print(f"\n{'task':<26} {'env p50/p90':>12} {'floor p50/p90':>14} {'x p50':>6} {'x p90':>6}")
    for name, s in [*results["tasks"].items(), ("overall", results["overall"])]:
        env, floor, ratio = s["env_step_ms"], s["floor_step_ms"], s["ratio_to_floor"]
        shown = [f"{d['p50']:.0f}/{d['p90']:.0f}" if d else "-" for d in (env, floor)]
        ratios = [f"{ratio[q]:.2f}" if ratio else "-" for q in ("p50", "p90")]
        print(f"{name:<26} {shown[0]:>12} {shown[1]:>14} {ratios[0]:>6} {ratios[1]:>6}")
    overall = results["overall"]
    print()
    for channel, label in (("webdriver", "WebDriver"), ("devtools", "DevTools (the env's own connection)")):
        commands = overall[f"{channel}_commands"]
        if commands["by_command"]:
            print(
                f"{label} commands per env step p50 {commands['step_p50']:g}: "
                + ", ".join(f"{name} {n:g}" for name, n in commands["by_command"].items())
            )
    ratio = overall["ratio_to_floor"]
    if ratio:
        verdict = "met" if ratio["p50"] <= TARGET_RATIO_P50 else "not met"
        print(f"target: env step p50 <= {TARGET_RATIO_P50}x the floor's: {ratio['p50']}x, {verdict}")
    for name, problem in results["problems"].items():
        print(f"{name}: {problem}")


def problems(records: list[dict]) -> dict[str, str]:
    found = {}
    for r in records:
        if "error" in r:
            found[r["task"]] = r["error"]
        elif r["ended_at_step"] is not None:
            found[r["task"]] = f"the episode ended at step {r['ended_at_step']}"
        elif "stopped" in r:
            found[r["task"]] = r["stopped"]
    return found


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", nargs="+", help="default: a fixed list of 20 click and type tasks")
    p.add_argument("--steps", type=int, default=10, help="env steps per task, and as many floor steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "miniwob_floor.json"))
    args = p.parse_args()
    names = args.tasks or list(DEFAULT_TASKS)
    unknown = sorted(set(names) - set(available_tasks()))
    if unknown:
        raise SystemExit(f"no such MiniWoB++ tasks: {unknown}")
    # a page timer far beyond the walk, so that only a click could end an episode
    cfg = env_config(time_limit_s=600.0, max_steps=args.steps + 1)
    t0, load_before = time.monotonic(), os.getloadavg()[0]
    env = MiniWoBEnv(cfg)
    records = []
    try:
        for name in names:
            record = run_task(env, name, args.seed, args.steps)
            records.append(record)
            env_p, floor_p = percentiles(record["env_ms"]), percentiles(record["floor_ms"])
            print(
                f"{name}: env p50 {env_p['p50'] if env_p else '-'} ms, floor p50 {floor_p['p50'] if floor_p else '-'}"
                f" ms ({len(record['env_ms'])} steps){'; ' + record['error'][:150] if 'error' in record else ''}",
                flush=True,
            )
    finally:
        env.close()
    results = {
        "command": shlex.join(["python", "benchmarks/miniwob_floor.py", *sys.argv[1:]]),
        "machine": machine(),
        "seconds": round(time.monotonic() - t0, 1),
        "load_avg_before": load_before,
        "load_avg_after": os.getloadavg()[0],
        "settings": {
            "seed": args.seed,
            "steps": args.steps,
            "viewport": cfg.viewport,
            "task_area_scale": cfg.task_area_scale,
            "settle_quiet_ms": cfg.settle_quiet_ms,
        },
        "target": {"ratio_to_floor_p50_at_most": TARGET_RATIO_P50},
        "overall": summarise(records),
        "tasks": {r["task"]: summarise([r]) for r in records},
        "problems": problems(records),
        "records": records,
    }
    print_report(results)
    Path(args.out).write_text(json.dumps(results, indent=1))
    print(f"\nwrote {args.out} ({results['seconds']} s)")


if __name__ == "__main__":
    main()
