"""What the pointing policies share (`policy.kind: element_pointer`, `learned_pointer`): reading the numbered
element list and the grammar's choices, the candidate texts to type, and the factored action distribution.

An action is chosen in up to three factors: the element (over what the grammar lets it click or type into),
then, for an editable element, `click` or `type`, then the text to type among the instruction's quoted spans
and words. Its log-probability is the sum of the factors' log-probs: `token_logprobs` returns it as one "token",
so filtered BC, SFT and DigiRL train these policies unchanged. A policy says how it scores each factor
(`PointingDecision._score`, `_text_logits`); greedy decoding breaks ties at random, so an untrained policy
(its heads start at zero) is the uniform one.
"""

from __future__ import annotations

import json
import os
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from rlsys.config import PolicyConfig
from rlsys.core.grammar import PRINTABLE, Grammar
from rlsys.core.types import ActionSample, Observation
from rlsys.policies.base import ModulePolicy
from rlsys.policies.hub import model_folder

BUCKETS = 4096  # hashed word ids
MAX_TEXTS = 24  # candidate texts to type

_LINE = re.compile(r"^\s*\[(\d+)\]:?\s?(.*)$")
QUOTED = re.compile(r"\"([^\"]*)\"")
_TAG = re.compile(r"<(\w+)>")
_WORD = re.compile(r"\w+")
_ACTION = re.compile(r"^\s*(click|type)\s*\[\s*(\d+)\s*\]\s?(.*)$", re.IGNORECASE | re.DOTALL)
_STRIP = "\"'.,;:!?()"


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def bucket(token: str) -> int:
    """A hash that every process agrees on (Python's `hash` of a str differs between runners)."""
    return zlib.crc32(token.encode()) % BUCKETS


@dataclass
class Element:
    index: int
    text: str  # the quoted label, '' if none
    tag: str  # `<tag>` or the role


def elements_of(obs: Observation) -> list[Element]:
    """The numbered element lines of `ui_text`, PAE's `[3]: <a> "Docs";` or the roles form `[3] link "Docs"`."""
    out = []
    for line in (obs.ui_text or "").splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        rest = m.group(2)
        quoted = QUOTED.search(rest)
        tag = _TAG.search(rest)
        tag_text = tag.group(1) if tag else (rest.split(" ", 1)[0] if rest else "")
        out.append(Element(int(m.group(1)), quoted.group(1) if quoted else "", tag_text.lower()))
    return out


def parse_action(text: str) -> tuple[str, int, str] | None:
    m = _ACTION.match(text or "")
    if not m:
        return None
    return m.group(1).lower(), int(m.group(2)), m.group(3)


def candidate_texts(instruction: str, max_text: int) -> list[tuple[str, int, bool, int]]:
    """Texts one might type: the instruction's quoted spans when it quotes anything (`Enter "Jerald" ...`), else
    its words (surrounding punctuation off: `Enter 10/11/2011 as the date`). Each as (text, character position,
    quoted, order among the quoted spans). Offering every word beside the quoted spans would leave an
    untrained policy one chance in a dozen of typing the right text, and two fields to fill one in 150."""
    found: dict[str, tuple[str, int, bool, int]] = {}
    for k, m in enumerate(QUOTED.finditer(instruction)):
        if m.group(1).strip():
            found.setdefault(m.group(1), (m.group(1), m.start(1), True, k + 1))
    if not found:
        for m in re.finditer(r"\S+", instruction):
            found.setdefault(m.group().strip(_STRIP), (m.group().strip(_STRIP), m.start(), False, 0))
    keep = [c for c in found.values() if c[0].strip() and len(c[0]) <= max_text and set(c[0]) <= PRINTABLE]
    return keep[:MAX_TEXTS]


def context_words(instruction: str, position: int) -> list[str]:
    """The word just before and just after a candidate text: what says it is a username, a password, a date."""
    before = words(instruction[:position])[-1:]
    after = words(instruction[position:])[1:2]
    return [f"<{w}" for w in before] + [f">{w}" for w in after]


