"""The random baseline (`policy.kind: random`): `click [k]` on one of the observation's numbered elements.

What researchers report as "random" on element-based web tasks: every element listed in `ui_text`
(`[0] ...`, `[1] ...`) is equally likely, so an action's log-probability is log(1/n). It has no weights
(`state_dict()` is `{}`; `load_state_dict` ignores what it is given and only takes the version), needs
the element action space (the config refuses others), and never imports torch, so a runner using it
stays a small process. `greedy` changes nothing: a uniform distribution has no mode to prefer.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from rlsys.config import PolicyConfig
from rlsys.core.types import ActionSample, Observation
from rlsys.policies.weightless import WeightlessPolicy

_ELEMENT = re.compile(r"^\s*\[(\d+)\]", re.MULTILINE)
_CLICK = re.compile(r"^\s*click\s*\[\s*(\d+)\s*\]\s*$", re.IGNORECASE)
CONFIG_NAME = "random_policy.json"


def element_ids(observation: Observation) -> list[int]:
    """The numbers of the elements listed in the observation's ui_text, each once, in order."""
    return list(dict.fromkeys(int(m) for m in _ELEMENT.findall(observation.ui_text or "")))


class RandomPolicy(WeightlessPolicy):
    SAVED_AS = (CONFIG_NAME,)  # what save_pretrained writes that marks a folder as this kind (see HFPolicy)

    def __init__(self, cfg: PolicyConfig | None = None, seed: int = 0):
        self.cfg = cfg
        self.version = 0
        self._rng = random.Random(seed)

    @classmethod
    def create(cls, cfg: PolicyConfig, seed: int = 0, device: str = "cpu") -> RandomPolicy:
        """`device` is ignored: nothing is computed."""
        return cls(cfg, seed=seed)

    def manual_seed(self, seed: int) -> None:
        """Reseed the choices (a runner gives each replica its own seed)."""
        self._rng = random.Random(seed)

    @contextmanager
    def fork_rng(self, seed: int):
        """Choices inside come from `seed`; the policy's own stream goes on after where it was (as
        `torch.random.fork_rng` does for torch's)."""
        saved, self._rng = self._rng, random.Random(seed)
        try:
            yield
        finally:
            self._rng = saved

    def act(self, observations: Sequence[Observation], greedy: bool = False) -> list[ActionSample]:
        samples = []
        for obs in observations:
            ids = element_ids(obs)
            if not ids:  # nothing to click: the only thing it can say; the env reports the missing element
                samples.append(ActionSample("click [0]", 0.0, self.version))
                continue
            samples.append(ActionSample(f"click [{self._rng.choice(ids)}]", -math.log(len(ids)), self.version))
        return samples

    def log_probs(self, observations: Sequence[Observation], actions: Sequence[str]) -> np.ndarray:
        """log(1/n) for `click [k]` on a listed element, -inf for anything else."""
        out = []
        for obs, action in zip(observations, actions, strict=True):
            ids = element_ids(obs)
            m = _CLICK.match(action or "")
            out.append(-math.log(len(ids)) if m and int(m.group(1)) in ids else -math.inf)
        return np.asarray(out, dtype=np.float64)

    def token_logprobs(self, observations: Sequence[Observation], actions: Sequence[str]):
        raise NotImplementedError("the random policy has no tokens; use log_probs")

    def load_state_dict(self, state: dict, version: int | None = None) -> None:
        """No weights to load; whatever a learner published is ignored, only its version is taken."""
        if version is not None:
            self.version = version

    def save_pretrained(self, path: str | os.PathLike) -> None:
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / CONFIG_NAME).write_text(json.dumps({"kind": "random", "version": self.version}, indent=2) + "\n")
