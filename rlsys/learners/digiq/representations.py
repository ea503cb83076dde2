"""Digi-Q's state-action representations: z(s, a) from a (fine-tuned) VLM, cached on the data.

The critic never runs the VLM. Before training, every (screenshot, candidate action) pair of the
offline data goes through the VLM with the "does this action visibly change the screen?" prompt
(`rlsys.learners.digiq.screen_change`) and the last layer's hidden state is stored in the observation's features
(`features["digiq_z"]`, float16 [K, H], row i for candidate i) together with a record of what made
it (`step.info["digiq"]["representation"]`: model id, method, width). Training checks that record
against its config, so representations of two models, or two methods, are never mixed.

Methods:
  answer_state    the hidden state at the last prompt position, whose logits give the yes/no answer
  generated_mean  the mean hidden state over the tokens the model answers with (greedy, up to EOS)
  pointer_hidden  not a VLM: a pointing policy's hidden vector of the element the action names (a stand-in that
                  runs on CPU, for the synthweb bench; `PointerRepresentations`)
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from rlsys.config import PolicyConfig
from rlsys.config.hub_id import is_hub_id
from rlsys.core.types import Observation, Trajectory
from rlsys.learners.digiq.screen_change import CHANGE_PROMPT
from rlsys.policies.hub import model_folder
from rlsys.policies.pointing import parse_action

METHODS = ("answer_state", "generated_mean")  # of a VLM
POINTER_METHOD = "pointer_hidden"
POINTER_KINDS = ("learned_pointer", "element_pointer")
Z_KEY = "digiq_z"
MODEL_KEY = "learner.digiq.representation.model"
METHOD_KEY = "learner.digiq.representation.method"
RERUN = "re-run `rlsys-digiq represent` with the configured model and method"

# what identifies a model: its configs, tokenizer and chat template, and weights
_ID_SUFFIXES = (".json", ".jinja", ".safetensors", ".bin", ".pt", ".model", ".tiktoken")
_ID_NAMES = ("merges.txt", "vocab.txt")
_CHUNK = 1 << 20


def _identifying_files(folder: Path) -> list[tuple[str, Path]]:
    files = []
    for root, dirs, names in os.walk(folder, followlinks=True):
        dirs[:] = [d for d in dirs if not d.startswith(".")]  # .cache and the like
        for name in names:
            if name.startswith(".") or not (name.endswith(_ID_SUFFIXES) or name in _ID_NAMES):
                continue
            path = Path(root) / name
            files.append((path.relative_to(folder).as_posix(), path))
    return files


def model_id(path: str | os.PathLike) -> str:
    """`<folder name>@<16 hex digits>`: a SHA-256 over the relative names and bytes of the folder's
    config, tokenizer and weight files (for a Hugging Face Hub id, its name and its cached snapshot's).
    A LoRA folder's base counts as if it were its `base/`, whether it is a copy there or a pointer
    (`base.json`) to another folder or a Hub id, so the id does not depend on where the base lives; it
    does not depend on where the folder itself lives either."""
    from rlsys.policies.lora_checkpoint import ADAPTER_DIR, BASE_DIR, BASE_POINTER, lora_base

    folder = model_folder(path, MODEL_KEY).resolve()
    if not folder.is_dir():
        raise FileNotFoundError(f"{str(path)!r} is not a model folder")
    shown = str(path).rsplit("/", 1)[-1] if is_hub_id(path) else folder.name
    files = _identifying_files(folder)
    pointer = folder / BASE_POINTER
    if (folder / ADAPTER_DIR).is_dir() and pointer.is_file():
        base, _ = lora_base(folder)
        files = [(rel, p) for rel, p in files if rel != BASE_POINTER]
        files += [(f"{BASE_DIR}/{rel}", p) for rel, p in _identifying_files(base)]
    digest = hashlib.sha256()
    for rel, file in sorted(files):
        name = rel.encode()
        digest.update(len(name).to_bytes(8, "little") + name + file.stat().st_size.to_bytes(8, "little"))
        with open(file, "rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
    return f"{shown}@{digest.hexdigest()[:16]}"


def expected_model_id(value: str) -> str:
    """The id a config's `learner.digiq.representation.model` stands for: the id of the folder (or Hub
    model) when it is one, else the value itself (an id copied from the extraction's output)."""
    return model_id(value) if value and (Path(value).is_dir() or is_hub_id(value)) else value


def change_observation(obs: Observation, action: str) -> Observation:
    """The observation as the change question sees it: the action as the candidate, no grammar."""
    extras = {k: v for k, v in obs.extras.items() if k != "grammar"}
    return replace(obs, extras=extras | {"candidate_action": action})


class Representations:
    """What every provider of z(s, a) shares: the record stored with its rows, and a check of the pairs given."""

    id: str
    method: str
    dim: int
    batch_size: int

    @property
    def record(self) -> dict:
        return {"model": self.id, "method": self.method, "dim": self.dim}

    @staticmethod
    def check_pairs(observations: Sequence[Observation], actions: Sequence[str]) -> None:
        if len(observations) != len(actions):
            raise ValueError(f"{len(observations)} observations but {len(actions)} actions")


class RepresentationProvider(Representations):
    """z(s, a) for (observation, action) pairs from the VLM saved at `path` (a plain or a LoRA folder, or a
    Hub id)."""

    def __init__(
        self,
        path: str | os.PathLike,
        method: str,
        device: str = "cpu",
        batch_size: int = 8,
        max_new_tokens: int = 8,
        dtype: str = "auto",
    ):
        if method not in METHODS:
            raise ValueError(f"{METHOD_KEY}: unknown method {method!r}; expected one of {METHODS}")
        from rlsys.policies.vlm import VLMPolicy

        cfg = PolicyConfig(
            kind="vlm",
            path=str(path),
            prompt=CHANGE_PROMPT,
            constrained=False,
            dtype=dtype,
            max_new_tokens=max_new_tokens,
        )
        self.policy = VLMPolicy.from_pretrained(path, cfg, device, key=MODEL_KEY)
        self.policy.model.eval()
        self.model = self.policy.model
        self.method = method
        self.batch_size = max(1, batch_size)
        self.max_new_tokens = max(1, max_new_tokens)
        self.device = device
        self.id = model_id(path)
        self.dim = int(self.model.config.get_text_config().hidden_size)
        # never emitted: a generated image placeholder would break the teacher-forced pass
        from rlsys.policies.grammar_decoding import special_token_ids

        eos = self.policy.tokenizer.eos_token_id
        self._suppressed = sorted(special_token_ids(self.policy.tokenizer) - {eos})

    @torch.no_grad()
    def __call__(self, observations: Sequence[Observation], actions: Sequence[str]) -> np.ndarray:
        self.check_pairs(observations, actions)
        self.model.eval()
        rows = [np.zeros((0, self.dim), dtype=np.float32)]
        for start in range(0, len(observations), self.batch_size):
            pairs = zip(observations[start : start + self.batch_size], actions[start : start + self.batch_size])
            encoded = self.policy._encoded([change_observation(o, a) for o, a in pairs])
            z = self._answer_state(encoded) if self.method == "answer_state" else self._generated_mean(encoded)
            rows.append(z.float().cpu().numpy())
        return np.concatenate(rows)

    def _last_hidden(self, batch: dict, keep: int) -> torch.Tensor:
        batch = self.policy._positions(self.policy._to_device(batch))
        out = self.model(**batch, output_hidden_states=True, logits_to_keep=1)
        return out.hidden_states[-1][:, -keep:]

    def _answer_state(self, encoded: list[dict]) -> torch.Tensor:
        batch, _ = self.policy.inputs.batch(encoded, side="left")
        return self._last_hidden(batch, 1)[:, 0]

    def _generated_mean(self, encoded: list[dict]) -> torch.Tensor:
        tokenizer = self.policy.tokenizer
        eos = tokenizer.eos_token_id
        batch, _ = self.policy.inputs.batch(encoded, side="left")
        batch = self.policy._to_device(batch)
        sequences = self.model.generate(
            **batch,
            do_sample=False,
            temperature=None,
            top_k=None,
            top_p=None,
            max_new_tokens=self.max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=eos,
            suppress_tokens=self._suppressed or None,
        )
        answers = []
        for row in sequences[:, batch["input_ids"].shape[1] :].tolist():
            row = row[: row.index(eos) + 1] if eos in row else row
            answers.append(row or [eos])
        # teacher-forced again, each row left-padded so that its answer ends at the last position
        batch, _ = self.policy.inputs.batch(encoded, side="left", suffixes=answers)
        width = max(len(a) for a in answers)
        hidden = self._last_hidden(batch, width).float()
        lengths = torch.tensor([len(a) for a in answers], device=hidden.device)
        mask = torch.arange(width, device=hidden.device).unsqueeze(0) >= (width - lengths).unsqueeze(1)
        return (hidden * mask.unsqueeze(-1)).sum(1) / lengths.unsqueeze(-1)


class PointerRepresentations(Representations):
    """z(s, a) from a pointing policy's folder (`learned_pointer`, `element_pointer`): the hidden vector by which
    it scores the element the action names (zeros for an action naming no element it can act on). Not Digi-Q's
    representation, which a VLM fine-tuned on screen changes gives: a stand-in for benches on machines where no
    such VLM runs, which reads a screen only as far as the policy learnt to."""

    method = POINTER_METHOD

    def __init__(self, path: str | os.PathLike, device: str = "cpu", batch_size: int = 256):
        from rlsys.policies import policy_class

        folder = model_folder(path, MODEL_KEY)
        kinds = [k for k in POINTER_KINDS if (folder / policy_class(k).CONFIG_NAME).is_file()]
        if not kinds:
            raise ValueError(
                f"{MODEL_KEY}: {path} is not a pointing policy's folder, which {METHOD_KEY} = {POINTER_METHOD!r} reads"
            )
        self.policy = policy_class(kinds[0]).from_pretrained(folder, PolicyConfig(kind=kinds[0]), device)
        self.policy.model.eval()
        self.batch_size = max(1, batch_size)
        self.id = model_id(folder)
        self.dim = int(self.policy.model.hidden)

    @torch.no_grad()
    def __call__(self, observations: Sequence[Observation], actions: Sequence[str]) -> np.ndarray:
        self.check_pairs(observations, actions)
        z = np.zeros((len(actions), self.dim), dtype=np.float32)
        for row, (decision, action) in enumerate(zip(self.policy.decisions(observations), actions)):
            parsed = parse_action(action)
            k = decision.position(parsed[1]) if parsed else None
            if k is not None:
                z[row] = decision.hidden[k].float().cpu().numpy()
        return z


def representation_provider(
    path: str | os.PathLike, method: str, device: str = "cpu", batch_size: int = 8, **vlm_options
) -> Representations:
    """The provider `learner.digiq.representation` names: a VLM's (`vlm_options`: `max_new_tokens`, `dtype`), or a
    pointing policy's for `pointer_hidden`."""
    if method == POINTER_METHOD:
        return PointerRepresentations(path, device, batch_size)
    return RepresentationProvider(path, method, device, batch_size, **vlm_options)


def step_candidates(step) -> list[str]:
    """The candidate actions of a step: Digi-Q's proposals when it has them, else the action taken."""
    return list(step.info.get("digiq", {}).get("candidates") or [step.action_text])


def annotate(trajectories: Sequence[Trajectory], provider: Representations, progress: bool = True) -> dict:
    """z for every (step, candidate) pair, in batches across steps: `features[Z_KEY]` (float16
    [K, dim]) on each step's observation and the provider's record in `step.info["digiq"]`."""
    from tqdm import tqdm

    t0 = time.perf_counter()
    steps = [s for t in trajectories for s in t.steps]
    candidates = [step_candidates(s) for s in steps]
    pairs = [(s.observation, c) for s, cs in zip(steps, candidates) for c in cs]
    parts = []
    with tqdm(total=len(pairs), desc="representations", unit="pair", disable=not progress) as bar:
        for start in range(0, len(pairs), provider.batch_size):
            chunk = pairs[start : start + provider.batch_size]
            parts.append(provider([o for o, _ in chunk], [a for _, a in chunk]))
            bar.update(len(chunk))
    z = np.concatenate(parts) if parts else np.zeros((0, provider.dim), dtype=np.float32)
    offset = 0
    for step, cs in zip(steps, candidates):
        step.observation.features[Z_KEY] = z[offset : offset + len(cs)].astype(np.float16)
        offset += len(cs)
        step.info["digiq"] = {**step.info.get("digiq", {}), "candidates": cs, "representation": provider.record}
    seconds = time.perf_counter() - t0
    return {
        "steps": len(steps),
        "pairs": len(pairs),
        "seconds": seconds,
        "pairs_per_s": len(pairs) / max(seconds, 1e-9),
    }


class RepresentationMismatch(ValueError):
    pass


def _where(trajectory: Trajectory, index: int) -> str:
    return f"trajectory {trajectory.id} step {index}"


def check_representations(trajectories: Sequence[Trajectory], model: str, method: str) -> int:
    """That every step carries representations of one model and method, the configured ones, with
    one row per candidate; returns their width."""
    seen: tuple[dict, str] | None = None
    for t in trajectories:
        for i, step in enumerate(t.steps):
            info = step.info.get("digiq") or {}
            record = info.get("representation")
            if not record:
                raise RepresentationMismatch(f"{_where(t, i)} has no representation record; {RERUN}")
            if seen is None:
                seen = (record, _where(t, i))
            elif record != seen[0]:
                raise RepresentationMismatch(
                    f"representations are mixed in one dataset: {seen[0]} ({seen[1]}) and {record} "
                    f"({_where(t, i)}); {RERUN}"
                )
            z = step.observation.features.get(Z_KEY)
            candidates = info.get("candidates") or []
            if z is None:
                raise RepresentationMismatch(f"{_where(t, i)} has no {Z_KEY} feature; {RERUN}")
            if z.ndim != 2 or z.shape != (len(candidates), record["dim"]):
                raise RepresentationMismatch(
                    f"{_where(t, i)}: {Z_KEY} has shape {tuple(z.shape)}, expected "
                    f"({len(candidates)} candidates, {record['dim']}); {RERUN}"
                )
    if seen is None:
        raise RepresentationMismatch(f"no steps to check; {RERUN}")
    record = seen[0]
    if record["method"] != method:
        raise RepresentationMismatch(
            f"{METHOD_KEY}: the data's representations were made with method {record['method']!r}, "
            f"the config says {method!r}; {RERUN}"
        )
    expected = expected_model_id(model)
    if record["model"] != expected:
        raise RepresentationMismatch(
            f"{MODEL_KEY}: the data's representations come from model {record['model']!r}, the config says "
            f"{model!r} (id {expected!r}); {RERUN}"
        )
    return int(record["dim"])
