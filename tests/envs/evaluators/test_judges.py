"""VLM judges: what each style shows the model, how replies become verdicts, and the clients that carry
them (Gemini's REST shape, Bedrock with real SigV4 signing, an OpenAI-compatible endpoint), all against
local HTTP servers."""

import base64
import io
import json

import pytest
from PIL import Image

from rlsys.config import ConfigError, EvaluatorConfig, JudgeConfig, load_config
from rlsys.core.types import Observation, Step, Task, Trajectory
from rlsys.envs.evaluators import check_setup
from rlsys.envs.evaluators.checks import FunctionCheck, load_hook
from rlsys.envs.evaluators.judges import (
    VLMJudge,
    downscale,
    episode_query,
    load_exemplars,
    make_judge_clients,
    parse_pae_verdict,
    parse_status,
)
from rlsys.llm import GeminiClient, LLMError
from tests.support.http_stubs import GeminiStub, Reply, api_key

GEMINI_KEY = "AIza-stub-key-0123456789"


def png(color=(200, 30, 30), size=(64, 48)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def obs(color=(200, 30, 30)) -> Observation:
    return Observation(png(color), "", "https://shop.example/", "Find red shoes")


def trajectory(colors, answer=None, final=None) -> Trajectory:
    task = Task("shop--1", "Find red shoes", "webvoyager")
    steps = [Step(obs(c), "Click [0]", None, 0.0, False, 0, None) for c in colors]
    if answer is not None:
        steps[-1].info["answer"] = answer
    return Trajectory(task, steps, "unknown", final_observation=obs(final) if final else None)


def decoded_size(data: bytes) -> tuple[int, int]:
    with Image.open(io.BytesIO(data)) as im:
        return im.size


pytestmark = pytest.mark.usefixtures("stub_api_env")


# ---------------------------------------------------------------------------------- verdict parsing


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("The cart shows red shoes.\nStatus: success", True),
        ("Nothing was searched.\nStatus: failure", False),
        ("Status: **Success**", True),
        ("first thought Status: success, but on reflection\nStatus: failure", False),  # the last line counts
        ("status: FAILED", False),
        ("The task looks done.", None),  # DigiRL's code would call this a 0
        ("Status: maybe", None),
    ],
)
def test_digirl_status(reply, expected):
    assert parse_status(reply)[0] is expected


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("The answer matches the page.\nVerdict: SUCCESS", True),
        ("Unsupported by the screenshots.\nVerdict: NOT SUCCESS", False),
        ("verdict: not success", False),
        ("It is not a SUCCESS yet... Verdict: SUCCESS", True),  # the Verdict line decides
        ("SUCCESS", True),  # PAE's rule without the line
        ("The agent's answer is NOT SUCCESS", False),
        ("Could be SUCCESS or NOT SUCCESS", None),  # both and no Verdict line: no verdict
        ("I cannot tell.", None),
    ],
)
def test_pae_verdict(reply, expected):
    assert parse_pae_verdict(reply)[0] is expected


# ---------------------------------------------------------------------------------- what the judge sees


def test_pae_query_shows_task_answer_and_last_screens_in_order():
    colors = [(10, 0, 0), (20, 0, 0), (30, 0, 0), (40, 0, 0)]
    traj = trajectory(colors, answer="Size 9 red shoes, $45")
    cfg = JudgeConfig(provider="bedrock", model_id="m", style="pae", screenshots=3)
    query = episode_query(cfg, traj.task, traj)
    assert query.answer == "Size 9 red shoes, $45" and query.screens == [png(c) for c in colors[-3:]]
    system, parts = VLMJudge(cfg).messages(query)
    assert system is None and "Task: Find red shoes" in parts[0] and "Agent's answer: Size 9 red shoes, $45" in parts[0]
    assert parts[1:] == ["Screenshot 1 of 3:", png(colors[1]), "Screenshot 2 of 3:", png(colors[2])] + [
        "Screenshot 3 of 3:",
        png(colors[3]),
    ]
    # the cache key follows the content: another answer or another screen is another query
    assert episode_query(cfg, traj.task, trajectory(colors, answer="$46")).key != query.key
    assert (
        episode_query(cfg, traj.task, trajectory(colors[:3] + [(0, 0, 99)], answer=traj.steps[-1].info["answer"])).key
        != query.key
    )
    assert episode_query(cfg, traj.task, trajectory(colors, answer="Size 9 red shoes, $45")).key == query.key


