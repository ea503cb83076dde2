"""Web env step latency on a local page: 1, 2 and 4 browsers stepping at once, where the time
of one static step goes, and a dynamic step (a 0.4 s fetch) against PAE's fixed 10 s sleep.

The pages of tests/site are served on 127.0.0.1 by this script, with /slow answering after
0.4 s. Each browser is one `WebEnv` in its own process (multiprocessing, spawn); all of them
start stepping together and cycle through static actions on actions.html: click "Say hello"
(a DOM change, no network), `Scroll [WINDOW]; [down]`, `Scroll [WINDOW]; [up]`.

    python benchmarks/web_step_latency.py --steps 100 --browsers 1 2 4
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import shutil
import statistics
import subprocess
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np

SITE_DIR = Path(__file__).resolve().parent.parent / "tests" / "site"
SLOW_S = 0.4  # what /slow takes to answer
PAE_SLEEP_S = 10.0  # PAE sleeps this long after every action, whatever the page does
WARMUP_STEPS = 6
STEP_PARTS = ("action", "new_tab_check", "settle_and_read_call", "screenshot_png", "draw_marks")
STATIC_ACTIONS = ("click hello", "Scroll [WINDOW]; [down]", "Scroll [WINDOW]; [up]")


# -- the site -------------------------------------------------------------------------------


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        path = self.path.split("?")[0]
        content_type = "text/html; charset=utf-8"
        if path == "/slow":
            time.sleep(SLOW_S)
            body, content_type = b"loaded slowly", "text/plain"
        else:
            file = SITE_DIR / (os.path.basename(path) or "actions.html")
            if not file.is_file():
                self.send_error(404)
                return
            body = file.read_bytes().replace(b"PORT", str(self.server.server_port).encode())
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def serve() -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}"


# -- one env --------------------------------------------------------------------------------


def make_env():
    from rlsys.config import EnvConfig, build
    from rlsys.envs.web.webenv import WebEnv

    env = {
        "kind": "web",
        "action_space": "pae",
        "viewport": [1024, 768],
        "max_steps": 100_000,
        "chromium": shutil.which("chromium"),
        "chromedriver": shutil.which("chromedriver"),
    }
    # the env section alone: a whole Config insists on the element space, which its tiny policy decodes with
    return WebEnv(build(EnvConfig, env, "env"))


def start_task(base_url: str):
    from rlsys.core.types import Task

    return Task(id="actions", instruction="benchmark", suite="webvoyager", start=f"{base_url}/actions.html")


def pae(action: str) -> str:
    return f"Thought: benchmark step.\nAction: {action}"


def index_of(elements: list[dict], text: str) -> int:
    return next(i for i, e in enumerate(elements) if text in e["text"])


def static_action(i: int, elements: list[dict]) -> str:
    action = STATIC_ACTIONS[i % len(STATIC_ACTIONS)]
    if action == "click hello":
        action = f"Click [{index_of(elements, 'Say hello')}]"
    return pae(action)


def static_steps(env, obs, steps: int) -> tuple[list[float], list[float], object]:
    """`steps` static steps; each step's wall time and in-page settle time (ms)."""
    latencies, settles = [], []
    for i in range(steps):
        t0 = time.perf_counter()
        result = env.step(static_action(i, obs.extras["elements"]))
        latencies.append((time.perf_counter() - t0) * 1000)
        obs = result.observation
        settles.append(obs.extras["settle_ms"])
        if not obs.extras["settled"]:
            raise RuntimeError(f"a static step did not settle: {obs.extras}")
    return latencies, settles, obs


def browser_worker(base_url: str, steps: int, barrier, queue) -> None:
    """One process, one browser: warm up, wait for the others, then step."""
    env = None
    try:
        env = make_env()
        obs = env.reset(start_task(base_url))
        obs = static_steps(env, obs, WARMUP_STEPS)[2]
        barrier.wait(timeout=300)
        start = time.monotonic()
        latencies, settles, _ = static_steps(env, obs, steps)
        queue.put({"start": start, "end": time.monotonic(), "latency_ms": latencies, "settle_ms": settles})
    except Exception as e:  # reported by the parent
        barrier.abort()
        queue.put({"error": f"{type(e).__name__}: {e}"})
    finally:
        if env is not None:
            env.close()


