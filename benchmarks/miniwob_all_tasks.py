"""Every MiniWoB++ task in one `MiniWoBEnv`: does its page load, take actions and give a reward?

Each task is reset with a fixed seed and played by a script that needs no model: step k acts on
element k (cycling through the elements of the current observation); `type [k] abc` when that
element is editable, `click [k]` otherwise. The episode ends when the page ends it (the task
judged it, or the page's own timer ran out) or at max_steps; after max_steps the script waits for
the page's timer to end the episode too. Errors are caught per task and reported; the browser is
restarted after EnvBrokenError, and a task that failed is tried once more in a fresh browser
(reported apart) to tell a broken task from a browser left broken by the tasks before it.

    python benchmarks/miniwob_all_tasks.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import time
from collections import Counter
from pathlib import Path

from rlsys.config import load_config
from rlsys.core.env import EnvBrokenError
from rlsys.envs.tasks import miniwob_task
from rlsys.envs.web.miniwob import MiniWoBEnv, available_tasks

PAGE_STATE = "return [WOB_DONE_GLOBAL, WOB_RAW_REWARD_GLOBAL, WOB_REWARD_REASON];"


def env_config(time_limit_s: float, max_steps: int):
    env = {
        "kind": "miniwob",
        "action_space": "element",
        "viewport": [400, 400],
        "max_steps": max_steps,
        "episode_time_limit_s": time_limit_s,
        "chromium": shutil.which("chromium"),
        "chromedriver": shutil.which("chromedriver"),
    }
    return load_config(None, data={"env": env}).env


def scripted_action(k: int, elements: list[dict]) -> str:
    if not elements:
        return "click [0]"  # nothing to act on: a recorded no-op (parse error) that still counts as a step
    i = k % len(elements)
    return f"type [{i}] abc" if elements[i].get("editable") else f"click [{i}]"


def play(env: MiniWoBEnv, name: str, seed: int, max_steps: int, wait_timer: bool) -> dict:
    """One scripted episode; fills in what it saw, raises what went wrong."""
    record: dict = {"loaded": False, "steps": 0, "parse_errors": 0, "action_errors": 0}
    obs = env.reset(miniwob_task(name, seed, "test"))
    record.update(loaded=True, elements_at_start=len(obs.extras["elements"]))
    result = None
    for k in range(max_steps):
        result = env.step(scripted_action(k, obs.extras["elements"]))
        obs = result.observation
        record["steps"] += 1
        record["parse_errors"] += bool(result.info.get("parse_error"))
        record["action_errors"] += bool(result.info.get("action_error"))
        if result.done:
            break
    done, raw_reward, reason = env.driver.execute_script(PAGE_STATE)
    record.update(
        outcome=result.info.get("outcome") if result else None,
        reward=result.reward if result else None,
        ended_by="page" if done else ("max_steps" if result and result.done else "not ended"),
        page_raw_reward=raw_reward,
        page_reason=reason or ("judged by the task" if done else None),
        settled_last_step=obs.extras["settled"],
    )
    if not done and wait_timer:
        record["page_timer_ended_it"] = wait_for_page_timer(env, env.cfg.episode_time_limit_s + 1.0)
    return record


def wait_for_page_timer(env: MiniWoBEnv, timeout_s: float) -> bool:
    """After max_steps: does the page's own timer still end the episode (with a reward)?"""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if env.driver.execute_script(PAGE_STATE)[0]:
            return True
        time.sleep(0.05)
    return False


def run_all(names: list[str], seed: int, time_limit_s: float, max_steps: int, wait_timer: bool) -> list[dict]:
    cfg = env_config(time_limit_s, max_steps)
    env = MiniWoBEnv(cfg)
    records = []
    try:
        for n, name in enumerate(names, 1):
            record, env = attempt(env, cfg, name, seed, max_steps, wait_timer)
            print(f"[{n}/{len(names)}] {describe(record)}", flush=True)
            if "error" in record:  # is it the task, or what came before it? Once more, in a fresh browser
                env = restart(env, cfg)
                record["retry_in_fresh_browser"], env = attempt(env, cfg, name, seed, max_steps, wait_timer)
                print(f"    retry in a fresh browser: {describe(record['retry_in_fresh_browser'])}", flush=True)
            records.append(record)
    finally:
        env.close()
    return records


