"""AitW evaluation end to end on real Ray: runners on the `android` resource lease fake emulators from the
node's pool, reset them from the snapshot through the console, act through the real adb server, and a
function check scores them. An emulator killed mid-run costs one episode (env_error) and is restarted."""

import json
import os
import signal
import threading

import psutil
import pytest
import yaml

from rlsys.cli.eval import main as eval_main
from tests.support.http_stubs import OpenAIStub, Recorded, Reply

pytestmark = pytest.mark.usefixtures("stub_api_env")

TYPE_HELLO = (
    'Action Plan: [TYPE,STATUS_TASK_COMPLETE] ; Action Decision: "action_type": "TYPE", '
    '"touch_point": "[-1.0, -1.0]", "lift_point": "[-1.0, -1.0]", "typed_text": "hello"'
)
COMPLETE = (
    'Action Plan: [STATUS_TASK_COMPLETE] ; Action Decision: "action_type": "STATUS_TASK_COMPLETE", '
    '"touch_point": "[-1.0, -1.0]", "lift_point": "[-1.0, -1.0]", "typed_text": ""'
)


def events(path):
    return [json.loads(line) for line in open(path)] if os.path.exists(path) else []


def test_eval_on_fake_emulators_with_a_crash(ray_session, fake_sdk, tmp_path):
    log_path = fake_sdk["emulator_env"]["FAKE_EMULATOR_LOG"]
    killed = []
    lock = threading.Lock()

    def agent(rec: Recorded) -> Reply:
        prompt = json.dumps(rec.json["messages"])
        with lock:
            if not killed:  # the first request: kill the first emulator mid-episode
                first = next(e for e in events(log_path) if e["event"] == "start")
                os.kill(first["pid"], signal.SIGKILL)
                killed.append(first["port"])
        fresh = "Recent steps:\\nnone" in prompt
        return Reply(200, OpenAIStub.completion(TYPE_HELLO if fresh else COMPLETE))

    tasks = tmp_path / "general_test.txt"
    tasks.write_text("".join(f"Do thing {i}\n" for i in range(6)))
    with OpenAIStub(agent) as stub:
        config = {
            "extends": os.path.abspath("configs/eval_aitw.yaml"),
            "run": {"name": "aitw", "output_dir": str(tmp_path / "run"), "eval_episodes": 6},
            "ray": {"dashboard": False},
            "runners": {"num": 2, "num_cpus": 0.25},
            "env": {"max_steps": 4, "settle_timeout_s": 2.0, "android": {**fake_sdk, "settle_interval_s": 0.01}},
            "tasks": {"file": str(tasks), "eval_file": str(tasks)},
            "policy": {
                "kind": "api",
                "path": None,
                "vision_path": None,
                "api": {"provider": "openai", "model_id": "stub", "endpoint_url": stub.endpoint_url, "auth_env": None},
            },
            "learner": {"digirl": {"text_encoder_path": None, "vision_path": None}},
            "evaluator": {
                "kind": "function",
                "function": "tests.fake_android.checks:typed_on_a_fresh_screen",
                "judge": {"provider": None, "every_step": False, "exemplars": None},
            },
        }
        path = tmp_path / "eval.yaml"
        path.write_text(yaml.safe_dump(config))
        assert eval_main(["--config", str(path), "--out", str(tmp_path / "results")]) == 0

    summary = json.loads((tmp_path / "results" / "eval.json").read_text())
    assert summary["eval/episodes"] == 6 and summary["eval/env_errors"] == 1
    assert summary["eval/success_rate"] == 1.0  # every episode that ran typed on a screen its reset had cleared
    log = events(log_path)
    starts = [e for e in log if e["event"] == "start"]
    # two emulators, and the killed one started again on the same ports
    assert sorted(e["port"] for e in starts) == sorted([killed[0], *{e["port"] for e in starts}])
    assert len(starts) == 3 and len({e["port"] for e in starts}) == 2
    assert all("-read-only" in e["argv"] and "-no-window" in e["argv"] for e in starts)
    # one snapshot load per episode played (the crashed episode may have lost its own)
    assert 5 <= sum(e["event"] == "snapshot_load" and e["found"] for e in log) <= 6
    # the run stopped every emulator it started
    assert not [e["pid"] for e in starts if psutil.pid_exists(e["pid"]) and _is_fake(e["pid"])]


def _is_fake(pid: int) -> bool:
    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE and "emulator.py" in " ".join(proc.cmdline())
    except psutil.NoSuchProcess:
        return False