# -- measurements ---------------------------------------------------------------------------


def percentiles(values: list[float]) -> dict:
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {"p50": round(float(p50), 1), "p90": round(float(p90), 1), "p99": round(float(p99), 1)}


def concurrent_run(base_url: str, browsers: int, steps: int) -> dict:
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(browsers), ctx.Queue()
    procs = [ctx.Process(target=browser_worker, args=(base_url, steps, barrier, queue)) for _ in range(browsers)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        raise RuntimeError(f"{browsers} browser(s): {errors}")
    latencies = [x for r in results for x in r["latency_ms"]]
    settles = [x for r in results for x in r["settle_ms"]]
    seconds = max(r["end"] for r in results) - min(r["start"] for r in results)
    return {
        "browsers": browsers,
        "steps": len(latencies),
        "seconds": round(seconds, 2),
        "steps_per_s": round(len(latencies) / seconds, 2),
        "latency_ms": percentiles(latencies),
        "settle_ms": percentiles(settles),
        "load_avg_after": os.getloadavg()[0],
    }


def timed(call, reps: int) -> float:
    """Median wall time of `call()` in ms."""
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(times), 1)


@contextmanager
def instrumented(env):
    """Times the parts of each step from inside: wrappers on this env's own methods and on the
    draw_marks it calls, a few microseconds each; yields {part: [ms per step]}. A part's time
    excludes the parts it calls (the screenshot taken while the page settles is the screenshot's),
    and a part called twice in a step (a screenshot taken again) counts both calls."""
    import rlsys.envs.web.webenv as webenv

    timings: dict[str, list[float]] = {name: [] for name in STEP_PARTS}
    running: list[str] = []  # the parts being timed, innermost last

    def wrap(name, fn):
        def timed_call(*args, **kwargs):
            running.append(name)
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent = (time.perf_counter() - t0) * 1000
                running.pop()
                timings[name][-1] += spent
                if running:
                    timings[running[-1]][-1] -= spent

        return timed_call

    def step(action):
        for part in timings.values():
            part.append(0.0)
        return original_step(action)

    original_step, original_draw_marks = env.step, webenv.draw_marks
    env.step = step
    env._perform = wrap("action", env._perform)
    env._follow_or_close_new_tabs = wrap("new_tab_check", env._follow_or_close_new_tabs)
    env._settle_and_read = wrap("settle_and_read_call", env._settle_and_read)
    env.browser.screenshot_png = wrap("screenshot_png", env.browser.screenshot_png)
    webenv.draw_marks = wrap("draw_marks", original_draw_marks)
    try:
        yield timings
    finally:
        webenv.draw_marks = original_draw_marks
        for name in ("step", "_perform", "_follow_or_close_new_tabs", "_settle_and_read"):
            delattr(env, name)
        del env.browser.screenshot_png


def breakdown(env, base_url: str, steps: int, reps: int) -> dict:
    """One browser, static steps: where the time of a step goes, timed inside the steps, and the
    screenshot, the marks and a WebDriver round trip timed on their own."""
    from rlsys.envs.web.marks import draw_marks

    obs = env.reset(start_task(base_url))
    obs = static_steps(env, obs, WARMUP_STEPS)[2]
    with instrumented(env) as timings:
        latencies, settles, obs = static_steps(env, obs, steps)
    other = [total - sum(t[i] for t in timings.values()) for i, total in enumerate(latencies)]
    in_step = {name: round(statistics.median(t), 1) for name, t in timings.items()}
    in_step["settle_wait_in_page"] = round(statistics.median(settles), 1)  # part of settle_and_read_call
    in_step["other"] = round(statistics.median(other), 1)
    elements = obs.extras["elements"]
    png = env.browser.screenshot_png()
    alone = {
        "screenshot_png": timed(env.browser.screenshot_png, reps),
        "draw_marks": timed(lambda: draw_marks(png, elements), reps),
        "webdriver_round_trip": timed(lambda: env.driver.execute_script("return 1"), reps),
    }
    return {
        "steps": steps,
        "step_ms": percentiles(latencies),
        "in_step_median_ms": in_step,
        "alone_median_ms": alone,
        "elements": len(elements),
        "screenshot_bytes": len(png),
    }