def attempt(env: MiniWoBEnv, cfg, name: str, seed: int, max_steps: int, wait_timer: bool) -> tuple[dict, MiniWoBEnv]:
    """One task's record, and the env to go on with (a new one when this one broke)."""
    t0 = time.monotonic()
    record = {"task": name, "loaded": False, "steps": 0}
    try:
        record.update(play(env, name, seed, max_steps, wait_timer))
    except EnvBrokenError as e:
        record["error"] = f"EnvBrokenError: {first_lines(e)}"
        env = restart(env, cfg)
    except Exception as e:  # any other failure of this task is reported, not raised
        record["error"] = f"{type(e).__name__}: {first_lines(e)}"
    record["seconds"] = round(time.monotonic() - t0, 2)
    return record, env


def first_lines(error: Exception) -> str:
    """The message without Selenium's stack trace of addresses."""
    return str(error).split("\nStacktrace:")[0].strip()


def restart(env: MiniWoBEnv, cfg) -> MiniWoBEnv:
    try:
        env.close()
    except Exception:
        pass
    return MiniWoBEnv(cfg)


def describe(r: dict) -> str:
    if "error" in r:
        return f"{r['task']}: ERROR {r['error'][:150]}"
    timer = {True: ", then the page timer ended it", False: ", page timer never fired"}.get(
        r.get("page_timer_ended_it"), ""
    )
    return (
        f"{r['task']}: {r['steps']} steps, {r['outcome']} (ended by {r['ended_by']}"
        f"{', ' + r['page_reason'] if r['ended_by'] == 'page' else ''}), "
        f"reward {r['reward']}{timer}, {r['seconds']} s"
    )


def rewarded(record: dict) -> bool:
    return "error" not in record and record.get("ended_by") in ("page", "max_steps")


def summarise(records: list[dict]) -> dict:
    loaded = [r for r in records if r["loaded"]]
    final = [r.get("retry_in_fresh_browser", r) for r in records]  # the retry where there was one
    return {
        "tasks": len(records),
        "loaded": len(loaded),
        "gave_a_reward": sum(rewarded(r) for r in records),
        "loaded_counting_retries": sum(r["loaded"] for r in final),
        "gave_a_reward_counting_retries": sum(rewarded(r) for r in final),
        "ended_by": dict(Counter(r.get("ended_by", "error") for r in records)),
        "outcomes": dict(Counter(r.get("outcome") or "error" for r in records)),
        "page_reasons": dict(Counter(r["page_reason"] for r in loaded if r.get("ended_by") == "page")),
        "max_steps_then_page_timer_ended_it": sum(r.get("page_timer_ended_it") is True for r in records),
        "max_steps_page_timer_never_fired": [r["task"] for r in records if r.get("page_timer_ended_it") is False],
        "successes": sum(r.get("reward") == 1.0 for r in records),
        "failed": {r["task"]: r["error"] for r in records if "error" in r},
        "failed_then_ok_in_a_fresh_browser": [
            r["task"] for r in records if "error" in r and "error" not in r["retry_in_fresh_browser"]
        ],
        "failed_in_a_fresh_browser_too": {
            r["task"]: r["retry_in_fresh_browser"]["error"]
            for r in records
            if "error" in r and "error" in r["retry_in_fresh_browser"]
        },
        "seconds": round(sum(r["seconds"] for r in records), 1),  # first attempts
        "median_seconds_per_task": sorted(r["seconds"] for r in records)[len(records) // 2],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--time-limit", type=float, default=3.0, help="the page's episode timer (s)")
    p.add_argument("--max-steps", type=int, default=10)
    p.add_argument("--no-wait-timer", action="store_true", help="after max_steps, do not wait for the page's timer")
    p.add_argument("--tasks", nargs="*", help="default: all of available_tasks()")
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "miniwob_all_tasks.json"))
    args = p.parse_args()
    names = args.tasks or available_tasks()
    t0 = time.monotonic()
    records = run_all(names, args.seed, args.time_limit, args.max_steps, not args.no_wait_timer)
    summary = summarise(records)
    summary["wall_seconds"] = round(time.monotonic() - t0, 1)
    print(json.dumps({k: v for k, v in summary.items() if not k.startswith("failed")}, indent=1))
    for name, error in summary["failed"].items():
        print(f"FAILED {name}: {error}")
    print(f"ok on a retry in a fresh browser: {summary['failed_then_ok_in_a_fresh_browser']}")
    print(f"failed in a fresh browser too: {summary['failed_in_a_fresh_browser_too']}")
    settings = {"seed": args.seed, "time_limit_s": args.time_limit, "max_steps": args.max_steps, "viewport": [400, 400]}
    machine = {"cpus": os.cpu_count(), "python": platform.python_version()}
    out = {"machine": machine, "settings": settings, "summary": summary, "tasks": records}
    Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
