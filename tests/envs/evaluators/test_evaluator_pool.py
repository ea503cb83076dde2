"""The evaluator pool with real clients against local HTTP servers: retries, deadlines, rate limits,
concurrency, the cache, and that every failure ends in an `unknown` verdict or a retry's success,
never a silent 0. Then the pool as a Ray actor behind real runners and a real training run."""

import asyncio
import io
import json
import time

import pytest
import ray
from PIL import Image

from rlsys.config import EvaluatorConfig, EvaluatorPoolConfig, JudgeConfig
from rlsys.core.types import Observation, Step, Task, Trajectory
from rlsys.data.shards import read_trajectories
from rlsys.driver.trainer import Trainer
from rlsys.envs.evaluators.judges import JudgeQuery
from rlsys.envs.evaluators.pool import EvaluatorPool, PoolJudge, TokenBucket, start_pool
from rlsys.envs.evaluators.referee import Referee
from tests.conftest import make_config
from tests.support.http_stubs import BedrockStub, GeminiStub, OpenAIStub, Reply, api_key

YES = "The page shows it.\nVerdict: SUCCESS"
NO = "Not shown.\nVerdict: NOT SUCCESS"


pytestmark = pytest.mark.usefixtures("stub_api_env")


def png(shade: int = 0) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (shade, 0, 0)).save(buf, format="PNG")
    return buf.getvalue()


def query(i: int = 0, answer: str = "42") -> JudgeQuery:
    return JudgeQuery(f"task {i}", answer, [png(i)], key=f"q{i}-{answer}")


def pool_for(stub, provider="openai", rate=1000.0, burst=1000, judge=None, **pool) -> EvaluatorPool:
    defaults = {"max_retries": 3, "base_delay_s": 0.01, "max_delay_s": 0.05, "deadline_s": 10.0}
    endpoint = stub.endpoint_url if provider == "openai" else stub.base_url
    judge = {"style": "pae", "timeout_s": 1.0, **(judge or {})}
    judge = JudgeConfig(provider=provider, model_id="judge-model", endpoint_url=endpoint, **judge)
    cfg = EvaluatorConfig(judge=judge, pool=EvaluatorPoolConfig(rate_per_s=rate, burst=burst, **{**defaults, **pool}))
    return EvaluatorPool(cfg)


def judge_all(pool: EvaluatorPool, queries: list[JudgeQuery]):
    async def run():
        return await asyncio.gather(*(pool.judge_query(q) for q in queries))

    return asyncio.run(run())


def ok(text=YES) -> Reply:
    return Reply(200, OpenAIStub.completion(text))


# ---------------------------------------------------------------------------------- failures


def test_rate_limit_and_server_error_are_retried_to_a_verdict():
    with OpenAIStub() as stub:
        stub.script(Reply(429, {"error": "slow down"}), Reply(503, {"error": "busy"}), ok())
        pool = pool_for(stub)
        (verdict,) = judge_all(pool, [query()])
    assert verdict.success is True and verdict.calls == 3 and verdict.error is None
    stats = pool.stats()
    assert stats["judge/retries"] == 2 and stats["judge/errors/rate_limited"] == 1 and stats["judge/errors/server"] == 1
    assert stats["judge/unknown_rate"] == 0.0 and stats["judge/latency_p50_s"] is not None


def test_retry_after_is_respected():
    with OpenAIStub() as stub:
        stub.script(Reply(429, {"error": "slow down"}, headers={"Retry-After": "0.4"}), ok())
        pool = pool_for(stub, max_delay_s=5.0)
        (verdict,) = judge_all(pool, [query()])
    first, second = stub.requests
    assert verdict.success is True and second.t_start - first.t_end >= 0.39


