"""A hosted model (Claude on Bedrock, or any OpenAI-compatible endpoint) acting as the policy."""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rlsys.config import PolicyConfig
from rlsys.core.types import ActionSample, Observation
from rlsys.llm import ChatClient, ChatReply, LLMError, make_client, with_retries
from rlsys.policies.prompts import agent_prompt
from rlsys.policies.weightless import WeightlessPolicy

CONFIG_NAME = "api_policy.json"


class ApiPolicyError(LLMError):
    """`act` could not get a reply for one or more observations, even after retries.

    `kind` is the first failure's kind; `errors` maps each failed observation's index to its error,
    and `samples` holds the replies that did arrive (None at the failed indices), so a caller acting
    for several episodes can end only the ones that failed (as `env_error`) and keep the rest.
    """

    def __init__(self, errors: dict[int, LLMError], samples: list[ActionSample | None], model: str):
        first_index = min(errors)
        first = errors[first_index]
        detail = f"observation {first_index}: {first}"
        if len(errors) > 1:
            detail += f" (and {len(errors) - 1} more)"
        super().__init__(
            first.kind,
            f"api policy {model}: {len(errors)} of {len(samples)} calls failed after retries; {detail}",
            status=first.status,
        )
        self.retries = first.retries
        self.errors = errors
        self.samples = samples


