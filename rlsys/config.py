"""Experiment configuration: YAML with `extends:`, dotted overrides, typed validation, secrets.

Everything is checked before any process starts: an unknown key names itself and the closest
valid key, a wrong type names the key path and the type expected.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union

import yaml


class ConfigError(ValueError):
    """A configuration that cannot run; the message says which key or file and why."""


# ---------------------------------------------------------------------------------- schema


@dataclass
class RunConfig:
    name: str = "run"
    output_dir: str | None = None  # default: runs/<name>
    seed: int = 0
    mode: Literal["sync", "async"] = "sync"
    # online: collect and learn; offline: learn from `offline.data` only; off2on: the offline phase, then online
    # iterations with the offline data still in the replay buffer
    training: Literal["online", "offline", "off2on"] = "online"
    iterations: int = 10  # online iterations (the offline phase's length is the learner's)
    rollout_size: int = 32  # trajectories collected per iteration (sync) or per update (async)
    eval_every: int = 5
    eval_episodes: int = 30
    eval_at_start: bool = True
    checkpoint_every: int = 1
    keep_checkpoints: int = 3
    max_policy_lag: int | None = None  # async: trajectories older than this many versions are dropped
    episode_timeout_s: float = 120.0


@dataclass
class RayConfig:
    address: str | None = None  # None: start a local instance
    num_cpus: int | None = None
    dashboard: bool = True
    dashboard_host: str = "127.0.0.1"
    dashboard_port: int = 8265


@dataclass
class RunnersConfig:
    num: int = 2
    num_cpus: float = 0.5
    resource: str = "auto"  # custom Ray resource each runner asks one unit of; auto: android or browser by env.kind
    max_restarts: int = 20  # runner re-creations allowed over a run before it fails
    restart_backoff_s: float = 1.0  # a slot that keeps failing waits 1, 2, 4 ... s before its next runner
    restart_backoff_max_s: float = 60.0
    health_interval_s: float = 30.0  # every runner is asked status() this often...
    health_timeout_s: float = 60.0  # ...and replaced when it does not answer within this (0: no probes)
    start_warning_s: float = 120.0  # a runner still unplaced after this is reported (no free resource)


@dataclass
class AndroidConfig:
    """Android emulators (one per runner) started from an AVD and reset from its snapshot; see envs/android."""

    sdk_root: str | None = None  # default: $ANDROID_SDK_ROOT, then $ANDROID_HOME
    emulator: str | None = None  # the emulator binary; default: <sdk_root>/emulator/emulator
    avd: str = "rlsys_pixel_28"  # created by the user (README: "Android emulators")
    snapshot: str = "rlsys_home"  # loaded at boot and at every episode's reset
    emulator_args: list[str] = field(default_factory=lambda: ["-gpu", "swiftshader_indirect"])
    emulator_env: dict[str, str] = field(default_factory=dict)  # extra environment for emulator processes
    first_console_port: int = 5554  # emulator i uses console port 5554 + 2i and adb port one above
    max_emulators: int = 16  # per node
    adb_server_port: int = 5037
    console_token_file: str = "~/.emulator_console_auth_token"
    kvm_device: str = "/dev/kvm"  # "" skips the check (e.g. an ARM image under software emulation)
    boot_timeout_s: float = 300.0
    snapshot_timeout_s: float = 60.0
    health_timeout_s: float = 10.0
    devices: list[str] = field(default_factory=list)  # serials of running devices to use instead of starting any
    screenshot_scale: float = 0.5  # observations are downscaled by this factor (1.0: full resolution)
    settle_interval_s: float = (
        0.0  # after an action, extra wait between screenshots (0: back to back) until two are equal
    )
    unicode_input: Literal["adbkeyboard", "none"] = "adbkeyboard"  # how characters beyond ASCII are typed
    swipe_ms: int = 300
    browser_url: str = "https://www.google.com"  # the webshop suites' start page


@dataclass
class SimConfig:
    """`env.kind: sim` (envs/sim.py): an env that only sleeps, imitating a phone's or browser's latency.

    Latencies are lognormal: `median_s * exp(sigma * N(0, 1))` (sigma 0: always the median; 1: p99 about
    10x the median). A step that hangs, or draws a latency beyond `env.step_timeout_s`, waits
    `env.step_timeout_s` and raises EnvBrokenError, like a WebDriver or adb call that timed out."""

    reset_median_s: float = 0.2
    reset_sigma: float = 0.5
    step_median_s: float = 0.1
    step_sigma: float = 0.5
    hang_prob: float = 0.0  # per step
    success_prob: float = 0.1  # per step with a valid action: ends the episode, reward 1
    num_elements: int = 5  # numbered elements in each observation's ui_text
    seed: int = 0  # with the env's id, seeds every draw: same seed and id, same latencies and outcomes


@dataclass
class EnvConfig:
    kind: Literal["miniwob", "web", "android", "sim"] = "miniwob"
    action_space: Literal["element", "pae", "coords", "autoui", "cogagent"] = "element"
    max_steps: int = 5
    viewport: list[int] = field(default_factory=lambda: [1024, 768])  # exact pixels of the page area
    set_of_marks: bool = True  # draw numbered element boxes onto the screenshot
    history: int = 3  # previous steps shown in each observation
    step_timeout_s: float = 15.0  # every WebDriver or adb call
    settle_quiet_ms: int = 50  # web: the DOM must be unchanged this long after an action...
    settle_timeout_s: float = 3.0  # ...but no longer than this is waited
    wait_action_s: float = 1.0  # what the agent's `Wait` action waits
    headless: bool = True
    chromium: str = "/usr/bin/chromium"
    chromedriver: str = "/usr/bin/chromedriver"
    max_elements: int = 50
    # safety (web)
    allowed_domains: list[str] = field(default_factory=list)  # besides the task's start host
    allow_all_domains: bool = False
    new_tabs: Literal["follow", "close"] = "follow"
    download_max_mb: float = 20.0
    search_engine: str = "https://www.google.com/"
    # a self-hosted site (WebArena) reset between episodes: argv, run every `instance_reset_every`
    instance_reset_command: list[str] | None = None
    instance_reset_every: int = 0
    instance_reset_timeout_s: float = 600.0
    # MiniWoB++
    episode_time_limit_s: float = 60.0  # MiniWoB's in-page timer
    max_tabs: int = 8  # task pages kept open per browser
    android: AndroidConfig = field(default_factory=AndroidConfig)
    sim: SimConfig = field(default_factory=SimConfig)


@dataclass
class TasksConfig:
    suite: Literal["miniwob", "webvoyager", "webarena", "aitw-general", "aitw-webshop"] = "miniwob"
    train: list[str] = field(default_factory=lambda: ["click-test-2"])  # MiniWoB++ names, or ["all"]
    eval: list[str] | None = None  # default: the training tasks
    # web suites: a JSONL task file (web_name, id, ques, web[, eval]); AitW: a text file, one instruction per line
    file: str | None = None
    eval_file: str | None = None  # default: `file`
    url_map: dict[str, str] = field(default_factory=dict)  # placeholders such as __SHOPPING__ -> base URL
    sampling: Literal["random", "sequential"] = "random"


@dataclass
class LoraConfig:
    enabled: bool = False
    r: int = 256  # PAE: r = alpha = 256, dropout 0.05
    alpha: int = 256
    dropout: float = 0.05
    target_modules: list[str] | None = None  # None: every linear layer of the language model


@dataclass
class ApiConfig:
    """A hosted model acting as the policy (zero-shot collection and evaluation)."""

    provider: Literal["bedrock", "openai"] = "openai"
    model_id: str = ""
    endpoint_url: str | None = None  # openai: required (e.g. http://127.0.0.1:8000/v1); bedrock: optional
    region: str = "us-east-1"  # bedrock
    auth_env: str | None = "OPENAI_API_KEY"  # openai: the environment variable holding the bearer key
    max_tokens: int = 512
    timeout_s: float = 60.0
    max_retries: int = 3


@dataclass
class ServerConfig:
    """`placement: server`: shared inference actors that batch requests from every runner."""

    num_replicas: int = 1
    max_batch: int = 32
    max_wait_ms: float = 5.0  # how long a request waits for others to fill a batch
    num_gpus: float = 0.0
    num_cpus: float = 1.0


@dataclass
class PolicyConfig:
    kind: Literal["tiny_t5", "autoui", "vlm", "api", "random"] = "tiny_t5"
    path: str | None = None  # a save_pretrained folder to start from; None: a fresh model built from config
    arch: Literal["llava", "qwen2_vl"] = "llava"  # vlm built from config (tiny preset) when path is None
    # sizes of models built from config
    d_model: int = 64
    d_ff: int = 128
    num_layers: int = 2
    num_heads: int = 4
    image_size: int = 32  # input resolution of vision towers built from config
    # autoui
    image_feature_dim: int = 1408  # pooled BLIP-2 ViT-g feature
    vision_path: str | None = None  # a Blip2VisionModel folder; None: a tiny one built from config
    # decoding
    temperature: float = 1.0
    max_new_tokens: int = 32
    max_prompt_tokens: int = 384
    constrained: bool = True  # decode inside the env's action grammar when it publishes one
    prompt: str = "auto"  # vlm/api: a template name (pae_agent, element_agent) or a .txt file; auto: by action space
    # training and memory
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"  # auto: bf16 on GPU, fp32 on CPU
    load_in_4bit: bool = False
    gradient_checkpointing: bool = False
    lora: LoraConfig = field(default_factory=LoraConfig)
    publish: Literal["auto", "full", "adapter"] = "auto"  # auto: adapter-only when LoRA freezes the base
    placement: Literal["runner", "server"] = "runner"
    server: ServerConfig = field(default_factory=ServerConfig)
    api: ApiConfig = field(default_factory=ApiConfig)


@dataclass
class DigiRLConfig:
    """DigiRL's critics, advantages and curriculum (REFERENCE.md §2.2); defaults are the published ones."""

    gamma: float = 0.5
    advantage: Literal["doubly_robust", "digirl_compat"] = "doubly_robust"  # the paper's form / the released code's
    lam: float = 0.5  # doubly_robust: weight of the trajectory outcome, lam ** (steps to the end)
    advantage_threshold: float = 0.05  # actor data: transitions whose advantage exceeds this
    curriculum_quantile: float = 0.9  # actor data: trajectories whose reward - p_instr(task) is in the top 10%
    critic_lr: float = 1e-4
    instruction_critic_steps: int = 5  # per online iteration
    step_critic_steps: int = 5
    actor_steps: int = 20
    offline_instruction_critic_iterations: int = 20  # the offline phase, run in this order
    offline_step_critic_iterations: int = 20
    offline_actor_iterations: int = 30
    validation_fraction: float = 0.2  # trajectories held out of critic training, for validation metrics
    text_encoder_path: str | None = None  # a RoBERTa-base folder; None: a tiny encoder built from config
    text_hidden: int = 64  # size of the encoder built from config
    max_text_tokens: int = 256
    freeze_step_encoder: bool = True  # the step critic trains its heads only
    critic_hidden: int | None = None  # step critic MLP width; None: the text encoder's hidden size
    image_feature_dim: int = 1408  # pooled BLIP-2 ViT-g feature of one screenshot (two are stacked)
    vision_path: str | None = None  # a Blip2VisionModel folder; None: a tiny one built from config
    image_size: int = 32  # input resolution of the vision tower built from config


