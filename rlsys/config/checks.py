"""Rules that span keys or sections, and the files a config names; every error names the key."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

from rlsys.config.bounds import check_bounds
from rlsys.config.errors import ConfigError
from rlsys.config.evaluator import EvaluatorConfig
from rlsys.config.hub_id import is_hub_id
from rlsys.config.learner import LearnerConfig
from rlsys.config.policy import PolicyConfig
from rlsys.config.run_dir import check_run_name
from rlsys.config.schema import Config

SHARDABLE_POLICIES = ("causal_lm",)  # the policy kinds learner.sharding: fsdp2 is tested with


def check_consistency(cfg: Config) -> None:
    """Rules that span sections, and the numbers no run can use."""
    check_bounds(cfg)
    check_run_name(cfg.run.name)
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
        cfg.runners.resource = {"android": "android", "sim": "sim", "synthweb": "sim"}.get(cfg.env.kind, "browser")
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
    check_synthweb(cfg)
    check_placement(cfg.policy)
    if cfg.policy.prompt == "auto":
        if cfg.policy.kind in ("vlm", "api") and cfg.env.action_space == "coords":
            raise ConfigError("no packaged prompt for env.action_space 'coords'; set policy.prompt to a .txt template")
        cfg.policy.prompt = {
            "element": "element_agent",
            "autoui": "android_autoui",
            "cogagent": "android_cogagent",
        }.get(cfg.env.action_space, "pae_agent")
    check_training(cfg)
    check_evaluator(cfg.evaluator)
    if cfg.proposer.every:
        if cfg.tasks.suite == "miniwob":
            raise ConfigError("proposer.every: MiniWoB++ tasks are fixed; proposing tasks needs a web suite")
        if not cfg.proposer.llm.model_id:
            raise ConfigError("proposer.every is set but proposer.llm.model_id names no model")


def check_synthweb(cfg: Config) -> None:
    """The synthetic suite's shares are probabilities, its ranges ordered, and its deepest task solvable in time."""
    env, mix = cfg.env.synthweb, cfg.tasks.synthweb
    for key, value in (("env.synthweb.slip_prob", env.slip_prob), ("tasks.synthweb.confusable", mix.confusable),
                       ("tasks.synthweb.impossible", mix.impossible)):  # fmt: skip
        if value > 1:
            raise ConfigError(f"{key} is a probability, within [0, 1]; got {value}")
    for low, high in (("min_depth", "max_depth"), ("min_distractors", "max_distractors")):
        if (lowest := getattr(mix, low)) > (highest := getattr(mix, high)):
            raise ConfigError(f"tasks.synthweb.{low} ({lowest}) must be at most tasks.synthweb.{high} ({highest})")
    if len(env.image_size) != 2 or not all(16 <= side <= 1024 for side in env.image_size):
        raise ConfigError(
            f"env.synthweb.image_size must be [width, height], each 16 to 1024 pixels; got {env.image_size}"
        )
    if cfg.env.kind == "synthweb" and cfg.tasks.suite == "synthweb" and mix.max_depth > cfg.env.max_steps:
        raise ConfigError(
            f"tasks.synthweb.max_depth ({mix.max_depth}) is more than env.max_steps ({cfg.env.max_steps}): a task of "
            "depth d takes d steps, so the deepest tasks could never be solved; raise env.max_steps"
        )


def check_placement(policy: PolicyConfig) -> None:
    """What `policy.placement` asks of the rest of the policy (what acts for a runner: rlsys/actors/placement.py)."""
    if policy.placement == "vllm" and policy.kind not in ("causal_lm", "vlm"):
        raise ConfigError(
            "policy.placement = 'vllm' serves causal language models and vision-language models "
            f"(policy.kind = 'causal_lm' or 'vlm'), got {policy.kind!r}"
        )
    if policy.placement == "vllm" and policy.lora.enabled and policy.publish == "full":
        raise ConfigError(
            "policy.placement = 'vllm' with LoRA serves the adapter on the engine's base: set policy.publish "
            "to 'auto' or 'adapter' (not 'full')"
        )


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
    elif learner.algorithm == "grpo":
        check_grpo(cfg)
    elif training != "online" and learner.offline_iterations < 1:
        raise ConfigError(f"run.training = {training!r} needs learner.offline_iterations >= 1")
    lag = cfg.run.max_policy_lag
    if lag is not None and lag < 0:
        raise ConfigError(
            f"run.max_policy_lag must be at least 0 (or null for no limit), got {lag}; it drops trajectories "
            "collected by this run's policies that many versions behind, never offline data"
        )
    check_history_fetch(learner)
    check_groups(cfg)
    for key in ("quantile", "shortest_fraction"):
        if not 0 <= getattr(learner, key) <= 1:
            raise ConfigError(f"learner.{key} must be within [0, 1], got {getattr(learner, key)}")
    if learner.batch_size < 1 or learner.grad_accumulation < 1:
        raise ConfigError("learner.batch_size and learner.grad_accumulation must be at least 1")
    budget = learner.max_tokens_per_micro_batch
    if isinstance(budget, int) and budget < 1:
        raise ConfigError(f"learner.max_tokens_per_micro_batch must be at least 1 (or auto, or off), got {budget}")
    if learner.num_learners < 1:
        raise ConfigError(f"learner.num_learners must be at least 1, got {learner.num_learners}")
    if learner.num_learners > learner.batch_size:
        raise ConfigError(
            f"learner.num_learners ({learner.num_learners}) exceeds learner.batch_size ({learner.batch_size}): "
            "some learners would train on nothing"
        )
    if learner.sharding == "fsdp2" and cfg.policy.kind not in SHARDABLE_POLICIES:
        raise ConfigError(
            f"learner.sharding = 'fsdp2' shards a {' or '.join(SHARDABLE_POLICIES)} policy's model; "
            f"policy.kind is {cfg.policy.kind!r} (set learner.sharding: none)"
        )


