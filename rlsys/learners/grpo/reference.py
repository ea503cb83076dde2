"""The reference policy of GRPO's KL term: the weights the run started with."""

from __future__ import annotations

import copy

import torch

from rlsys.policies.lora_checkpoint import is_peft


class ReferencePolicy:
    """For a LoRA (peft) policy, its own base with the adapter switched off (peft's `disable_adapter`), so the base
    model is not held twice: the run's start when the adapter starts fresh (peft's LoRA starts as zero), the base
    model when `policy.path` brought a trained adapter. Any other policy is copied and frozen when this is built,
    which the learner does before it loads a checkpoint: a resumed run gets the weights it started from again."""

    def __init__(self, policy):
        self.policy = policy
        self.frozen = None if is_peft(policy.model) else _frozen_copy(policy)

    def token_logprobs(self, observations, actions, **scored) -> tuple[torch.Tensor, torch.Tensor]:
        if self.frozen is not None:
            return self.frozen.token_logprobs(observations, actions, **scored)
        with self.policy.model.disable_adapter():
            return self.policy.token_logprobs(observations, actions, **scored)


def _frozen_copy(policy):
    frozen = copy.deepcopy(policy)
    for p in frozen.model.parameters():
        p.requires_grad_(False)
    frozen.eval()
    return frozen