@dataclass
class DigiQRepresentationConfig:
    """Where z(s, a) comes from (`python -m rlsys.digiq represent`) and what the critic accepts."""

    model: str | None = None  # the (fine-tuned) VLM folder, or the model id the extraction printed
    method: Literal["answer_state", "generated_mean"] = "answer_state"
    batch_size: int = 8
    max_new_tokens: int = 8  # generated_mean: tokens generated per pair


@dataclass
class DigiQCandidatesConfig:
    """Candidate actions per state (`python -m rlsys.digiq candidates`), sampled from `policy`."""

    k: int = 16  # candidates per state; index 0 is the dataset action
    temperature: float = 1.2
    max_redraws: int = 4  # draws per slot before an invalid sample is kept out of the set
    batch_size: int = 16


@dataclass
class DigiQConfig:
    """Digi-Q (REFERENCE.md §6): a TD critic on frozen VLM representations, then Best-of-N actor
    extraction. Defaults are the published ones; the actor's learning rate is `learner.lr`."""

    gamma: float = 0.95
    tau: float = 0.1  # Polyak rate of the target heads, per critic step
    critic_lr: float = 1e-5
    critic_steps: int = 100  # critic optimizer steps per offline iteration
    actor_steps: int = 100
    critic_iterations: int = 8  # 8 x 100 = the published 800 critic steps
    actor_iterations: int = 9  # 9 x 100 = the published 900 actor steps
    critic_path: str | None = None  # a finished critic stage (<run>/critic) to reuse; skips the critic phase
    aggregate: Literal["min", "max"] = "min"  # over the two Q heads and the two V heads when scoring
    best_of_n: int = 16  # candidates scored per state, redrawn for every sample
    advantage_threshold: float = 0.10  # delta: 0.10 general, 0.05 webshop
    weighting: Literal["sft", "pg", "awr"] = "sft"  # sft: 1; pg: A* x pg_scale; awr: exp(A* / awr_beta)
    pg_scale: float = 1.0
    awr_beta: float = 1.0
    dropout: float = 0.1  # in the critic heads while training; always off when scoring
    critic_hidden: int = 256
    text_encoder_path: str | None = None  # a RoBERTa folder; None: a tiny encoder built from config
    text_hidden: int = 64
    max_text_tokens: int = 128
    image_feature_dim: int = 1408  # pooled BLIP-2 ViT-g feature of one screenshot (two are stacked)
    vision_path: str | None = None
    image_size: int = 32
    validation_fraction: float = 0.1
    representation: DigiQRepresentationConfig = field(default_factory=DigiQRepresentationConfig)
    candidates: DigiQCandidatesConfig = field(default_factory=DigiQCandidatesConfig)


