"""The hosted-model clients and the API-agent policy, against real local HTTP servers.

The OpenAI stub is a plain HTTP server; the Bedrock stub is reached through real boto3 with fake
credentials, so requests are SigV4-signed exactly as they would be against AWS.
"""

from __future__ import annotations

import base64
import io
import json
import random
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

import pytest
from PIL import Image

from rlsys.config import ApiConfig, PolicyConfig
from rlsys.core.types import Observation
from rlsys.envs.web.spaces import pae
from rlsys.llm import (
    BedrockClaudeClient,
    LLMError,
    OpenAIChatClient,
    backoff_delay,
    make_client,
    with_retries,
)
from rlsys.policies.api_agent import ApiAgentPolicy, ApiPolicyError
from tests.conftest import FAKE_ACCESS_KEY
from tests.support.http_stubs import BedrockStub, OpenAIStub, Recorded, Reply

BEDROCK_MODEL = "anthropic.claude-3-5-sonnet-20240620-v1:0"
OPENAI_MODEL = "Qwen/Qwen2-VL-7B-Instruct"
SECRET_KEY = "sk-test-very-secret-0123456789"
ELEMENTS = "[0] <input> search box\n[1] <button> Search\n[2] <a> Cart"
ANSWER = "Thought: The search box is [0].\nAction: Type [0]; [red shoes]"