def check_groups(cfg: Config) -> None:
    """`run.group_size`: GRPO compares the members of a group, sync collection plays whole groups, and an update
    samples whole groups."""
    size, run = cfg.run.group_size, cfg.run
    if cfg.learner.algorithm == "grpo" and size < 2:
        raise ConfigError(
            f"learner.algorithm = 'grpo' compares trajectories played from the same task and start: set "
            f"run.group_size to at least 2 (got {size})"
        )
    if size > 1 and run.mode == "sync" and run.rollout_size % size:
        raise ConfigError(
            f"run.rollout_size ({run.rollout_size}) must be a multiple of run.group_size ({size}): sync mode "
            "collects whole groups"
        )
    for key, value in (("learner.sample_trajectories", cfg.learner.sample_trajectories),
                       ("replay.capacity", cfg.replay.capacity)):  # fmt: skip
        if size > 1 and value < size:
            raise ConfigError(
                f"{key} ({value}) must be at least run.group_size ({size}): an update samples whole groups, and the "
                "replay buffer holds them whole"
            )


def ranks_history(learner: LearnerConfig) -> bool:
    """Whether the algorithm reads whole trajectories back from the run's history (DigiRL's actor, filtered BC's
    reward quantile), not only from the replay sample."""
    uses_history = learner.algorithm == "digirl" or (
        learner.algorithm == "filtered_bc" and learner.filter == "quantile"
    )
    return learner.rank_history and uses_history


def check_history_fetch(learner: LearnerConfig) -> None:
    if ranks_history(learner) and learner.sample_trajectories > learner.max_history_fetch:
        raise ConfigError(
            f"learner.sample_trajectories ({learner.sample_trajectories}) is more whole trajectories than one update "
            f"may read back from the run's history (learner.max_history_fetch: {learner.max_history_fetch}); the "
            "history grows with the run, so lower learner.sample_trajectories, or raise learner.max_history_fetch "
            "if the learner's memory holds that many"
        )


def check_digiq(cfg: Config) -> None:
    q = cfg.learner.digiq
    if cfg.run.training != "offline":
        raise ConfigError("learner.algorithm = 'digiq' learns from a fixed dataset: set run.training = 'offline'")
    if not q.representation.model:
        raise ConfigError(
            "learner.digiq.representation.model: name the VLM folder (or the model id) the dataset's representations "
            "came from (rlsys-digiq represent)"
        )
    if not 0 < q.tau <= 1 or not 0 <= q.gamma <= 1:
        raise ConfigError(f"learner.digiq.tau must be in (0, 1] and gamma in [0, 1], got {q.tau} and {q.gamma}")
    if q.best_of_n < 1 or q.candidates.k < 1:
        raise ConfigError("learner.digiq.best_of_n and learner.digiq.candidates.k must be at least 1")
    if q.actor_iterations < 1 or (q.critic_iterations < 1 and not q.critic_path):
        raise ConfigError(
            "learner.digiq needs actor_iterations >= 1 and critic_iterations >= 1 (or critic_path, a finished critic)"
        )


def check_grpo(cfg: Config) -> None:
    learner = cfg.learner
    if learner.grpo.clip_low >= 1:
        raise ConfigError(
            f"learner.grpo.clip_low must be below 1, got {learner.grpo.clip_low}: the ratio's lower clip is "
            "1 - clip_low, and a ratio is never negative"
        )
    if learner.grpo.step_gamma > 1:
        raise ConfigError(f"learner.grpo.step_gamma must be at most 1, got {learner.grpo.step_gamma}: it is a discount")
    if learner.grpo.step_groups and cfg.env.kind == "android":
        raise ConfigError(
            "learner.grpo.step_groups finds the steps taken from one state by their observations' text, and an Android "
            "screen has none (only its screenshot): no step would ever be grouped; set learner.grpo.step_groups: false"
        )
    if learner.prob_clamp:
        raise ConfigError(
            "learner.prob_clamp is DigiRL's clamp inside the log-likelihood; GRPO's ratio needs the policy's own "
            "log-probs: set learner.prob_clamp: false"
        )
    if learner.grpo.kl_coef > 0 and learner.sharding == "fsdp2" and not cfg.policy.lora.enabled:
        raise ConfigError(
            "learner.grpo.kl_coef > 0 keeps a frozen copy of the starting weights, which learner.sharding = 'fsdp2' "
            "does not shard; use LoRA (policy.lora.enabled: the reference is the base with the adapter off) or "
            "learner.grpo.kl_coef: 0"
        )
    if cfg.run.training != "online" and learner.offline_iterations < 1:
        raise ConfigError(f"run.training = {cfg.run.training!r} needs learner.offline_iterations >= 1")