@dataclass
class LearnerConfig:
    algorithm: Literal["filtered_bc", "sft", "digirl", "digiq"] = "filtered_bc"
    # filtered_bc: `success` keeps successes; `quantile` (DigiRL's baseline) keeps trajectory rewards at or above
    # the `quantile` of rewards, and successes only when few succeed; `shortest` (PAE) keeps, per task, the
    # `shortest_fraction` of its successes with the fewest steps.
    filter: Literal["success", "quantile", "shortest"] = "success"
    quantile: float = 0.9
    shortest_fraction: float = 0.2
    prob_clamp: bool = False  # DigiRL: each token's probability clamped to [0.001, 0.99] inside the log
    lr: float = 1e-3  # the policy's
    batch_size: int = 32
    grad_accumulation: int = 1  # micro-batches of `batch_size` per optimizer step
    updates_per_iteration: int = 20  # filtered_bc / sft optimizer steps
    grad_clip: float = 1.0  # per module: each network's own gradient norm
    sample_trajectories: int = 512  # trajectories drawn from the replay buffer per iteration
    offline_iterations: int = 0  # filtered_bc / sft: iterations of the offline phase (digirl: digirl.offline_*)
    # Clipped importance weights min(importance_clip, pi/mu) on the actor loss; auto: on in async mode,
    # off in sync mode (the papers' recipes)
    off_policy_correction: Literal["auto", "on", "off"] = "auto"
    importance_clip: float = 1.0
    digirl: DigiRLConfig = field(default_factory=DigiRLConfig)
    digiq: DigiQConfig = field(default_factory=DigiQConfig)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    num_cpus: float = 1.0
    num_learners: int = 1  # a data-parallel group: one process (and one GPU, when there are GPUs) each
    resource: str | None = None  # a custom Ray resource each learner asks one unit of (clusters/: "learner")
    group_timeout_s: float = 600.0  # how long a collective waits for the group's other processes