@pytest.mark.parametrize(
    "replies, error, calls",
    [
        ([Reply(500, {"error": "down"})] * 4, "server", 4),  # max_retries=3: four calls, then unknown
        ([Reply(400, {"error": "bad request"})], "client", 1),  # not retried
        ([Reply(200, "{not json")], "bad_reply", 1),
        ([ok("The agent did something.")], "no_verdict", 1),  # a reply without a verdict is no verdict
        ([Reply(200, OpenAIStub.completion(YES), delay_s=1.5)] * 4, "timeout", 4),
    ],
)
def test_every_failure_ends_unknown_and_says_why(replies, error, calls):
    with OpenAIStub() as stub:
        stub.script(*replies)
        pool = pool_for(stub, deadline_s=30.0)
        (verdict,) = judge_all(pool, [query()])
    assert verdict.success is None and verdict.reward is None  # never a silent 0
    assert verdict.error == error and verdict.calls == calls and len(stub.requests) == calls and verdict.reason
    assert pool.stats()["judge/unknown"] == 1 and pool.stats()["judge/unknown_rate"] == 1.0


def test_deadline_bounds_a_verdict_retries_included():
    with OpenAIStub() as stub:
        stub.script(*[Reply(200, OpenAIStub.completion(YES), delay_s=0.6)] * 10)
        pool = pool_for(stub, deadline_s=1.5)  # each call times out at 1 s
        (verdict,) = judge_all(pool, [query()])
    assert verdict.success is True  # one slow call fits in the deadline
    with OpenAIStub() as stub:
        stub.script(*[Reply(200, OpenAIStub.completion(YES), delay_s=3.0)] * 10)
        pool = pool_for(stub, deadline_s=1.5)
        t0 = time.monotonic()
        (verdict,) = judge_all(pool, [query()])
        took = time.monotonic() - t0
    assert verdict.success is None and verdict.error == "deadline" and "deadline_s=1.5" in verdict.reason
    assert 1.4 < took < 2.5


def test_bedrock_throttling_is_retried_with_real_signing():
    with BedrockStub() as stub:
        stub.script(BedrockStub.error(429, "ThrottlingException"), Reply(200, BedrockStub.message(NO)))
        pool = pool_for(stub, provider="bedrock")
        (verdict,) = judge_all(pool, [query()])
    assert verdict.success is False and verdict.calls == 2 and not stub.unexpected
    assert BedrockStub.model_id(stub.requests[-1]) == "judge-model"
    body = stub.requests[-1].json
    assert body["anthropic_version"] == "bedrock-2023-05-31" and body["temperature"] == 0.0
    content = body["messages"][0]["content"]
    assert "Agent's answer: 42" in content[0]["text"] and content[2]["type"] == "image"


# ---------------------------------------------------------------------------------- cache


def test_cache_answers_repeats_and_joins_queries_in_flight():
    with OpenAIStub() as stub:
        stub.responder = lambda rec: Reply(200, OpenAIStub.completion(YES), delay_s=0.2)
        pool = pool_for(stub)
        together = judge_all(pool, [query(1)] * 3)  # the same content at once: one call
        again = judge_all(pool, [query(1)])[0]  # later: from the cache
        other = judge_all(pool, [query(1, answer="43")])[0]  # another answer is another judgement
    assert len(stub.requests) == 2 and all(v.success for v in together + [again, other])
    assert sorted(v.cached for v in together) == [False, True, True] and again.cached and again.calls == 0
    assert pool.stats()["judge/cache_hits"] == 3


def test_unknown_verdicts_are_not_cached():
    with OpenAIStub() as stub:
        stub.script(Reply(400, {"error": "bad"}), ok())
        pool = pool_for(stub)
        first = judge_all(pool, [query()])[0]
        second = judge_all(pool, [query()])[0]
    assert first.success is None and second.success is True and len(stub.requests) == 2


# ---------------------------------------------------------------------------------- rate and concurrency


def max_in_window(times: list[float], window: float) -> int:
    times = sorted(times)
    return max(sum(1 for u in times if t <= u < t + window) for t in times)