PATH_KEYS = ("policy.path", "policy.vision_path", "evaluator.judge.exemplars")
DIGIRL_PATH_KEYS = ("learner.digirl.text_encoder_path", "learner.digirl.vision_path")
DIGIQ_PATH_KEYS = ("learner.digiq.text_encoder_path", "learner.digiq.vision_path", "learner.digiq.critic_path")
REPRESENTATION_KEY = "learner.digiq.representation.model"  # a model folder, Hub id or name@hash id
# keys that name a model: a local folder or a Hugging Face Hub id
MODEL_PATH_KEYS = frozenset(
    ("policy.path", "policy.vision_path", *DIGIRL_PATH_KEYS, *DIGIQ_PATH_KEYS[:2], REPRESENTATION_KEY)
)


def check_paths(cfg: Config, offline_data: bool = True) -> None:
    """Every file or folder the config names must exist, where a model key may name a Hugging Face Hub id instead;
    the error names the key (run before Ray starts, after `rlsys.policies.hub.fetch_models` has put the ids' files
    in the Hugging Face cache)."""
    for key, value in named_paths(cfg, offline_data):
        if key in MODEL_PATH_KEYS and is_hub_id(value):
            continue
        if key == REPRESENTATION_KEY and not Path(value).is_dir():
            raise ConfigError(
                f"{key}: {value} is neither a model folder nor a model id (name@hash, as `rlsys-digiq "
                "represent` prints it) nor a Hugging Face Hub id (org/name)"
            )
        elif value and not Path(value).exists():
            hint = "a local folder or a Hugging Face Hub id (org/name)" if key in MODEL_PATH_KEYS else "a local path"
            raise ConfigError(f"{key}: {value} does not exist (set it to {hint}, e.g. {key}=/path/to/it)")


def named_paths(cfg: Config, offline_data: bool = True) -> list[tuple[str, Any]]:
    """(key, value) of every file, folder or model the config names for this run (`offline.data[i]` by index)."""
    keys = PATH_KEYS + (DIGIRL_PATH_KEYS if cfg.learner.algorithm == "digirl" else ())
    keys += DIGIQ_PATH_KEYS if cfg.learner.algorithm == "digiq" else ()
    keys += ("proposer.examples",) if cfg.proposer.every else ()
    named = [(key, _get(cfg, key)) for key in keys]
    if offline_data and cfg.run.training != "online":
        named += [(f"offline.data[{i}]", p) for i, p in enumerate(cfg.offline.data)]
    model = cfg.learner.digiq.representation.model
    if cfg.learner.algorithm == "digiq" and model and "@" not in model:
        named.append((REPRESENTATION_KEY, model))
    return named


def with_absolute_paths(cfg: Config) -> Config:
    """A copy of `cfg` (checked by `check_paths`) whose local paths are absolute, for the processes Ray starts:
    their working directory is not the driver's (other nodes, a job's working_dir), where a relative path
    names another file, or reads as a Hub id. Hub ids stay ids; the config the user wrote is left as it is."""
    out = copy.deepcopy(cfg)
    for key, value in named_paths(cfg):
        if value and not (key in MODEL_PATH_KEYS and is_hub_id(value)):
            _set(out, key, os.path.abspath(os.path.expanduser(value)))
    return out


def _set(cfg: Config, dotted: str, value: str) -> None:
    *parents, name = dotted.split(".")
    node: Any = cfg
    for part in parents:
        node = getattr(node, part)
    if name.endswith("]"):  # offline.data[i]
        name, index = name[:-1].split("[")
        getattr(node, name)[int(index)] = value
    else:
        setattr(node, name, value)


def _get(cfg: Config, dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def check_extras(cfg: Config) -> None:
    """A hosted model on Bedrock needs boto3, the `bedrock` extra: say so before anything starts,
    not at the first judge call or proposal round."""
    users = [
        ("policy.api.provider", cfg.policy.kind == "api" and cfg.policy.api.provider == "bedrock"),
        ("evaluator.judge.provider", cfg.evaluator.uses_judge and cfg.evaluator.judge.provider == "bedrock"),
        ("proposer.llm.provider", bool(cfg.proposer.every) and cfg.proposer.llm.provider == "bedrock"),
    ]
    for key, uses_bedrock in users:
        if uses_bedrock:
            try:
                import boto3  # noqa: F401
            except ImportError:
                raise ConfigError(f"{key} is 'bedrock', which needs boto3: pip install 'rlsys[bedrock]'") from None