@dataclass
class OfflineConfig:
    data: list[str] = field(default_factory=list)  # trajectory shard folders or files (python -m rlsys.data import-…)


@dataclass
class JudgeConfig:
    """A VLM judge (REFERENCE.md §4): which model is asked, and how it is prompted."""

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
    """PAE's task proposer (`python -m rlsys.propose_tasks`): an LLM writes tasks per site from one example."""

    llm: ApiConfig = field(default_factory=lambda: ApiConfig(max_tokens=4096))  # provider bedrock or openai
    examples: str | None = None  # a JSONL task file holding one example task per site
    tasks_per_site: int = 25
    output: str | None = None  # the JSONL file written; default: <run folder>/proposed_tasks.jsonl
    prompt: str = "propose_tasks"  # a packaged template or a .txt file
    temperature: float = 1.0
    every: int = 0  # during training: propose new tasks every this many online iterations (0: never)


@dataclass
class ReplayConfig:
    capacity: int = 2000  # trajectories
    max_bytes: int = 1 << 30


@dataclass
class MetricsConfig:
    wandb: bool = False
    wandb_project: str = "rlsys"
    wandb_mode: Literal["offline", "online", "disabled"] = "offline"
    wandb_api_key: str | None = None  # use ${env:WANDB_API_KEY}; never a literal key
    progress: bool = True


