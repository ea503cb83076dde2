"""EvaluatorPool: the one place VLM-judge calls are made, shared by every runner (an async Ray actor).

Each credential has a token bucket, so calls never start faster than `rate_per_s` (after `burst`);
at most `max_concurrency` calls are in flight; 429s, 5xx and timeouts are retried with full-jitter
exponential backoff (a server's Retry-After raises the delay); a verdict has `deadline_s` in all.
Verdicts are cached by (task, answer, screenshot hashes), and a query already being judged is
joined, not sent twice. When no verdict can be had the answer is an unknown Verdict that says why;
there is no silent zero.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections import Counter, OrderedDict
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import ray

from rlsys.config import EvaluatorConfig, JudgeConfig
from rlsys.core.evaluator import Verdict
from rlsys.core.types import Task, Trajectory
from rlsys.envs.evaluators.judges import (
    JudgeQuery,
    VLMJudge,
    episode_query,
    fuzzy_match_query,
    make_judge_clients,
    parse_pae_verdict,
)
from rlsys.llm import LLMError, retry_delay

log = logging.getLogger(__name__)

POOL_NAME = "evaluator-pool"


class TokenBucket:
    """Reservations at a steady `rate` per second with up to `burst` at once. `reserve` takes a
    token (the balance may go negative) and says how long to wait before using it."""

    def __init__(self, rate: float, burst: int, clock=time.monotonic):
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self.tokens = float(burst)
        self.updated = clock()

    def _refill(self) -> None:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
        self.updated = now

    def wait_if_reserved(self) -> float:
        self._refill()
        return max(0.0, (1.0 - self.tokens) / self.rate)

    def reserve(self) -> float:
        wait = self.wait_if_reserved()
        self.tokens -= 1.0
        return wait


class PoolStats:
    def __init__(self) -> None:
        self.counts: Counter = Counter()
        self.latencies: list[float] = []

    def snapshot(self, reset: bool = False) -> dict:
        c = self.counts
        out = {f"judge/{k}": v for k, v in sorted(c.items())}
        out["judge/unknown_rate"] = c["unknown"] / c["verdicts"] if c["verdicts"] else None
        for q in (50, 90, 99):
            out[f"judge/latency_p{q}_s"] = float(np.percentile(self.latencies, q)) if self.latencies else None
        if reset:
            self.counts, self.latencies = Counter(), []
        return out


class EvaluatorPool:
    def __init__(self, cfg: EvaluatorConfig, seed: int = 0):
        pool = cfg.pool
        self.cfg = pool
        self.judge_cfg = cfg.judge
        self.judge = VLMJudge(cfg.judge)
        self.clients = make_judge_clients(cfg.judge, max_pool_connections=pool.max_concurrency)
        self.buckets = [TokenBucket(pool.rate_per_s, pool.burst) for _ in self.clients]
        self.executor = ThreadPoolExecutor(max_workers=pool.max_concurrency, thread_name_prefix="judge")
        self.rng = random.Random(seed)
        self.cache: OrderedDict[str, Verdict] = OrderedDict()
        self.inflight: dict[str, asyncio.Task] = {}
        self.stats_ = PoolStats()
        self._slots: asyncio.Semaphore | None = None  # made inside the actor's event loop

    async def judge_query(self, query: JudgeQuery) -> Verdict:
        system, parts = self.judge.messages(query)
        return await self._verdict(query.key, system, parts, self.judge.parse)

    async def fuzzy_match(self, answer: str, references: list[str]) -> Verdict:
        """WebArena's fuzzy_match check, asked of the same model under the same limits."""
        system, parts, key = fuzzy_match_query(answer, references)
        return await self._verdict(key, system, parts, parse_pae_verdict)

    async def _verdict(self, key: str, system, parts, parse) -> Verdict:
        self.stats_.counts["verdicts"] += 1
        cached = self.cache.get(key)
        if cached is not None:
            self.cache.move_to_end(key)
            self.stats_.counts["cache_hits"] += 1
            return dataclasses.replace(cached, calls=0, cached=True, latency_s=0.0)
        running = self.inflight.get(key)
        if running is not None:  # the same content is being judged: share that call
            self.stats_.counts["cache_hits"] += 1
            verdict = await asyncio.shield(running)
            return dataclasses.replace(verdict, calls=0, cached=True)
        task = asyncio.ensure_future(self._judge_within_deadline(system, parts, parse))
        self.inflight[key] = task
        try:
            verdict = await asyncio.shield(task)
        finally:
            self.inflight.pop(key, None)
        if verdict.success is None:
            self.stats_.counts["unknown"] += 1
        else:
            self.cache[key] = verdict
            while len(self.cache) > self.cfg.cache_size:
                self.cache.popitem(last=False)
        return verdict

    async def _judge_within_deadline(self, system, parts, parse) -> Verdict:
        t0 = time.monotonic()
        attempts = [0]
        try:
            return await asyncio.wait_for(self._attempts(system, parts, parse, attempts), self.cfg.deadline_s)
        except asyncio.TimeoutError:
            self.stats_.counts["errors/deadline"] += 1
            why = f"no verdict within evaluator.pool.deadline_s={self.cfg.deadline_s:g}s ({attempts[0]} calls made)"
            return self._unknown(why, t0, attempts[0], "deadline")

    async def _attempts(self, system, parts, parse, attempts: list[int]) -> Verdict:
        loop = asyncio.get_running_loop()
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.cfg.max_concurrency)
        t0 = time.monotonic()
        retries = 0
        while True:
            async with self._slots:
                # the token is taken after the slot, so calls start at the bucket's pace even when slots free up at once
                index = min(range(len(self.buckets)), key=lambda i: self.buckets[i].wait_if_reserved())
                await asyncio.sleep(self.buckets[index].reserve())
                attempts[0] += 1
                self.stats_.counts["calls"] += 1
                call = (self.clients[index].chat, system, parts, self.judge_cfg.max_tokens, self.judge_cfg.temperature)
                try:
                    reply = await loop.run_in_executor(self.executor, *call)
                    error = None
                except LLMError as e:
                    error = e
                except Exception as e:  # noqa: BLE001 - a bug or a bad request is an unknown verdict, said out loud
                    log.exception("judge call failed")
                    self.stats_.counts["errors/internal"] += 1
                    return self._unknown(f"judge call failed: {type(e).__name__}: {e}", t0, attempts[0], "internal")
            if error is None:
                break
            self.stats_.counts[f"errors/{error.kind}"] += 1
            if not error.retryable or retries >= self.cfg.max_retries:
                why = f"{error} (after {retries} retries)" if error.retryable else str(error)
                return self._unknown(why, t0, attempts[0], error.kind)
            delay = retry_delay(error, retries, self.cfg.base_delay_s, self.cfg.max_delay_s, self.rng)
            retries += 1
            self.stats_.counts["retries"] += 1
            await asyncio.sleep(delay)
        self.stats_.latencies.append(reply.latency_s)
        self.stats_.counts["input_tokens"] += reply.input_tokens or 0
        self.stats_.counts["output_tokens"] += reply.output_tokens or 0
        success, reason = parse(reply.text)
        if success is None:
            self.stats_.counts["errors/no_verdict"] += 1
        return Verdict(
            success,
            self.judge.source,
            reason,
            raw=reply.text,
            latency_s=time.monotonic() - t0,
            calls=attempts[0],
            error=None if success is not None else "no_verdict",
        )

    def _unknown(self, why: str, t0: float, calls: int, kind: str) -> Verdict:
        return Verdict(None, self.judge.source, why, latency_s=time.monotonic() - t0, calls=calls, error=kind)

    def stats(self, reset: bool = False) -> dict:
        return self.stats_.snapshot(reset)