def dynamic_run(env, base_url: str, reps: int) -> dict:
    """Click "Load slowly": the page fetches /slow (0.4 s) and then changes the DOM."""
    obs = env.reset(start_task(base_url))
    latencies, settles, loaded = [], [], 0
    for _ in range(reps):
        env.driver.execute_script("document.getElementById('out').textContent = 'nothing yet'")
        action = pae(f"Click [{index_of(obs.extras['elements'], 'Load slowly')}]")
        t0 = time.perf_counter()
        result = env.step(action)
        latencies.append((time.perf_counter() - t0) * 1000)
        obs = result.observation
        settles.append(obs.extras["settle_ms"])
        loaded += env.driver.execute_script("return document.getElementById('out').textContent") == "loaded slowly"
    # PAE's step: the same work without the settle wait, plus its fixed sleep
    overhead = statistics.median(t - s for t, s in zip(latencies, settles))
    return {
        "steps": reps,
        "latency_ms": percentiles(latencies),
        "settle_ms": percentiles(settles),
        "loaded_after_step": loaded,
        "overhead_without_wait_ms": round(overhead, 1),
        "pae_step_ms_computed": round(PAE_SLEEP_S * 1000 + overhead, 1),
        "speedup_vs_pae_at_p50": round((PAE_SLEEP_S * 1000 + overhead) / percentiles(latencies)["p50"], 1),
    }


def machine() -> dict:
    try:
        chromium = subprocess.run(
            [shutil.which("chromium"), "--version"], capture_output=True, text=True, timeout=30
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired, TypeError):
        chromium = "unknown"
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "chromium": chromium}


# -- report ---------------------------------------------------------------------------------


def print_report(results: dict) -> None:
    print("\nstatic page, all browsers stepping at once")
    print(f"{'browsers':>8}  {'p50 ms':>7}  {'p90 ms':>7}  {'p99 ms':>7}  {'steps/s':>7}  {'settle p50':>10}")
    for r in results["concurrent"]:
        lat = r["latency_ms"]
        print(
            f"{r['browsers']:>8}  {lat['p50']:>7}  {lat['p90']:>7}  {lat['p99']:>7}  "
            f"{r['steps_per_s']:>7}  {r['settle_ms']['p50']:>10}"
        )
    b = results["breakdown"]
    print(f"\none browser, static step p50 {b['step_ms']['p50']} ms; its parts (median ms, timed inside the steps):")
    for name, ms in b["in_step_median_ms"].items():
        print(f"  {name:<22} {ms:>7}")
    print("timed on their own (median ms): " + ", ".join(f"{k} {v}" for k, v in b["alone_median_ms"].items()))
    d = results["dynamic"]
    print(
        f"\ndynamic step (fetch of {SLOW_S} s): p50 {d['latency_ms']['p50']} p90 {d['latency_ms']['p90']} "
        f"p99 {d['latency_ms']['p99']} ms; loaded after the step {d['loaded_after_step']}/{d['steps']}"
    )
    print(
        f"PAE's step (computed: {PAE_SLEEP_S:.0f} s + our overhead without the wait, "
        f"{d['overhead_without_wait_ms']} ms) = {d['pae_step_ms_computed']} ms, "
        f"{d['speedup_vs_pae_at_p50']}x our median"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=100, help="static steps per browser")
    p.add_argument("--browsers", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--dynamic-steps", type=int, default=20)
    p.add_argument("--reps", type=int, default=30, help="repetitions of each part timed on its own")
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "web_step_latency.json"))
    args = p.parse_args()
    server, base_url = serve()
    results = {"machine": machine(), "load_avg_before": os.getloadavg()[0], "steps_per_browser": args.steps}
    try:
        results["concurrent"] = [concurrent_run(base_url, n, args.steps) for n in args.browsers]
        env = make_env()
        try:
            results["breakdown"] = breakdown(env, base_url, args.steps, args.reps)
            results["dynamic"] = dynamic_run(env, base_url, args.dynamic_steps)
        finally:
            env.close()
    finally:
        server.shutdown()
        server.server_close()
    results["load_avg_after"] = os.getloadavg()[0]
    print_report(results)
    Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