def png(color=(200, 30, 30), size=(48, 32)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def observation(task: str = "Find red shoes under $50", color=(200, 30, 30)) -> Observation:
    return Observation(
        screenshot_png=png(color),
        ui_text=ELEMENTS,
        location="https://shop.example/",
        task=task,
        extras={"history": [{"step": 1, "action": "Click [2]"}]},
    )


pytestmark = pytest.mark.usefixtures("stub_api_env")


@dataclass
class Harness:
    """One provider's stub plus how to script it and read its requests."""

    provider: str
    stub: OpenAIStub | BedrockStub

    def cfg(self, temperature: float = 0.7, **api) -> PolicyConfig:
        if self.provider == "openai":
            base = {"model_id": OPENAI_MODEL, "endpoint_url": self.stub.endpoint_url}
        else:
            base = {"model_id": BEDROCK_MODEL, "endpoint_url": self.stub.base_url, "region": "us-east-1"}
        base.update({"timeout_s": 2.0, "max_retries": 2, "max_tokens": 256})
        base.update(api)
        return PolicyConfig(kind="api", temperature=temperature, api=ApiConfig(provider=self.provider, **base))

    def policy(self, **api) -> ApiAgentPolicy:
        return ApiAgentPolicy(self.cfg(**api), base_delay_s=0.01, max_delay_s=0.05)

    def ok(self, text: str = ANSWER, delay_s: float = 0.0) -> Reply:
        body = OpenAIStub.completion(text) if self.provider == "openai" else BedrockStub.message(text)
        return Reply(200, body, delay_s)

    def fail(self, status: int, delay_s: float = 0.0, headers: dict | None = None) -> Reply:
        if self.provider == "openai":
            return Reply(status, {"error": {"message": f"stub status {status}"}}, delay_s, headers or {})
        code = {429: "ThrottlingException", 500: "InternalServerException", 400: "ValidationException"}[status]
        reply = BedrockStub.error(status, code, f"stub status {status}", delay_s)
        reply.headers.update(headers or {})
        return reply

    def content(self, rec: Recorded) -> list[dict]:
        (message,) = [m for m in rec.json["messages"] if m["role"] == "user"]
        return message["content"]

    def prompt(self, rec: Recorded) -> str:
        return "".join(p["text"] for p in self.content(rec) if p["type"] == "text")

    def image_bytes(self, rec: Recorded) -> list[bytes]:
        out = []
        for p in self.content(rec):
            if self.provider == "openai" and p["type"] == "image_url":
                prefix = "data:image/png;base64,"
                assert p["image_url"]["url"].startswith(prefix)
                out.append(base64.b64decode(p["image_url"]["url"][len(prefix) :], validate=True))
            elif self.provider == "bedrock" and p["type"] == "image":
                assert p["source"]["type"] == "base64" and p["source"]["media_type"] == "image/png"
                out.append(base64.b64decode(p["source"]["data"], validate=True))
        return out


@pytest.fixture(params=["openai", "bedrock"])
def harness(request):
    stub = OpenAIStub() if request.param == "openai" else BedrockStub()
    with stub:
        yield Harness(request.param, stub)
        assert not stub.unexpected, stub.unexpected


# ---------------------------------------------------------------------------------- the policy


def test_reply_is_parsed_and_request_carries_image_and_prompt(harness):
    obs = observation()
    harness.stub.script(harness.ok())
    policy = harness.policy()
    (sample,) = policy.act([obs])

    assert sample.text == ANSWER and sample.logprob is None and sample.version == 0
    action = pae.parse(sample.text, num_elements=3)
    assert (action.kind, action.element, action.text) == ("type", 0, "red shoes")

    (rec,) = harness.stub.requests
    assert harness.image_bytes(rec) == [obs.screenshot_png]
    prompt = harness.prompt(rec)
    assert obs.task in prompt and ELEMENTS in prompt and "https://shop.example/" in prompt and "Click [2]" in prompt
    assert rec.json["temperature"] == pytest.approx(0.7) and rec.json["max_tokens"] == 256
    if harness.provider == "openai":
        assert rec.path == "/v1/chat/completions" and rec.json["model"] == OPENAI_MODEL
        assert "Authorization" not in rec.headers  # no auth_env variable set: a self-hosted server
    else:
        assert BedrockStub.model_id(rec) == BEDROCK_MODEL
        assert rec.json["anthropic_version"] == "bedrock-2023-05-31" and "system" not in rec.json
        auth = rec.headers["Authorization"]
        assert auth.startswith("AWS4-HMAC-SHA256 ") and f"Credential={FAKE_ACCESS_KEY}/" in auth
        assert "/us-east-1/bedrock/aws4_request" in auth

    stats = policy.stats()
    assert stats["calls"] == 1 and stats["requests"] == 1 and stats["retries"] == 0 and stats["errors"] == {}
    assert stats["input_tokens"] > 0 and stats["output_tokens"] > 0 and stats["latency_s"] > 0


def test_rate_limited_then_ok_is_one_counted_retry(harness):
    harness.stub.script(harness.fail(429, headers={"Retry-After": "0.2"}), harness.ok())
    policy = ApiAgentPolicy(harness.cfg(), base_delay_s=0.01, max_delay_s=1.0)
    t0 = time.monotonic()
    (sample,) = policy.act([observation()])
    elapsed = time.monotonic() - t0
    assert sample.text == ANSWER
    assert len(harness.stub.requests) == 2
    assert elapsed >= 0.2  # the server's Retry-After was honoured over the tiny backoff
    stats = policy.stats()
    assert stats["retries"] == 1 and stats["requests"] == 2 and stats["calls"] == 1
    assert stats["retried"] == {"rate_limited": 1} and stats["errors"] == {}


def test_retry_after_is_capped_by_max_delay(harness):
    harness.stub.script(harness.fail(429, headers={"Retry-After": "30"}), harness.ok())
    policy = ApiAgentPolicy(harness.cfg(), base_delay_s=0.01, max_delay_s=0.1)
    t0 = time.monotonic()
    policy.act([observation()])
    assert time.monotonic() - t0 < 1.5


def test_server_errors_exhaust_retries(harness):
    max_retries = 2
    harness.stub.script(*[harness.fail(500) for _ in range(max_retries + 1)], harness.ok())
    policy = harness.policy(max_retries=max_retries)
    with pytest.raises(ApiPolicyError) as info:
        policy.act([observation()])
    err = info.value
    assert err.kind == "server" and err.retries == max_retries and err.status == 500
    assert len(harness.stub.requests) == max_retries + 1  # the client itself (botocore) never retried
    assert list(err.errors) == [0] and err.samples == [None]
    stats = policy.stats()
    assert stats["errors"] == {"server": 1} and stats["retries"] == max_retries and stats["failed_calls"] == 1
    harness.stub.replies.clear()


def test_slow_reply_times_out(harness):
    harness.stub.script(harness.ok(delay_s=1.0), harness.ok(delay_s=1.0))
    policy = harness.policy(timeout_s=0.3, max_retries=1)
    t0 = time.monotonic()
    with pytest.raises(ApiPolicyError) as info:
        policy.act([observation()])
    elapsed = time.monotonic() - t0
    assert info.value.kind == "timeout" and info.value.retries == 1
    assert len(harness.stub.requests) == 2  # timeouts are retried
    assert 0.55 < elapsed < 1.5  # two 0.3 s timeouts; waiting for the two 1 s replies would take >= 2 s


def test_malformed_reply_is_bad_reply_without_retry(harness):
    harness.stub.script(Reply(200, "{not json"), harness.ok())
    policy = harness.policy()
    with pytest.raises(ApiPolicyError) as info:
        policy.act([observation()])
    assert info.value.kind == "bad_reply" and info.value.retries == 0
    assert "not JSON" in str(info.value)
    assert len(harness.stub.requests) == 1
    assert policy.stats()["errors"] == {"bad_reply": 1}
    harness.stub.replies.clear()


def test_reply_without_text_is_bad_reply(harness):
    if harness.provider == "openai":
        body = {"choices": [{"message": {"role": "assistant", "content": None}}]}
    else:
        body = {"type": "message", "content": [{"type": "tool_use", "id": "x", "name": "f", "input": {}}]}
    harness.stub.script(Reply(200, body))
    with pytest.raises(ApiPolicyError) as info:
        harness.policy().act([observation()])
    assert info.value.kind == "bad_reply" and len(harness.stub.requests) == 1


def test_client_error_is_not_retried(harness):
    harness.stub.script(harness.fail(400), harness.ok())
    policy = harness.policy()
    with pytest.raises(ApiPolicyError) as info:
        policy.act([observation()])
    assert info.value.kind == "client" and info.value.status == 400
    assert "400" in str(info.value) and "stub status 400" in str(info.value)
    assert len(harness.stub.requests) == 1
    harness.stub.replies.clear()


def test_greedy_sends_temperature_zero(harness):
    harness.stub.script(harness.ok(), harness.ok())
    policy = harness.policy()
    policy.act([observation()], greedy=True)
    policy.act([observation()], greedy=False)
    first, second = harness.stub.requests
    assert first.json["temperature"] == 0
    assert second.json["temperature"] == pytest.approx(0.7)


def _answer_by_task(harness: Harness, delay_s: float, fail_task: str | None = None):
    def respond(rec: Recorded) -> Reply:
        prompt = harness.prompt(rec)
        task = next(line for line in prompt.splitlines() if line.startswith("Task: "))[len("Task: ") :]
        if task == fail_task:
            return harness.fail(400, delay_s)
        return harness.ok(f"Thought: working on {task}.\nAction: ANSWER; [{task}]", delay_s)

    return respond


def test_batch_is_answered_concurrently_and_in_order(harness):
    harness.stub.responder = _answer_by_task(harness, delay_s=0.3)
    policy = harness.policy()
    tasks = [f"task number {i}" for i in range(4)]
    samples = policy.act([observation(t, color=(i * 60, 0, 0)) for i, t in enumerate(tasks)])
    assert [s.text for s in samples] == [f"Thought: working on {t}.\nAction: ANSWER; [{t}]" for t in tasks]
    assert [pae.parse(s.text, 3).text for s in samples] == tasks
    # concurrency as the server saw it (calls one after another never overlap), not as a wall-clock bound that a
    # loaded machine can miss while it builds the requests
    assert len(harness.stub.requests) == 4 and harness.stub.peak_in_flight >= 3
    assert policy.stats()["calls"] == 4


def test_batch_failure_names_the_failed_observation_and_keeps_the_rest(harness):
    harness.stub.responder = _answer_by_task(harness, delay_s=0.0, fail_task="task number 2")
    policy = harness.policy()
    with pytest.raises(ApiPolicyError) as info:
        policy.act([observation(f"task number {i}") for i in range(4)])
    err = info.value
    assert err.kind == "client" and list(err.errors) == [2] and "observation 2" in str(err)
    assert err.samples[2] is None
    assert [s.text.endswith(f"[task number {i}]") for i, s in enumerate(err.samples) if s is not None] == [True] * 3


# ---------------------------------------------------------------------------------- OpenAI auth


def test_openai_bearer_key_from_env_and_never_in_errors(monkeypatch):
    monkeypatch.setenv("STUB_LLM_KEY", SECRET_KEY)

    def echo_auth(rec: Recorded) -> Reply:  # a server that quotes the key back, as some do
        return Reply(401, {"error": {"message": f"invalid key {rec.headers.get('Authorization')}"}})

    with OpenAIStub() as stub:
        stub.script(Reply(200, OpenAIStub.completion(ANSWER)))
        cfg = PolicyConfig(
            kind="api",
            api=ApiConfig(
                provider="openai", model_id=OPENAI_MODEL, endpoint_url=stub.endpoint_url, auth_env="STUB_LLM_KEY"
            ),
        )
        policy = ApiAgentPolicy(cfg, base_delay_s=0.01)
        assert policy.act([observation()])[0].text == ANSWER
        assert stub.requests[0].headers["Authorization"] == f"Bearer {SECRET_KEY}"

        stub.responder = echo_auth
        with pytest.raises(ApiPolicyError) as info:
            policy.act([observation()])
        assert info.value.kind == "client" and info.value.status == 401
        assert "invalid key" in str(info.value) and SECRET_KEY not in str(info.value)
        assert SECRET_KEY in stub.requests[1].headers["Authorization"]  # it really was sent, and echoed
        assert all(SECRET_KEY not in str(e) for e in info.value.errors.values())
        assert SECRET_KEY not in repr(policy) and SECRET_KEY not in repr(policy.client)


def test_openai_unreachable_endpoint_is_a_server_error():
    with OpenAIStub() as stub:
        url = stub.endpoint_url
    client = OpenAIChatClient(url, OPENAI_MODEL, timeout_s=1.0)  # the port is closed now
    with pytest.raises(LLMError) as info:
        client.chat(None, ["hi"], 8, 0.0)
    assert info.value.kind == "server"


def test_openai_system_text_is_sent():
    with OpenAIStub() as stub:
        stub.script(Reply(200, OpenAIStub.completion("ok")))
        reply = OpenAIChatClient(stub.endpoint_url, OPENAI_MODEL).chat("be brief", ["hello", png()], 5, 0.2)
        assert reply.text == "ok" and reply.input_tokens == 11 and reply.output_tokens == 7
        messages = stub.requests[0].json["messages"]
        assert messages[0] == {"role": "system", "content": "be brief"}
        assert [p["type"] for p in messages[1]["content"]] == ["text", "image_url"]


def test_bedrock_system_text_and_stub_refuses_unsigned():
    with BedrockStub() as stub:
        stub.script(Reply(200, BedrockStub.message("fine")))
        client = BedrockClaudeClient(BEDROCK_MODEL, region="us-east-1", endpoint_url=stub.base_url, timeout_s=2)
        reply = client.chat("judge strictly", [png(), "did it work?"], 20, 0.0)
        assert reply.text == "fine" and (reply.input_tokens, reply.output_tokens) == (13, 5)
        body = stub.requests[0].json
        assert body["system"] == "judge strictly"
        assert [p["type"] for p in body["messages"][0]["content"]] == ["image", "text"]

        unsigned = urllib.request.Request(f"{stub.base_url}/model/{BEDROCK_MODEL}/invoke", data=b"{}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(unsigned, timeout=2)
        assert info.value.code == 403
        stub.unexpected.clear()


# ---------------------------------------------------------------------------------- make_client


def test_make_client_names_the_missing_key(monkeypatch):
    with pytest.raises(ValueError, match=r"policy\.api\.endpoint_url"):
        make_client(ApiConfig(provider="openai", model_id="m", endpoint_url=None))
    with pytest.raises(ValueError, match=r"policy\.api\.model_id"):
        make_client(ApiConfig(provider="openai", model_id="", endpoint_url="http://127.0.0.1:1/v1"))
    with pytest.raises(ValueError, match=r"policy\.api\.model_id"):
        make_client(ApiConfig(provider="bedrock", model_id=""))
    with pytest.raises(ValueError, match=r"policy\.api\.model_id"):
        ApiAgentPolicy.create(PolicyConfig(kind="api", api=ApiConfig(provider="bedrock", model_id="")))

    assert isinstance(make_client(ApiConfig(provider="bedrock", model_id=BEDROCK_MODEL)), BedrockClaudeClient)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET_KEY)
    client = make_client(ApiConfig(provider="openai", model_id="m", endpoint_url="http://127.0.0.1:1/v1"))
    assert isinstance(client, OpenAIChatClient) and SECRET_KEY not in repr(client)


# ---------------------------------------------------------------------------------- with_retries


def _failing(kinds: list[str], result="done"):
    calls = []

    def call():
        calls.append(1)
        if len(calls) <= len(kinds):
            raise LLMError(kinds[len(calls) - 1], "scripted")
        return result

    return call, calls


def test_backoff_delays_are_full_jitter_within_bounds():
    sleeps: list[float] = []
    call, calls = _failing(["server", "rate_limited", "timeout", "server", "server"])
    result, retries = with_retries(
        call, max_retries=5, base_delay_s=1.0, max_delay_s=3.0, rng=random.Random(7), sleep=sleeps.append
    )
    assert (result, retries, len(calls)) == ("done", 5, 6)
    caps = [1.0, 2.0, 3.0, 3.0, 3.0]  # min(max_delay, base * 2**attempt)
    assert len(sleeps) == 5 and all(0.0 <= s <= c for s, c in zip(sleeps, caps)), sleeps

    rng = random.Random(0)
    for attempt, cap in enumerate([0.5, 1.0, 2.0, 4.0]):
        draws = [backoff_delay(attempt, 0.5, 20.0, rng) for _ in range(300)]
        assert 0.0 <= min(draws) < 0.1 * cap and 0.9 * cap < max(draws) <= cap  # spread over [0, cap]


def test_with_retries_gives_up_and_skips_permanent_errors():
    sleeps: list[float] = []
    call, calls = _failing(["server"] * 10)
    with pytest.raises(LLMError) as info:
        with_retries(call, max_retries=3, base_delay_s=0.1, rng=random.Random(1), sleep=sleeps.append)
    assert info.value.kind == "server" and info.value.retries == 3 and len(calls) == 4 and len(sleeps) == 3

    for kind in ("bad_reply", "client"):
        sleeps.clear()
        call, calls = _failing([kind])
        with pytest.raises(LLMError) as info:
            with_retries(call, max_retries=3, sleep=sleeps.append)
        assert info.value.kind == kind and len(calls) == 1 and sleeps == []

    def throttled():
        raise LLMError("rate_limited", "slow down", status=429, retry_after_s=2.5)

    sleeps.clear()
    with pytest.raises(LLMError):
        with_retries(throttled, max_retries=2, base_delay_s=0.01, max_delay_s=10, sleep=sleeps.append)
    assert sleeps == [2.5, 2.5]


# ---------------------------------------------------------------------------------- no weights


def test_no_weights_interface(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET_KEY)
    cfg = PolicyConfig(
        kind="api", api=ApiConfig(provider="openai", model_id=OPENAI_MODEL, endpoint_url="http://127.0.0.1:9/v1")
    )
    policy = ApiAgentPolicy.create(cfg, seed=3)
    with pytest.raises(NotImplementedError, match="no log-probs"):
        policy.log_probs([observation()], [ANSWER])
    with pytest.raises(NotImplementedError, match="collection and evaluation only"):
        policy.token_logprobs([observation()], [ANSWER])
    assert policy.state_dict() == {} and list(policy.parameters()) == []
    policy.train()
    policy.load_state_dict({}, version=4)
    assert policy.version == 4
    with pytest.raises(ValueError):
        policy.load_state_dict({"w": 1})
    policy.save_pretrained(tmp_path / "ckpt")
    text = (tmp_path / "ckpt" / "api_policy.json").read_text()
    assert json.loads(text) == {"kind": "api", "provider": "openai", "model_id": OPENAI_MODEL, "version": 4}
    assert SECRET_KEY not in text