def test_calls_never_start_faster_than_the_rate_limit():
    with OpenAIStub(responder=lambda rec: ok()) as stub:
        pool = pool_for(stub, rate=8.0, burst=2, max_concurrency=32)
        t0 = time.monotonic()
        verdicts = judge_all(pool, [query(i) for i in range(20)])
        took = time.monotonic() - t0
    starts = [r.t_start for r in stub.requests]
    assert all(v.success for v in verdicts) and len(starts) == 20
    assert max_in_window(starts, 1.0) <= 8 + 2  # rate x window + burst
    assert took >= (20 - 2) / 8 - 0.1  # the burst goes at once, the rest at the rate


def test_each_credential_has_its_own_bucket(monkeypatch):
    monkeypatch.setenv("JUDGE_A", "key-a")
    monkeypatch.setenv("JUDGE_B", "key-b")
    with GeminiStub(responder=lambda rec: Reply(200, GeminiStub.reply("Status: success"))) as stub:
        judge = {"style": "digirl", "auth_env": ["JUDGE_A", "JUDGE_B"]}  # Gemini in DigiRL's format
        pool = pool_for(stub, provider="gemini", rate=5.0, burst=1, judge=judge, max_concurrency=32)
        t0 = time.monotonic()
        verdicts = judge_all(pool, [query(i) for i in range(16)])
        took = time.monotonic() - t0
    by_key = {k: [r.t_start for r in stub.requests if api_key(r) == k] for k in ("key-a", "key-b")}
    assert all(v.success for v in verdicts) and {k: len(v) for k, v in by_key.items()} == {"key-a": 8, "key-b": 8}
    assert all(max_in_window(times, 1.0) <= 5 + 1 for times in by_key.values())
    assert took < 16 / 5  # two keys go faster than one could


def test_concurrency_is_bounded():
    with OpenAIStub(responder=lambda rec: Reply(200, OpenAIStub.completion(YES), delay_s=0.3)) as stub:
        pool = pool_for(stub, max_concurrency=3)
        verdicts = judge_all(pool, [query(i) for i in range(9)])
    assert all(v.success for v in verdicts) and stub.peak_in_flight == 3


def test_token_bucket_spacing():
    now = [0.0]
    bucket = TokenBucket(rate=2.0, burst=2, clock=lambda: now[0])
    assert [bucket.reserve() for _ in range(4)] == [0.0, 0.0, 0.5, 1.0]
    now[0] = 10.0  # a quiet spell refills to the burst, never beyond
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.5]


# ---------------------------------------------------------------------------------- as a Ray actor


def web_trajectory(answer: str) -> Trajectory:
    task = Task("t1", "Find the price", "webvoyager")
    step = Step(Observation(png(5), "", "http://x", "Find the price"), "ANSWER; [$5]", None, 0.0, True, 0, None)
    step.info["answer"] = answer
    return Trajectory(task, [step], "unknown")


def test_runners_share_the_pool_actor_and_a_dead_pool_is_unknown(ray_session):
    with OpenAIStub(responder=lambda rec: ok(YES if "$5" in json.dumps(rec.json) else NO)) as stub:
        cfg = EvaluatorConfig(
            judge=JudgeConfig(provider="openai", model_id="m", endpoint_url=stub.endpoint_url, style="pae"),
            pool=EvaluatorPoolConfig(rate_per_s=100, burst=10),
        )
        pool = start_pool(cfg)
        judge = PoolJudge(pool, cfg.judge, deadline_s=10)
        traj = web_trajectory("$5")
        assert judge.judge(traj.task, traj).success is True
        assert judge.judge(traj.task, web_trajectory("$7")).success is False
        assert ray.get(pool.stats.remote())["judge/calls"] == 2
        ray.kill(pool)
        gone = judge.judge(traj.task, web_trajectory("$9"))
    assert gone.success is None and gone.error == "pool" and "did not answer" in gone.reason


