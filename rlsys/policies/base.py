"""What the transformers-backed policies share: scoring helpers and the weights interface."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

from rlsys.config import PolicyConfig
from rlsys.core.types import Observation
from rlsys.policies.grammar_decoding import TokenTable, grammars_of


def torch_dtype(cfg: PolicyConfig, device: str) -> torch.dtype:
    """`policy.dtype`; auto: bf16 on GPU, fp32 on CPU."""
    if cfg.dtype == "auto":
        return torch.bfloat16 if str(device).startswith("cuda") else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16}[cfg.dtype]


class ModulePolicy:
    """The learner-facing half of the Policy contract for a policy whose weights are one torch module,
    `self.model`; subclasses implement `act` and `token_logprobs`. `adapter_only`: a LoRA (peft) model
    whose base is frozen, so its weights to publish are the adapter alone."""

    adapter_only = False
    merged_lora = None  # a MergedLora (lora_merge.py) when the adapter is merged to act

    @property
    def model(self) -> torch.nn.Module:
        """The model as it trains, scores and is saved: a LoRA adapter unmerged (acting may have merged it)."""
        if self.merged_lora is not None:
            self.merged_lora.unmerge()
        return self._model

    @model.setter
    def model(self, model: torch.nn.Module) -> None:
        self._model = model

    @contextmanager
    def acting(self) -> Iterator[torch.nn.Module]:
        """The model to generate with: with `merged_lora`, the adapter merged into the base weights (again only
        once they changed) and switched off, so a decoding step costs what the plain model's does."""
        if self.merged_lora is None:
            yield self._model
            return
        self.merged_lora.merge()
        with self._model.disable_adapter():
            yield self._model

    def log_probs(self, observations: Sequence[Observation], actions: Sequence[str]) -> torch.Tensor:
        logp, _ = self.token_logprobs(observations, actions)
        return logp.sum(-1)

    def parameters(self):
        return [p for p in self.model.parameters() if p.requires_grad]

    def train(self) -> None:
        self.model.train()

    def eval(self) -> None:
        self._model.eval()  # changes no weight: a merged adapter may stay merged

    def state_dict(self) -> dict:
        """What a runner needs to match the learner: the adapter alone when the base is frozen."""
        if self.adapter_only:
            from peft import get_peft_model_state_dict

            state = get_peft_model_state_dict(self.model)
        else:
            state = self.model.state_dict()
        return {k: v.detach().to("cpu") for k, v in state.items()}

    def load_state_dict(self, state: dict, version: int | None = None) -> None:
        if self.adapter_only:
            from peft import set_peft_model_state_dict

            result = set_peft_model_state_dict(self.model, state)
            if getattr(result, "unexpected_keys", None):
                raise KeyError(f"adapter weights that this policy does not have: {result.unexpected_keys[:5]}")
        else:
            self.model.load_state_dict(state)
        if version is not None:
            self.version = version


class HFPolicy(ModulePolicy):
    """Subclasses set `model`, `tokenizer`, `cfg`, `version` and implement `act` and
    `token_logprobs`."""

    # What `save_pretrained` writes that marks a folder as holding this kind of policy (any one of them):
    # `rlsys-eval --checkpoint` checks a folder for it before anything starts
    SAVED_AS: tuple[str, ...] = ("config.json",)  # the Hugging Face layout
    _tokens: TokenTable | None = None

    @property
    def tokens(self) -> TokenTable:
        """Each token's text, for grammar-constrained decoding; built on first use."""
        if self._tokens is None:
            self._tokens = TokenTable(self.tokenizer)
        return self._tokens

    def grammars(self, observations: Sequence[Observation]) -> list:
        """Each observation's action grammar when decoding is constrained (None: free text)."""
        return grammars_of(observations) if self.cfg.constrained else [None] * len(observations)

    def decoder(self, constrained: bool):
        """Constrained samples are read as the grammar saw them, free text the tokenizer's way."""
        return self.tokens.text_of if constrained else lambda ids: self.tokenizer.decode(ids, skip_special_tokens=True)
