"""Who decides an episode's outcome (`evaluator`: checks, VLM judges and their pool) and PAE's task proposer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rlsys.config.policy import ApiConfig


@dataclass
class JudgeConfig:
    """A VLM judge (docs/evaluators.md#judges): which model is asked, and how it is prompted."""

    provider: Literal["gemini", "bedrock", "openai"] | None = None  # None: no judge
    model_id: str = ""
    endpoint_url: str | None = None  # gemini: Google's by default; openai: required; bedrock: optional
    region: str = "us-east-1"  # bedrock; credentials come from the standard AWS chain
    # environment variables holding API keys, one credential (and one rate limit) each;
    # empty: GEMINI_API_KEY for gemini, OPENAI_API_KEY for openai (sent only when set)
    auth_env: list[str] = field(default_factory=list)
    style: Literal["digirl", "pae"] = "pae"  # digirl: few-shot, current screen, `Status:`; pae: answer + last screens
    prompt: str = "auto"  # a packaged template (digirl_judge, pae_judge) or a .txt file; auto: by style
    exemplars: str | None = None  # digirl: a folder holding exemplars.jsonl and its screenshots
    screenshots: int = 3  # pae: the last k screenshots
    downscale: int = 4  # digirl: the screenshot is shrunk this many times per side
    every_step: bool = False  # judge the screen after every step (DigiRL); a success verdict ends the episode
    max_tokens: int = 1000
    temperature: float = 0.0
    timeout_s: float = 60.0  # one call


@dataclass
class EvaluatorPoolConfig:
    """The shared actor every judge call goes through."""

    max_concurrency: int = 16  # calls in flight at once
    rate_per_s: float = 1.0  # calls per second, per credential
    burst: int = 1  # calls a credential may make at once after a quiet spell
    max_retries: int = 5  # on 429, 5xx and timeouts, with jittered exponential backoff
    base_delay_s: float = 1.0
    max_delay_s: float = 30.0
    deadline_s: float = 300.0  # one verdict, retries and waiting for the rate limit included
    cache_size: int = 10000  # verdicts kept, keyed by judge, task, answer and screenshot hashes


@dataclass
class EvaluatorConfig:
    """Who decides an episode's outcome. `env`: the env's own check (MiniWoB++'s page reward, WebArena
    checks); `judge`: the VLM judge for every answered episode (or every step); `function`: a Python hook
    (`package.module:callable`, given the task and trajectory); `auto`: the env's check where there is one,
    the judge (when a provider is set) for episodes the env cannot score."""

    kind: Literal["auto", "env", "judge", "function"] = "auto"
    function: str | None = None
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    pool: EvaluatorPoolConfig = field(default_factory=EvaluatorPoolConfig)

    @property
    def uses_judge(self) -> bool:
        return self.kind == "judge" or (self.kind == "auto" and self.judge.provider is not None)


@dataclass
class ProposerConfig:
    """PAE's task proposer (`rlsys-propose-tasks`): an LLM writes tasks per site from one example."""

    llm: ApiConfig = field(default_factory=lambda: ApiConfig(max_tokens=4096))  # provider bedrock or openai
    examples: str | None = None  # a JSONL task file holding one example task per site
    tasks_per_site: int = 25
    output: str | None = None  # the JSONL file written; default: <run folder>/proposed_tasks.jsonl
    prompt: str = "propose_tasks"  # a packaged template or a .txt file
    temperature: float = 1.0
    every: int = 0  # during training: propose new tasks every this many online iterations (0: never)
