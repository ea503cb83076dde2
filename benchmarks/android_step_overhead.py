"""Android env overhead per step above the adb calls it makes, on the fake device.

A fake emulator (tests/fake_android, a separate process serving the adb device protocol at
1080x2280) is attached to a real adb server on a private port; one `AndroidEnv` in this process
cycles through tap, type, swipe and back actions. Every step reports the time spent inside adb
calls (screenshots and input) and the step's total; the overhead is parse + frame decode +
comparison + downscale + PNG encode. Also: what one raw screenshot costs, and one `screencap -p`.

    python benchmarks/android_step_overhead.py --steps 60
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ACTIONS = [
    'Action Decision: "action_type": "DUAL_POINT", "touch_point": "[0.3, 0.5]", "lift_point": "[0.3, 0.5]", '
    '"typed_text": ""',
    'Action Decision: "action_type": "TYPE", "touch_point": "[-1.0, -1.0]", "lift_point": "[-1.0, -1.0]", '
    '"typed_text": "50% off & free"',
    'Action Decision: "action_type": "DUAL_POINT", "touch_point": "[0.8, 0.5]", "lift_point": "[0.2, 0.5]", '
    '"typed_text": ""',
    'Action Decision: "action_type": "PRESS_BACK", "touch_point": "[-1.0, -1.0]", "lift_point": "[-1.0, -1.0]", '
    '"typed_text": ""',
]


def start_fake_emulator(adb_port: int, console_port: int, home: str) -> subprocess.Popen:
    env = {**os.environ, "ANDROID_ADB_SERVER_PORT": str(adb_port), "HOME": home, "FAKE_EMULATOR_BOOT_S": "0.2"}
    argv = [sys.executable, str(ROOT / "tests/fake_android/emulator.py"), "-avd", "rlsys_pixel_28"]
    return subprocess.Popen([*argv, "-port", str(console_port)], env=env)


def measure(env, steps: int) -> dict:
    from rlsys.core.types import Task

    env.reset(Task("bench:1", "benchmark", "aitw-general", start="home"))
    rows = [env.step(ACTIONS[i % len(ACTIONS)]).info["timing"] for i in range(steps)]
    env_s = [r["env_s"] for r in rows]
    adb_s = [r["adb_s"] for r in rows]
    overhead = [(e - a) / a for e, a in zip(env_s, adb_s)]
    return {
        "step_s_p50": round(statistics.median(env_s), 4),
        "adb_s_p50": round(statistics.median(adb_s), 4),
        "overhead_s_p50": round(statistics.median(e - a for e, a in zip(env_s, adb_s)), 4),
        "overhead_fraction_p50": round(statistics.median(overhead), 4),
        "overhead_fraction_mean": round(sum(e - a for e, a in zip(env_s, adb_s)) / sum(adb_s), 4),
        "adb_calls_per_step": round(env.device.adb_calls / (steps + 1), 2),
    }


def screenshot_costs(device, repeats: int = 10) -> dict:
    from rlsys.envs.android.env import encode_png

    raw, png, encode = [], [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        screen = device.screen()
        t1 = time.perf_counter()
        encode_png(screen.rgba, 0.5)
        t2 = time.perf_counter()
        device.exec_out(["screencap", "-p"])
        t3 = time.perf_counter()
        raw.append(t1 - t0)
        encode.append(t2 - t1)
        png.append(t3 - t2)
    return {
        "raw_frame_s_p50": round(statistics.median(raw), 4),
        "downscale_png_encode_s_p50": round(statistics.median(encode), 4),
        "screencap_png_s_p50_fake": round(statistics.median(png), 4),
    }


def main() -> None:
    import adbutils

    from rlsys.config import AndroidConfig, EnvConfig
    from rlsys.envs.android.emulator import Lease
    from rlsys.envs.android.env import AndroidEnv

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--adb-port", type=int, default=5199)
    p.add_argument("--console-port", type=int, default=5680)
    p.add_argument("--out", default=str(ROOT / "benchmarks/results/android_step_overhead.json"))
    args = p.parse_args()

    adb = adbutils.adb_path()
    subprocess.run([adb, "-P", str(args.adb_port), "start-server"], check=True, capture_output=True)
    home = tempfile.mkdtemp()
    emulator = start_fake_emulator(args.adb_port, args.console_port, home)
    serial = f"emulator-{args.console_port}"
    results = {"machine": f"{platform.machine()}, {os.cpu_count()} cores", "steps": args.steps, "screen": "1080x2280"}
    try:
        client = adbutils.AdbClient(port=args.adb_port)
        client.wait_for(serial, timeout=30)
        lease = Lease(serial, args.console_port, "rlsys_home", os.path.join(home, ".emulator_console_auth_token"))
        for scale in (0.5, 1.0):
            cfg = EnvConfig(
                kind="android",
                action_space="autoui",
                android=AndroidConfig(adb_server_port=args.adb_port, screenshot_scale=scale),
            )
            env = AndroidEnv(cfg, "bench", lease)
            results[f"scale_{scale}"] = measure(env, args.steps)
            if scale == 0.5:
                results["screenshot"] = screenshot_costs(env.device)
            env.close()
    finally:
        emulator.kill()
        subprocess.run([adb, "-P", str(args.adb_port), "kill-server"], capture_output=True)
    print(json.dumps(results, indent=1))
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