class ApiAgentPolicy(WeightlessPolicy):
    """The PAE agent prompt plus the screenshot, answered by a hosted model in `Thought: ... Action: ...`.

    For zero-shot collection and evaluation only: a hosted model gives no log-probabilities
    (`ActionSample.logprob` is None) and has no weights here, so `log_probs` / `token_logprobs`
    raise and `state_dict()` is `{}`. `version` stays 0 unless a caller sets it.

    Failures are never turned into an action: when a call still fails after `policy.api.max_retries`
    retries (rate limits, 5xx, timeouts) or fails for good (malformed reply, 4xx), `act` raises
    `ApiPolicyError` with the error kind. An empty or invented action would reach the environment as a
    parse error and look like the agent failing; the caller should end the episode as `env_error`.
    """

    SAVED_AS = (CONFIG_NAME,)  # what save_pretrained writes that marks a folder as this kind (see HFPolicy)

    def __init__(
        self,
        cfg: PolicyConfig,
        client: ChatClient | None = None,
        seed: int = 0,
        max_concurrency: int = 8,
        base_delay_s: float = 0.5,
        max_delay_s: float = 20.0,
        system: str | None = None,
    ):
        self.cfg = cfg
        self.api = cfg.api
        self.client = client if client is not None else make_client(cfg.api, max_pool_connections=max_concurrency)
        self.max_concurrency = max(1, max_concurrency)
        self.base_delay_s = base_delay_s
        self.max_delay_s = max_delay_s
        self.system = system
        self.version = 0
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._stats = {
            "calls": 0,  # observations sent (one model call each, retries not counted)
            "requests": 0,  # HTTP requests, retries included
            "retries": 0,
            "failed_calls": 0,
            "latency_s": 0.0,  # model latency of the successful requests
            "wall_s": 0.0,  # per call, including retries and backoff
            "input_tokens": 0,
            "output_tokens": 0,
        }
        self._errors: Counter[str] = Counter()  # calls that failed for good, by kind
        self._retried: Counter[str] = Counter()  # transient errors that were retried, by kind

    @classmethod
    def create(cls, cfg: PolicyConfig, seed: int = 0, device: str = "cpu") -> ApiAgentPolicy:
        """`device` is ignored (nothing runs locally); `seed` seeds the backoff jitter."""
        return cls(cfg, seed=seed)

    def __repr__(self) -> str:
        return f"ApiAgentPolicy({self.client!r})"

    # -- acting

    def act(self, observations: Sequence[Observation], greedy: bool = False) -> list[ActionSample]:
        temperature = 0.0 if greedy else float(self.cfg.temperature)
        observations = list(observations)
        if len(observations) <= 1 or self.max_concurrency == 1:
            results = [self._call(o, temperature) for o in observations]
        else:
            with ThreadPoolExecutor(min(self.max_concurrency, len(observations)), "api-policy") as pool:
                results = list(pool.map(lambda o: self._call(o, temperature), observations))
        errors = {i: r for i, r in enumerate(results) if isinstance(r, LLMError)}
        samples = [
            None if isinstance(r, LLMError) else ActionSample(r.text, None, self.version, prompt=self.prompt(o))
            for r, o in zip(results, observations)
        ]
        if errors:
            raise ApiPolicyError(errors, samples, f"{self.api.provider}:{self.api.model_id}")
        return samples

    def prompt(self, obs: Observation) -> str:
        """The messages sent for `obs`, as text: the system prompt, then the user turn (after the screenshot)."""
        system = f"system: {self.system}\n\n" if self.system else ""
        image = "[screenshot]\n" if obs.screenshot_png else ""
        return f"{system}user: {image}{agent_prompt(obs, self.cfg.prompt)}"

    def _call(self, obs: Observation, temperature: float) -> ChatReply | LLMError:
        parts: list[str | bytes] = [obs.screenshot_png] if obs.screenshot_png else []
        parts.append(agent_prompt(obs, self.cfg.prompt))

        def once() -> ChatReply:
            with self._lock:
                self._stats["requests"] += 1
            return self.client.chat(self.system, parts, self.api.max_tokens, temperature)

        def on_retry(err: LLMError, delay: float) -> None:
            with self._lock:
                self._stats["retries"] += 1
                self._retried[err.kind] += 1

        t0 = time.monotonic()
        try:
            reply, _ = with_retries(
                once, self.api.max_retries, self.base_delay_s, self.max_delay_s, self._rng, on_retry=on_retry
            )
        except LLMError as e:
            with self._lock:
                self._stats["calls"] += 1
                self._stats["failed_calls"] += 1
                self._stats["wall_s"] += time.monotonic() - t0
                self._errors[e.kind] += 1
            return e
        with self._lock:
            self._stats["calls"] += 1
            self._stats["wall_s"] += time.monotonic() - t0
            self._stats["latency_s"] += reply.latency_s
            self._stats["input_tokens"] += reply.input_tokens or 0
            self._stats["output_tokens"] += reply.output_tokens or 0
        return reply

    def stats(self) -> dict:
        """Counters since creation: calls, requests, retries, failed_calls, errors by kind (calls that
        failed for good), retried by kind, total and mean latency, token counts."""
        with self._lock:
            out = dict(self._stats)
            out["errors"] = dict(self._errors)
            out["retried"] = dict(self._retried)
        ok = out["calls"] - out["failed_calls"]
        out["mean_latency_s"] = out["latency_s"] / ok if ok else 0.0
        return out

    # -- learning: a hosted model has no weights here

    def token_logprobs(self, observations: Sequence[Observation], actions: Sequence[str]):
        raise NotImplementedError("api policies have no log-probs; use them for collection and evaluation only")

    def log_probs(self, observations: Sequence[Observation], actions: Sequence[str]):
        raise NotImplementedError("api policies have no log-probs; use them for collection and evaluation only")

    def load_state_dict(self, state: dict, version: int | None = None) -> None:
        if state:
            raise ValueError(f"api policies have no weights; expected an empty state dict, got {len(state)} keys")
        if version is not None:
            self.version = version

    def save_pretrained(self, path: str | os.PathLike) -> None:
        """Write `api_policy.json` (provider and model id, never a key) so checkpoints still work."""
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        meta = {"kind": "api", "provider": self.api.provider, "model_id": self.api.model_id, "version": self.version}
        (folder / CONFIG_NAME).write_text(json.dumps(meta, indent=2) + "\n")