def test_training_with_a_judge_never_trains_on_unknown_verdicts(ray_session, tmp_path, site):
    """A web suite judged after every step (DigiRL's way): one task the judge always passes, one it never
    gives a verdict on. Successes reach the replay buffer; unknowns are stored and counted, never kept.
    The task proposer adds a task after the first iteration, and the second iteration plays it."""
    rows = [
        {"web_name": "local", "id": "yes", "ques": "Judge says yes", "web": f"{site}/actions.html"},
        {"web_name": "local", "id": "unsure", "ques": "Judge is unsure", "web": f"{site}/actions.html"},
    ]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    proposed = {"web_name": "local", "ques": "Judge says yes to the proposed task", "web": f"{site}/page2.html"}

    def responder(rec):
        text = json.dumps(rec.json)
        if "Judgement:" not in text:  # the proposer's request
            return ok(json.dumps(proposed) + "\n" + json.dumps(rows[0]))  # the second repeats a known task
        return ok("Status: success" if "Judge says yes" in text else "I cannot see enough to decide.")

    with OpenAIStub(responder=responder) as stub:
        llm = {"provider": "openai", "model_id": "judge", "endpoint_url": stub.endpoint_url}
        cfg = make_config(
            tmp_path,
            env__kind="web",
            tasks__suite="webvoyager",
            tasks__file=str(tmp_path / "tasks.jsonl"),
            tasks__sampling="sequential",
            run__iterations=2,
            evaluator__kind="judge",
            evaluator__judge={**llm, "style": "digirl", "every_step": True},
            evaluator__pool={"rate_per_s": 50, "burst": 5, "base_delay_s": 0.01},
            proposer__llm=llm,
            proposer__every=1,
        )
        trainer = Trainer(cfg, cfg.output_dir)
        try:
            records = trainer.run()
            kept = ray.get(trainer.buffer.all.remote())
        finally:
            trainer.shutdown()
    stored = read_trajectories(cfg.output_dir / "trajectories")
    by_task = {t: [x for x in stored if x.task.id == f"local--{t}"] for t in ("yes", "unsure", "p1")}
    assert by_task["yes"] and all(x.outcome == "success" and len(x.steps) == 1 for x in by_task["yes"])
    assert by_task["unsure"] and all(x.outcome == "unknown" for x in by_task["unsure"])
    assert by_task["p1"] and by_task["p1"][0].task.instruction == proposed["ques"]
    assert all(x.outcome == "success" for x in by_task["p1"])
    unsure = by_task["unsure"][0]
    assert all(s.info["verdict"]["error"] == "no_verdict" for s in unsure.steps) and "no verdict" in unsure.error
    assert unsure.steps[-1].info["judge"]["verdicts"] == len(unsure.steps)
    assert {t.id for t in kept} == {t.id for t in by_task["yes"] + by_task["p1"]}  # nothing without a verdict
    # the second round proposes the same task again: a duplicate, not added
    assert [r.get("tasks/proposed") for r in records] == [1, 0] and records[-1]["tasks/pool"] == 3
    assert sum(r["train/unknown"] for r in records) == len(by_task["unsure"])
    last = records[-1]
    assert last["judge/calls"] > 0 and last["judge/unknown"] > 0 and last["train/judge_calls_per_trajectory"] > 0
    assert last["replay/rejected_untrainable"] == len(by_task["unsure"])


def hook_by_location(task, trajectory):
    return {"good": True, "bad": False}.get(trajectory.steps[-1].observation.location)


def played(location: str, outcome: str, answer: str | None = None) -> Trajectory:
    traj = web_trajectory(answer or "")
    traj.steps[-1].observation.location = location
    if answer is None:
        del traj.steps[-1].info["answer"]
    traj.outcome = outcome
    return traj