class PointingDecision:
    """One observation's factored action distribution. Subclasses set `element_logits` [E] and `verb_logits`
    [E, 2] in `_score` and score candidate texts for an element in `_text_logits`."""

    element_logits: torch.Tensor
    verb_logits: torch.Tensor

    def __init__(self, net: nn.Module, obs: Observation, temperature: float):
        self.temperature = temperature
        instruction = obs.task or ""
        elements = elements_of(obs)
        grammar = Grammar.from_dict(obs.extras["grammar"]) if "grammar" in obs.extras else None
        if grammar is not None:
            clickable = {p[1] for c in grammar.choices if (p := parse_action(c)) and p[0] == "click"}
            typeable = {p[1] for h in grammar.text_prefixes if (p := parse_action(h)) and p[0] == "type"}
            max_text = grammar.max_text
        else:
            clickable, typeable, max_text = {e.index for e in elements}, set(), 32
        self.elements = [e for e in elements if e.index in clickable or e.index in typeable]
        self.clickable = [e.index in clickable for e in self.elements]
        self.typeable = [e.index in typeable for e in self.elements]
        self.instruction = instruction
        self.texts = candidate_texts(instruction, max_text) if any(self.typeable) else []
        self.net = net
        self.previous = [p for a in obs.extras.get("previous_actions") or [] if (p := parse_action(a))]
        if self.elements:
            self._score()

    def _score(self) -> None:
        raise NotImplementedError

    def _text_logits(self, k: int, texts: list) -> torch.Tensor:
        """Logits over `texts` for typing into element `k`: `self.texts` first, then any text from elsewhere (a
        demonstration's), which the scorer must accept too."""
        raise NotImplementedError

    def history(self, element: Element) -> list[float]:
        """What the previous actions did to `element`, and how many there were."""
        clicks = sum(1 for verb, i, _ in self.previous if verb == "click" and i == element.index)
        types = sum(1 for verb, i, _ in self.previous if verb == "type" and i == element.index)
        last = self.previous[-1][1] == element.index if self.previous else False
        step = len(self.previous)
        return [
            min(clicks, 2) / 2,
            min(types, 2) / 2,
            float(last),
            float(step == 0),
            float(step == 1),
            float(step >= 2),
        ]

    def _verbs_allowed(self, k: int) -> list[bool]:
        return [self.clickable[k], self.typeable[k] and bool(self.texts)]

    def _element_logp(self) -> torch.Tensor:
        return torch.log_softmax(self.element_logits, -1)

    def _verb_logp(self, k: int, allowed: list[bool] | None = None) -> torch.Tensor:
        allowed = allowed or self._verbs_allowed(k)
        mask = torch.tensor([0.0 if a else float("-inf") for a in allowed], device=self.verb_logits.device)
        return torch.log_softmax(self.verb_logits[k] + mask, -1)

    def sample(self, greedy: bool) -> tuple[str, float]:
        if not self.elements:
            return "click [0]", 0.0  # nothing to act on; the env reports the missing element

        def pick(logp: torch.Tensor) -> int:
            if not greedy:
                return int(torch.multinomial(logp.exp(), 1))
            best = (logp >= logp.max() - 1e-6).nonzero().flatten()  # a tie (untrained) is broken at random
            return int(best[torch.randint(len(best), ())])

        element_logp = self._element_logp()
        k = pick(element_logp)
        total = element_logp[k]
        verb_logp = self._verb_logp(k)
        verb = pick(verb_logp)
        total = total + verb_logp[verb]
        index = self.elements[k].index
        if verb == 0:
            return f"click [{index}]", float(total)
        text_logp = torch.log_softmax(self._text_logits(k, [t for t, *_ in self.texts]), -1)
        t = pick(text_logp)
        return f"type [{index}] {self.texts[t][0]}", float(total + text_logp[t])

    def position(self, index: int) -> int | None:
        """Where element `[index]` is among those it scores; None if it is not one of them."""
        return next((k for k, e in enumerate(self.elements) if e.index == index), None)

    def logprob(self, action: str) -> torch.Tensor:
        """The log-prob `sample` gives `action` (differentiable); -inf for what it could never say."""
        parsed = parse_action(action)
        minus_inf = torch.tensor(float("-inf"))
        if not self.elements or parsed is None:
            return minus_inf
        verb, index, text = parsed
        k = self.position(index)
        if k is None:
            return minus_inf
        total = self._element_logp()[k]
        if verb == "click":
            return total + self._verb_logp(k)[0] if self.clickable[k] else minus_inf
        if not self.typeable[k]:
            return minus_inf
        texts = [t for t, *_ in self.texts]
        if text not in texts:
            texts = texts + [text]
        allowed = [self.clickable[k], True]
        total = total + self._verb_logp(k, allowed)[1]
        return total + torch.log_softmax(self._text_logits(k, texts), -1)[texts.index(text)]