def test_digirl_query_judges_the_screen_the_last_action_led_to_downscaled(tmp_path):
    write_exemplars(tmp_path, 2)
    cfg = JudgeConfig(provider="gemini", model_id="m", style="digirl", downscale=4, exemplars=str(tmp_path))
    traj = trajectory([(1, 1, 1), (2, 2, 2)], final=(9, 9, 9))
    query = episode_query(cfg, traj.task, traj)
    assert len(query.screens) == 1 and decoded_size(query.screens[0]) == (16, 12)
    with Image.open(io.BytesIO(query.screens[0])) as im:
        assert im.convert("RGB").getpixel((3, 3)) == (9, 9, 9)  # the final screen, not the last acted-on one
    system, parts = VLMJudge(cfg).messages(query)
    assert "Status: success" in system
    images = [p for p in parts if isinstance(p, bytes)]
    assert len(images) == 3 and all(decoded_size(i) == (16, 12) for i in images)  # 2 exemplars + the screen
    assert parts[-1] == "Task: Find red shoes\nJudgement:" and "Status: failure" in parts[5]


def write_exemplars(folder, n, response="The results are shown.\nStatus: success"):
    rows = []
    for i in range(n):
        (folder / f"ex{i}.png").write_bytes(png((i * 40, 0, 0)))
        rows.append({"image": f"ex{i}.png", "task": f"task {i}", "response": response if i == 0 else "Status: failure"})
    (folder / "exemplars.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_exemplar_errors_name_the_file_and_line(tmp_path):
    with pytest.raises(FileNotFoundError, match="exemplars.jsonl not found"):
        load_exemplars(tmp_path, 4)
    write_exemplars(tmp_path, 2, response="Looks fine to me.")
    with pytest.raises(ValueError, match=r"exemplars.jsonl:1: the response must end with `Status: success`"):
        load_exemplars(tmp_path, 4)
    (tmp_path / "exemplars.jsonl").write_text('{"image": "missing.png", "task": "t", "response": "Status: success"}\n')
    with pytest.raises(FileNotFoundError, match=r"exemplars.jsonl:1: image .*missing.png not found"):
        load_exemplars(tmp_path, 4)


def test_downscale_keeps_small_factors_exact():
    data = png(size=(64, 48))
    assert downscale(data, 1) is data and decoded_size(downscale(data, 2)) == (32, 24)


# ---------------------------------------------------------------------------------- Gemini REST


def test_gemini_request_shape_and_reply():
    with GeminiStub() as stub:
        stub.script(Reply(200, GeminiStub.reply("Status: success")))
        client = GeminiClient("gemini-1.5-pro", GEMINI_KEY, stub.base_url, timeout_s=5)
        reply = client.chat("be strict", ["look:", png()], 100, 0.0)
    (req,) = stub.requests
    assert req.path == "/v1beta/models/gemini-1.5-pro:generateContent"
    assert api_key(req) == GEMINI_KEY and GEMINI_KEY not in req.path  # never in the URL
    body = req.json
    assert body["system_instruction"] == {"parts": [{"text": "be strict"}]}
    text, image = body["contents"][0]["parts"]
    assert text == {"text": "look:"} and image["inline_data"]["mime_type"] == "image/png"
    assert base64.b64decode(image["inline_data"]["data"]) == png()
    assert body["generationConfig"] == {"maxOutputTokens": 100, "temperature": 0.0}
    assert reply.text == "Status: success" and (reply.input_tokens, reply.output_tokens) == (17, 9)


@pytest.mark.parametrize(
    "reply, kind",
    [
        (GeminiStub.error(429, "RESOURCE_EXHAUSTED"), "rate_limited"),
        (GeminiStub.error(503, "UNAVAILABLE"), "server"),
        (GeminiStub.error(400, "INVALID_ARGUMENT"), "client"),
        (Reply(200, "<html>not json</html>"), "bad_reply"),
        (Reply(200, {"promptFeedback": {"blockReason": "SAFETY"}}), "bad_reply"),
        (Reply(200, {"candidates": [{"finishReason": "MAX_TOKENS", "content": {"parts": []}}]}), "bad_reply"),
    ],
)
def test_gemini_failures_are_typed_and_never_leak_the_key(reply, kind):
    with GeminiStub() as stub:
        stub.script(reply)
        client = GeminiClient("gemini-1.5-pro", GEMINI_KEY, stub.base_url, timeout_s=5)
        with pytest.raises(LLMError) as e:
            client.chat(None, ["x"], 10, 0.0)
    assert e.value.kind == kind and GEMINI_KEY not in str(e.value) and GEMINI_KEY not in repr(client)


def test_gemini_slow_reply_is_a_timeout():
    with GeminiStub() as stub:
        stub.script(Reply(200, GeminiStub.reply("late"), delay_s=2.0))
        with pytest.raises(LLMError) as e:
            GeminiClient("g", GEMINI_KEY, stub.base_url, timeout_s=0.5).chat(None, ["x"], 10, 0.0)
    assert e.value.kind == "timeout"


# ---------------------------------------------------------------------------------- credentials and setup


def test_one_client_per_named_key(monkeypatch):
    monkeypatch.setenv("JUDGE_KEY_A", "a-key")
    monkeypatch.setenv("JUDGE_KEY_B", "b-key")
    cfg = JudgeConfig(provider="gemini", model_id="g", auth_env=["JUDGE_KEY_A", "JUDGE_KEY_B"])
    assert len(make_judge_clients(cfg)) == 2
    monkeypatch.delenv("JUDGE_KEY_B")
    with pytest.raises(ValueError, match=r"\['JUDGE_KEY_B'\] hold no Gemini API key"):
        make_judge_clients(cfg)


def config(**evaluator):
    return load_config(None, data={"evaluator": evaluator})


@pytest.mark.parametrize(
    "evaluator, message",
    [
        ({"kind": "judge"}, "evaluator.judge.provider"),
        ({"judge": {"provider": "gemini"}}, "evaluator.judge.model_id"),
        ({"judge": {"provider": "openai", "model_id": "m"}}, "evaluator.judge.endpoint_url"),
        ({"kind": "function"}, "evaluator.function = 'package.module:callable'"),
        ({"judge": {"provider": "gemini", "model_id": "m", "every_step": True}}, "needs evaluator.kind = 'judge'"),
        ({"pool": {"rate_per_s": 0}}, "evaluator.pool"),
        ({"judge": {"style": "digirl2"}}, "evaluator.judge.style"),
    ],
)
def test_config_errors_name_the_key(evaluator, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        config(**evaluator)


def test_setup_check_loads_prompt_exemplars_keys_and_hook(monkeypatch, tmp_path):
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    judge = {"provider": "gemini", "model_id": "g", "style": "digirl"}
    with pytest.raises(ConfigError, match="GEMINI_API_KEY"):
        check_setup(config(judge=judge).evaluator)
    monkeypatch.setenv("GEMINI_API_KEY", "k")
    check_setup(config(judge=judge).evaluator)
    with pytest.raises(ConfigError, match="exemplars.jsonl not found"):
        check_setup(config(judge={**judge, "exemplars": str(tmp_path)}).evaluator)
    with pytest.raises(ConfigError, match="unknown template 'nope'"):
        check_setup(config(judge={**judge, "prompt": "nope"}).evaluator)
    with pytest.raises(ConfigError, match="cannot import 'no_such_module_x'"):
        check_setup(config(kind="function", function="no_such_module_x:check").evaluator)


# ---------------------------------------------------------------------------------- programmatic checks


def hook_true(task, trajectory):
    return trajectory.steps[-1].observation.location.startswith("https://shop.example")


def hook_raises(task, trajectory):
    raise RuntimeError("device went away")


def hook_number(task, trajectory):
    return 0


def hook_hangs(task, trajectory):
    import time

    time.sleep(5)
    return True


def test_function_check_answers_or_says_why_not():
    traj = trajectory([(1, 1, 1)])
    here = "tests.envs.evaluators.test_judges"
    assert FunctionCheck(f"{here}:hook_true").judge(traj.task, traj).success is True
    raised = FunctionCheck(f"{here}:hook_raises").judge(traj.task, traj)
    assert raised.success is None and "RuntimeError: device went away" in raised.reason
    assert FunctionCheck(f"{here}:hook_number").judge(traj.task, traj).success is None  # 0 is not a verdict
    slow = FunctionCheck(f"{here}:hook_hangs", timeout_s=0.3).judge(traj.task, traj)
    assert slow.success is None and "no answer within 0.3s" in slow.reason
    with pytest.raises(ValueError, match="has no callable 'nope'"):
        load_hook(f"{here}:nope")


def test_default_evaluator_uses_no_judge():
    assert not EvaluatorConfig().uses_judge
    assert EvaluatorConfig(judge=JudgeConfig(provider="bedrock", model_id="m")).uses_judge