RemoteEvaluatorPool = ray.remote(EvaluatorPool)


def start_pool(cfg: EvaluatorConfig, seed: int = 0):
    """The shared pool actor (async: thousands of queries may wait on it at once)."""
    return RemoteEvaluatorPool.options(name=POOL_NAME, num_cpus=0, max_concurrency=1000).remote(cfg, seed)


class PoolJudge:
    """The Evaluator contract over the pool, for a runner: builds the episode's query locally (only its
    downscaled screens cross the network) and waits for the verdict, never longer than the deadline."""

    def __init__(self, pool, judge_cfg: JudgeConfig, deadline_s: float):
        self.pool = pool
        self.judge_cfg = judge_cfg
        self.wait_s = deadline_s + 30.0  # the pool answers by its deadline; this covers a pool that is gone

    def judge(self, task: Task, trajectory: Trajectory) -> Verdict:
        return self._wait(self.pool.judge_query.remote(episode_query(self.judge_cfg, task, trajectory)))

    def fuzzy_match(self, answer: str, references: list[str]) -> bool | None:
        """WebArena's fuzzy_match (`rlsys.envs.web.webarena.FuzzyJudge`): None when no verdict could be had."""
        return self._wait(self.pool.fuzzy_match.remote(answer, list(references))).success

    def _wait(self, ref) -> Verdict:
        t0 = time.monotonic()
        try:
            return ray.get(ref, timeout=self.wait_s)
        except (ray.exceptions.GetTimeoutError, ray.exceptions.RayActorError) as e:
            why = f"the evaluator pool did not answer: {type(e).__name__}"
            return Verdict(None, POOL_NAME, why, latency_s=time.monotonic() - t0, error="pool")
