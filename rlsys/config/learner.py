"""The learner: the algorithm, its optimisation, and DigiRL's and Digi-Q's own settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class DigiRLConfig:
    """DigiRL's critics, advantages and curriculum (docs/algorithms/digirl.md); defaults are the published ones."""

    gamma: float = 0.5
    advantage: Literal["doubly_robust", "digirl_compat"] = "doubly_robust"  # the paper's form / the released code's
    lam: float = 0.5  # doubly_robust: weight of the trajectory outcome, lam ** (steps to the end)
    advantage_threshold: float = 0.05  # actor data: transitions whose advantage exceeds this
    curriculum_quantile: float = 0.9  # actor data: trajectories whose reward - p_instr(task) is in the top 10%
    # the actor loss's mean: of each action's summed log-prob over the batch (the paper's), or over real tokens
    # (filtered BC's, for the sanity arm that reduces DigiRL to filtered BC)
    actor_reduction: Literal["sequence_mean", "token_mean"] = "sequence_mean"
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
    # screenshot features kept across updates (the least recently used go first); the learner receives fresh
    # copies of trajectories each update, so without it every update recomputes every screenshot it reads
    feature_cache_mb: int = 512


@dataclass
class DigiQRepresentationConfig:
    """Where z(s, a) comes from (`rlsys-digiq represent`) and what the critic accepts."""

    model: str | None = None  # the (fine-tuned) VLM folder, or the model id the extraction printed
    # pointer_hidden: a pointing policy's element vector, a CPU stand-in for a VLM (docs/algorithms/digiq.md)
    method: Literal["answer_state", "generated_mean", "pointer_hidden"] = "answer_state"
    batch_size: int = 8
    max_new_tokens: int = 8  # generated_mean: tokens generated per pair


@dataclass
class DigiQCandidatesConfig:
    """Candidate actions per state (`rlsys-digiq candidates`), sampled from `policy`."""

    k: int = 16  # candidates per state; index 0 is the dataset action
    temperature: float = 1.2
    max_redraws: int = 4  # draws per slot before an invalid sample is kept out of the set
    batch_size: int = 16


@dataclass
class DigiQConfig:
    """Digi-Q (docs/algorithms/digiq.md): a TD critic on frozen VLM representations, then Best-of-N actor
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
class GRPOConfig:
    """GRPO (docs/algorithms/grpo.md): group-relative advantages over each rollout group (`run.group_size`) and a
    clipped surrogate against the proximal policy; the behaviour weight's cap is `learner.importance_clip`."""

    scale_by_std: bool = True  # advantages (R - mean) / std over the group; false: R - mean (Dr. GRPO)
    clip_low: float = 0.2  # the per-token ratio is clipped to [1 - clip_low, 1 + clip_high]
    clip_high: float = 0.28  # DAPO's clip-higher (PPO's symmetric clip: 0.2)
    # token_mean: every action token of the step weighs the same (DAPO); sequence_mean: each action's token mean,
    # averaged over actions (GRPO's original)
    reduction: Literal["token_mean", "sequence_mean"] = "token_mean"
    kl_coef: float = 0.0  # > 0: a k3 KL per token to the weights the run started with (LoRA: the adapter off)
    # passes over an update's action samples, in steps of batch_size x grad_accumulation (learner.updates_per_iteration
    # does not apply)
    epochs: int = 1
    # GiGPO's step-level groups: within a rollout group, the steps taken from one state (same ui_text, element values,
    # location and task text) are compared by their discounted return; each action's advantage is A_traj + step_weight
    # x A_step
    step_groups: bool = False
    step_weight: float = 1.0
    step_gamma: float = 0.95  # the discount of each step's return from that step on
    # ARPO's replay of successes (MobileRL's AdaGRPO replays them too): the learner keeps each task's most recent
    # successes and puts one in place of a member of a group whose members all failed alike
    success_replay: bool = False
    replay_per_task: int = 4  # successes kept per task (MiniWoB++: per task name; else per task id)
    replay_tasks: int = 1000  # tasks kept; the least recently stored to or replayed from is evicted first
    # what the kept successes may take, packed (screenshots as PNG, the rest compressed), in the learner's memory and
    # in every checkpoint; least recently used tasks are evicted first
    replay_max_bytes: int = 1 << 28


@dataclass
class LearnerConfig:
    algorithm: Literal["filtered_bc", "sft", "digirl", "digiq", "grpo"] = "filtered_bc"
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
    # tokens (prompts and actions) per forward and backward pass of the actor: a micro-batch with more is cut into
    # length-sorted chunks whose gradients add up to the micro-batch's, so no number changes. auto: sized from the
    # GPU's free memory on CUDA, no limit on CPU; off: no limit
    max_tokens_per_micro_batch: int | Literal["auto", "off"] = "auto"
    updates_per_iteration: int = 20  # filtered_bc / sft optimizer steps
    grad_clip: float = 1.0  # per module: each network's own gradient norm
    sample_trajectories: int = 512  # trajectories drawn from the replay buffer per iteration
    # DigiRL's instruction critic and curriculum, and filtered BC's reward quantile, rank every trajectory of the
    # run (and the offline data), as DigiRL's released code keeps them all; false: only the iteration's sample
    rank_history: bool = True
    # A bound on what one update reads back whole from that history: where the history is ranked, a config whose
    # learner.sample_trajectories (the most trajectories of those the curriculum or the quantile keeps that are
    # read back, drawn at random past it) exceeds this is refused, so the learner's memory stays bounded.
    max_history_fetch: int = 2000
    offline_iterations: int = 0  # filtered_bc / sft: iterations of the offline phase (digirl: digirl.offline_*)
    # Clipped importance weights min(importance_clip, pi/mu) on the actor loss; auto: on in async mode,
    # off in sync mode (the papers' recipes)
    off_policy_correction: Literal["auto", "on", "off"] = "auto"
    importance_clip: float = 1.0
    digirl: DigiRLConfig = field(default_factory=DigiRLConfig)
    digiq: DigiQConfig = field(default_factory=DigiQConfig)
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    num_cpus: float = 1.0
    num_learners: int = 1  # a data-parallel group: one process (and one GPU, when there are GPUs) each
    # how a group of learners holds the policy's model: none, a whole copy on every rank (gradients summed over the
    # group); fsdp2, torch's fully_shard, each rank holding 1/N of the weights, gradients and optimizer states
    # (causal_lm policies; a model whose training state does not fit one GPU). No effect on a single learner.
    sharding: Literal["none", "fsdp2"] = "none"
    resource: str | None = None  # a custom Ray resource each learner asks one unit of (clusters/: "learner")
    group_timeout_s: float = 600.0  # how long a collective waits for the group's other processes