def test_function_check_decides_every_episode_that_did_not_break():
    cfg = EvaluatorConfig(kind="function", function="tests.envs.evaluators.test_evaluator_pool:hook_by_location")
    referee = Referee(cfg)
    settle = lambda traj: referee.episode().settle(traj)
    assert settle(played("good", "timeout")).outcome == "success"  # reached the goal state as steps ran out
    assert settle(played("good", "timeout")).steps[-1].reward == 1.0
    assert (
        settle(played("bad", "timeout")).outcome == "timeout" and settle(played("bad", "unknown")).outcome == "failure"
    )
    unknown = settle(played("elsewhere", "failure"))
    assert unknown.outcome == "unknown" and "returned None" in unknown.error and unknown.steps[-1].reward == 0.0
    assert settle(played("good", "env_error")).outcome == "env_error"  # a broken episode is not judged


def test_judge_kind_judges_answers_and_auto_only_what_the_env_could_not(ray_session):
    with OpenAIStub(responder=lambda rec: ok(YES)) as stub:
        judge = JudgeConfig(provider="openai", model_id="m", endpoint_url=stub.endpoint_url, style="pae")
        pool = start_pool(EvaluatorConfig(judge=judge, pool=EvaluatorPoolConfig(rate_per_s=100, burst=10)))
        try:
            always = Referee(EvaluatorConfig(kind="judge", judge=judge), pool)
            auto = Referee(EvaluatorConfig(kind="auto", judge=judge), pool)
            answered = always.episode().settle(played("x", "failure", answer="$5"))
            assert answered.outcome == "success" and answered.steps[-1].info["judge"]["calls"] == 1
            assert always.episode().settle(played("x", "timeout")).outcome == "timeout"  # no answer: no call
            assert auto.episode().settle(played("x", "failure", answer="$6")).outcome == "failure"  # the env's
            assert auto.episode().settle(played("x", "unknown", answer="$7")).outcome == "success"
        finally:
            ray.kill(pool)
    assert len(stub.requests) == 2


def test_fuzzy_match_asks_the_judge_model_with_the_references():
    with OpenAIStub() as stub:
        stub.script(ok("Same duration.\nVerdict: SUCCESS"), ok("I am not sure."))
        pool = pool_for(stub)
        same, unsure = asyncio.run(_fuzzy_twice(pool))
    assert same.success is True and unsure.success is None and unsure.error == "no_verdict"
    text = json.dumps(stub.requests[0].json)
    assert "about 20 minutes" in text and "roughly twenty minutes" in text and "N/A" in text


async def _fuzzy_twice(pool):
    return (
        await pool.fuzzy_match("roughly twenty minutes", ["about 20 minutes", "N/A"]),
        await pool.fuzzy_match("twenty-ish", ["about 20 minutes"]),
    )


def test_webarena_fuzzy_match_in_a_real_browser_goes_through_the_pool(ray_session, tmp_path, site):
    from rlsys.envs.web.webenv import WebEnv
    from tests.envs.web.test_env_web import pae, task, web_config

    checks = {"eval_types": ["string_match"], "reference_answers": {"fuzzy_match": ["about 20 minutes"]}}

    def responder(rec):
        return ok("Verdict: SUCCESS" if "twenty minutes" in json.dumps(rec.json) else "Verdict: NOT SUCCESS")

    with OpenAIStub(responder=responder) as stub:
        judge = JudgeConfig(provider="openai", model_id="m", endpoint_url=stub.endpoint_url)
        pool = start_pool(EvaluatorConfig(judge=judge, pool=EvaluatorPoolConfig(rate_per_s=100, burst=10)))
        env = WebEnv(web_config(tmp_path, action_space="pae"), fuzzy_judge=PoolJudge(pool, judge, 10).fuzzy_match)
        try:
            outcomes = []
            for answer in ("roughly twenty minutes", "an hour"):
                env.reset(task(site, checks=checks))
                result = env.step(pae(f"ANSWER; [{answer}]"))
                outcomes.append((result.info["outcome"], result.reward, result.info["verdict"]["reason"]))
        finally:
            env.close()
            ray.kill(pool)
    assert [o[:2] for o in outcomes] == [("success", 1.0), ("failure", 0.0)]
    assert "the judge found the answer matching" in outcomes[0][2] and len(stub.requests) == 2