class PointingPolicy(ModulePolicy):
    """The Policy contract (see `rlsys.policies`) for a pointing net. Subclasses name their `KIND`, files, net
    class (built from `d_model` and `hidden`, which it keeps as `d` and `hidden`) and decision class."""

    KIND: str
    CONFIG_NAME: str
    WEIGHTS_NAME: str
    Net: type[nn.Module]
    Decision: type[PointingDecision]

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.SAVED_AS = (cls.CONFIG_NAME,)  # what save_pretrained writes that marks a folder as this kind

    def __init__(self, net: nn.Module, cfg: PolicyConfig, device: str = "cpu"):
        self.model = net.to(device)
        self.cfg = cfg
        self.device = device
        self.version = 0

    @classmethod
    def create(cls, cfg: PolicyConfig, seed: int = 0, device: str = "cpu") -> PointingPolicy:
        if cfg.path:
            return cls.from_pretrained(cfg.path, cfg, device)
        torch.manual_seed(seed)
        return cls(cls.Net(cfg.d_model, cfg.d_ff), cfg, device)

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, cfg: PolicyConfig, device: str = "cpu") -> PointingPolicy:
        folder = model_folder(path, "policy.path")
        sizes = json.loads((folder / cls.CONFIG_NAME).read_text())
        net = cls.Net(sizes["d_model"], sizes["hidden"])
        net.load_state_dict(torch.load(folder / cls.WEIGHTS_NAME, map_location="cpu", weights_only=True))
        return cls(net, cfg, device)

    def save_pretrained(self, path: str | os.PathLike) -> None:
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        sizes = {"kind": self.KIND, "d_model": self.model.d, "hidden": self.model.hidden}
        (folder / self.CONFIG_NAME).write_text(json.dumps(sizes, indent=2) + "\n")
        torch.save(self.state_dict(), folder / self.WEIGHTS_NAME)

    def decisions(self, observations: Sequence[Observation]) -> list[PointingDecision]:
        """One decision per observation; an observation given more than once (Digi-Q's candidates: K draws a
        state) is scored once."""
        scored: dict[int, PointingDecision] = {}
        for o in observations:
            if id(o) not in scored:
                scored[id(o)] = self.Decision(self.model, o, self.cfg.temperature)
        return [scored[id(o)] for o in observations]

    @torch.no_grad()
    def act(self, observations: Sequence[Observation], greedy: bool = False) -> list[ActionSample]:
        self.model.eval()
        return [ActionSample(*d.sample(greedy), self.version) for d in self.decisions(observations)]

    def token_logprobs(
        self, observations: Sequence[Observation], actions: Sequence[str]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Each action's log-prob as a single token ([B, 1]) and an all-true mask."""
        decisions = self.decisions(observations)
        logp = torch.stack([d.logprob(a).to(self.device) for d, a in zip(decisions, actions, strict=True)])
        logp = logp.unsqueeze(-1)
        return logp, torch.ones_like(logp, dtype=torch.bool)