@dataclass
class Config:
    run: RunConfig = field(default_factory=RunConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    runners: RunnersConfig = field(default_factory=RunnersConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    tasks: TasksConfig = field(default_factory=TasksConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    offline: OfflineConfig = field(default_factory=OfflineConfig)
    evaluator: EvaluatorConfig = field(default_factory=EvaluatorConfig)
    proposer: ProposerConfig = field(default_factory=ProposerConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)

    @property
    def output_dir(self) -> Path:
        return Path(self.run.output_dir or os.path.join("runs", self.run.name))


# ---------------------------------------------------------------------------------- loading

_ENV_REF = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}")
_SECRET_WORDS = {"key", "token", "secret", "password", "passwd", "credential", "credentials"}


def is_secret_name(name: str) -> bool:
    """`api_key`, `aws_secret_access_key`, `token`: yes. `max_new_tokens`, `keyboard`: no."""
    return bool(_SECRET_WORDS & set(str(name).lower().split("_")))


REDACTED = "***redacted***"


def read_yaml_with_extends(path: str | os.PathLike, _seen: tuple = ()) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    if path.resolve() in _seen:
        raise ConfigError(f"config `extends` cycle through {path}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    parents = data.pop("extends", None) or []
    if isinstance(parents, str):
        parents = [parents]
    merged: dict = {}
    for parent in parents:
        merged = deep_merge(merged, read_yaml_with_extends(path.parent / parent, _seen + (path.resolve(),)))
    return deep_merge(merged, data)


def deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply `a.b.c=value` overrides; values are parsed as YAML (`1e-5`, `[1, 2]`, `null`)."""
    data = deep_merge({}, data)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key.path=value")
        key, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            value = raw
        node = data
        parts = key.strip().split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {key!r}: {p!r} is not a section")
        node[parts[-1]] = value
    return data


def load_config(path: str | os.PathLike | None, overrides: list[str] = (), data: dict | None = None) -> Config:
    return build(Config, unresolved_dict(path, overrides, data))


def check_consistency(cfg: Config) -> None:
    """Rules that span sections."""
    android_spaces = ("autoui", "cogagent")
    if (cfg.env.kind == "android") != (cfg.env.action_space in android_spaces):
        wanted = "autoui or cogagent" if cfg.env.kind == "android" else "element, pae or coords"
        raise ConfigError(f"env.kind = {cfg.env.kind!r} takes env.action_space {wanted}, got {cfg.env.action_space!r}")
    if cfg.policy.kind == "autoui" and cfg.env.action_space not in ("coords", "autoui"):
        raise ConfigError(
            f"policy.kind = 'autoui' writes AutoUI actions: env.action_space must be autoui (Android) or coords (web), "
            f"got {cfg.env.action_space!r}"
        )
    if cfg.runners.resource == "auto":
        cfg.runners.resource = {"android": "android", "sim": "sim"}.get(cfg.env.kind, "browser")
    if cfg.policy.kind == "random" and cfg.env.action_space != "element":
        raise ConfigError(
            f"policy.kind = 'random' clicks one of the observation's numbered elements (`click [k]`); "
            f"set env.action_space = 'element' (got {cfg.env.action_space!r})"
        )
    if cfg.policy.kind == "tiny_t5" and cfg.env.action_space != "element":
        raise ConfigError(
            f"policy.kind = 'tiny_t5' decodes with the element grammar; set env.action_space = 'element' "
            f"(got {cfg.env.action_space!r})"
        )
    if cfg.policy.prompt == "auto":
        if cfg.policy.kind in ("vlm", "api") and cfg.env.action_space == "coords":
            raise ConfigError("no packaged prompt for env.action_space 'coords'; set policy.prompt to a .txt template")
        cfg.policy.prompt = {
            "element": "element_agent",
            "autoui": "android_autoui",
            "cogagent": "android_cogagent",
        }.get(cfg.env.action_space, "pae_agent")
    if len(cfg.env.viewport) != 2 or min(cfg.env.viewport) <= 0:
        raise ConfigError(f"env.viewport must be [width, height] in pixels, got {cfg.env.viewport}")
    check_training(cfg)
    check_evaluator(cfg.evaluator)
    if cfg.proposer.every:
        if cfg.tasks.suite == "miniwob":
            raise ConfigError("proposer.every: MiniWoB++ tasks are fixed; proposing tasks needs a web suite")
        if not cfg.proposer.llm.model_id:
            raise ConfigError("proposer.every is set but proposer.llm.model_id names no model")


def check_evaluator(ev: EvaluatorConfig) -> None:
    judge, pool = ev.judge, ev.pool
    if ev.kind == "judge" and judge.provider is None:
        raise ConfigError("evaluator.kind = 'judge' needs evaluator.judge.provider (gemini, bedrock or openai)")
    if ev.kind == "function" and not ev.function:
        raise ConfigError(
            f"evaluator.kind = 'function' needs evaluator.function = 'package.module:callable', got {ev.function!r}"
        )
    if judge.every_step and ev.kind != "judge":
        raise ConfigError(f"evaluator.judge.every_step needs evaluator.kind = 'judge' (got {ev.kind!r})")
    if judge.provider is not None:
        if not judge.model_id:
            raise ConfigError(f"evaluator.judge.model_id must name the judge model (provider {judge.provider!r})")
        if judge.provider == "openai" and not judge.endpoint_url:
            raise ConfigError(
                "evaluator.judge.endpoint_url is required for provider 'openai' (e.g. http://127.0.0.1:8000/v1)"
            )
    if judge.screenshots < 1 or judge.downscale < 1:
        raise ConfigError("evaluator.judge.screenshots and evaluator.judge.downscale must be at least 1")
    if pool.max_concurrency < 1 or pool.burst < 1 or pool.rate_per_s <= 0 or pool.deadline_s <= 0:
        raise ConfigError(
            "evaluator.pool: max_concurrency and burst must be at least 1, rate_per_s and deadline_s above 0"
        )


def check_training(cfg: Config) -> None:
    learner, training = cfg.learner, cfg.run.training
    if training != "online" and not cfg.offline.data:
        raise ConfigError(f"run.training = {training!r} needs offline.data: trajectory shard folders to learn from")
    if learner.algorithm == "digirl":
        if learner.offline_iterations:
            raise ConfigError(
                "learner.offline_iterations is for filtered_bc / sft; DigiRL's offline phase is "
                "learner.digirl.offline_{instruction_critic,step_critic,actor}_iterations"
            )
    elif learner.algorithm == "digiq":
        check_digiq(cfg)
    elif training != "online" and learner.offline_iterations < 1:
        raise ConfigError(f"run.training = {training!r} needs learner.offline_iterations >= 1")
    for key in ("quantile", "shortest_fraction"):
        if not 0 <= getattr(learner, key) <= 1:
            raise ConfigError(f"learner.{key} must be within [0, 1], got {getattr(learner, key)}")
    if learner.batch_size < 1 or learner.grad_accumulation < 1:
        raise ConfigError("learner.batch_size and learner.grad_accumulation must be at least 1")
    if learner.num_learners < 1:
        raise ConfigError(f"learner.num_learners must be at least 1, got {learner.num_learners}")
    if learner.num_learners > learner.batch_size:
        raise ConfigError(
            f"learner.num_learners ({learner.num_learners}) exceeds learner.batch_size ({learner.batch_size}): "
            "some learners would train on nothing"
        )


def check_digiq(cfg: Config) -> None:
    q = cfg.learner.digiq
    if cfg.run.training != "offline":
        raise ConfigError("learner.algorithm = 'digiq' learns from a fixed dataset: set run.training = 'offline'")
    if not q.representation.model:
        raise ConfigError(
            "learner.digiq.representation.model: name the VLM folder (or the model id) the dataset's representations "
            "came from (python -m rlsys.digiq represent)"
        )
    if not 0 < q.tau <= 1 or not 0 <= q.gamma <= 1:
        raise ConfigError(f"learner.digiq.tau must be in (0, 1] and gamma in [0, 1], got {q.tau} and {q.gamma}")
    if q.best_of_n < 1 or q.candidates.k < 1:
        raise ConfigError("learner.digiq.best_of_n and learner.digiq.candidates.k must be at least 1")
    if q.actor_iterations < 1 or (q.critic_iterations < 1 and not q.critic_path):
        raise ConfigError(
            "learner.digiq needs actor_iterations >= 1 and critic_iterations >= 1 (or critic_path, a finished critic)"
        )


def digiq_critic_iterations(q: DigiQConfig) -> int:
    """Iterations of Digi-Q's critic phase: none when a finished critic is reused."""
    return 0 if q.critic_path else q.critic_iterations


def offline_phase_length(cfg: Config) -> int:
    """Iterations of the offline phase (0 when training online)."""
    if cfg.run.training == "online":
        return 0
    if cfg.learner.algorithm == "digirl":
        d = cfg.learner.digirl
        return d.offline_instruction_critic_iterations + d.offline_step_critic_iterations + d.offline_actor_iterations
    if cfg.learner.algorithm == "digiq":
        return digiq_critic_iterations(cfg.learner.digiq) + cfg.learner.digiq.actor_iterations
    return cfg.learner.offline_iterations


def total_iterations(cfg: Config) -> int:
    return offline_phase_length(cfg) + (cfg.run.iterations if cfg.run.training != "offline" else 0)


PATH_KEYS = ("policy.path", "policy.vision_path", "evaluator.judge.exemplars")
DIGIRL_PATH_KEYS = ("learner.digirl.text_encoder_path", "learner.digirl.vision_path")
DIGIQ_PATH_KEYS = ("learner.digiq.text_encoder_path", "learner.digiq.vision_path", "learner.digiq.critic_path")


def check_paths(cfg: Config, offline_data: bool = True) -> None:
    """Every file or folder the config names must exist; the error names the key (run before Ray starts)."""
    keys = PATH_KEYS + (DIGIRL_PATH_KEYS if cfg.learner.algorithm == "digirl" else ())
    keys += DIGIQ_PATH_KEYS if cfg.learner.algorithm == "digiq" else ()
    keys += ("proposer.examples",) if cfg.proposer.every else ()
    named = [(key, _get(cfg, key)) for key in keys]
    if offline_data and cfg.run.training != "online":
        named += [(f"offline.data[{i}]", p) for i, p in enumerate(cfg.offline.data)]
    model = cfg.learner.digiq.representation.model
    if cfg.learner.algorithm == "digiq" and model and "@" not in model and not Path(model).is_dir():
        raise ConfigError(
            f"learner.digiq.representation.model: {model} is neither a model folder nor a model id "
            "(name@hash, as `python -m rlsys.digiq represent` prints it)"
        )
    for key, value in named:
        if value and not Path(value).exists():
            raise ConfigError(f"{key}: {value} does not exist (set it to a local path, e.g. {key}=/path/to/it)")


def _get(cfg: Config, dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def build(cls: type, data: Any, prefix: str = "") -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix or 'config'}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in data.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if key not in names:
            close = closest(str(key), names)
            hint = f"; did you mean {(prefix + '.' if prefix else '') + close!r}?" if close else ""
            raise ConfigError(f"unknown config key {path!r}{hint} (valid: {', '.join(names)})")
        kwargs[key] = _coerce(hints[key], value, path)
    built = cls(**kwargs)
    if cls is Config:
        check_consistency(built)
    return built


def closest(key: str, names: list[str]) -> str | None:
    """The valid name a mistyped key most likely meant: a near spelling, else a shared stem."""
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    if close:
        return close[0]
    stems = [n for n in names if key.startswith(n) or n.startswith(key) or n in key or key in n]
    return max(stems, key=len) if stems else None


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is list:
        return f"list of {_type_name(typing.get_args(tp)[0])}"
    if origin is dict:
        return "mapping of " + " to ".join(_type_name(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def _coerce(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    if isinstance(value, str) and _ENV_REF.search(value):
        value = resolve_env(value, path)
    if dataclasses.is_dataclass(tp):
        return build(tp, value, path)
    if origin in (Union, types.UnionType):
        for arg in typing.get_args(tp):
            try:
                return _coerce(arg, value, path)
            except ConfigError:
                continue
        raise _type_error(path, tp, value)
    if tp is type(None):
        if value is None:
            return None
        raise _type_error(path, tp, value)
    if origin is Literal:
        if value in typing.get_args(tp):
            return value
        raise _type_error(path, tp, value)
    if origin is list:
        if not isinstance(value, list):
            raise _type_error(path, tp, value)
        (item,) = typing.get_args(tp)
        return [_coerce(item, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise _type_error(path, tp, value)
        key_type, value_type = typing.get_args(tp)
        return {_coerce(key_type, k, path): _coerce(value_type, v, f"{path}.{k}") for k, v in value.items()}
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if tp is float and isinstance(value, str):
        try:  # YAML reads 1e-5 (no dot) as a string
            return float(value)
        except ValueError:
            pass
    if tp in (int, str, bool) and isinstance(value, tp) and not (tp is int and isinstance(value, bool)):
        return value
    raise _type_error(path, tp, value)


def _type_error(path: str, tp: Any, value: Any) -> ConfigError:
    return ConfigError(f"config key {path!r} must be {_type_name(tp)}, got {value!r} ({type(value).__name__})")


def resolve_env(value: str, path: str) -> str:
    def sub(m: re.Match) -> str:
        name = m.group(1)
        if name not in os.environ:
            raise ConfigError(f"config key {path!r} refers to environment variable {name}, which is not set")
        return os.environ[name]

    return _ENV_REF.sub(sub, value)


def redacted_dict(raw: dict, _path: str = "") -> dict:
    """The config as a mapping fit to write to disk: `${env:…}` references stay references,
    and literal values under secret-looking names are replaced."""
    out = {}
    for k, v in raw.items():
        if isinstance(v, dict):
            out[k] = redacted_dict(v, f"{_path}{k}.")
        elif isinstance(v, str) and _ENV_REF.search(v):
            out[k] = v
        elif v is not None and is_secret_name(k):
            out[k] = REDACTED
        else:
            out[k] = v
    return out


def unresolved_dict(path: str | os.PathLike | None, overrides: list[str] = (), data: dict | None = None) -> dict:
    """The merged, overridden mapping before `${env:…}` resolution: what goes to disk."""
    raw = read_yaml_with_extends(path) if path is not None else (data or {})
    return apply_overrides(raw, list(overrides))


def to_dict(cfg: Config) -> dict:
    return dataclasses.asdict(cfg)


def save_config(raw: dict, cfg: Config, dest: Path) -> None:
    """Write the fully resolved config (defaults filled in) with secrets redacted."""
    full = deep_merge(to_dict(cfg), _only_env_refs(raw))
    dest.write_text(yaml.safe_dump(redacted_dict(full), sort_keys=False))


def _only_env_refs(raw: dict) -> dict:
    out = {}
    for k, v in raw.items():
        if isinstance(v, dict):
            sub = _only_env_refs(v)
            if sub:
                out[k] = sub
        elif isinstance(v, str) and _ENV_REF.search(v):
            out[k] = v
    return out
