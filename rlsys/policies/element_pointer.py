"""A small policy that points at an element instead of spelling its number (`policy.kind: element_pointer`).

A byte-level seq2seq model has to learn, from a few hundred successes, both to read the element list and to
write `[k]` for the line it chose; matching a word of the instruction to an element's text is then out of
its reach in a CPU-sized run. This policy scores every element of the numbered list (`[k]: <tag> "text";`,
or the `roles` rendering) directly:

- what an element's score sees: features any page has, computed from the instruction and the list: whether
  the element's words occur in the instruction (all of them, some, as a quoted span), where its text is named
  and whether it is named before the others, whether an ordinal in the instruction (`2nd`, `third`) is its
  place, whether it is editable, where it is in the list, and what the previous actions did to it. Never its
  own words or its number: those would let the first successes teach "Tab #1 is good" or "[0] is good", and
  filtered BC, which learns only from successes, would then never try the right element for "Tab #3".
- what it learns beyond that: a small MLP over those features, hashed bags of words (no vocabulary, so unseen
  words cost nothing) for the instruction, which decides `click` or `type` on a field, and for the words
  around each text it may type (`username "..."`, `password "..."`).

Untrained, every choice is equally likely (the heads start at zero, and greedy decoding breaks ties at
random: with a draw each evaluation episode seeds from the run seed and its problem, see `evaluation_seed` in
rlsys/actors/runner.py), so an evaluation before training measures the random policy, the same one per seed.

An action is chosen in up to three factors: the element (over what the grammar lets it click), then, for an
editable element, `click` or `type`, then the text to type among the instruction's quoted spans and words.
Its log-probability is the sum of the factors' log-probs: `token_logprobs` returns it as one "token", so
filtered BC, SFT and DigiRL train it unchanged. Nothing about any particular task is written in here.
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

CONFIG_NAME = "element_pointer.json"
WEIGHTS_NAME = "element_pointer.pt"
BUCKETS = 4096  # hashed word ids
MAX_TEXTS = 24  # candidate texts to type

_LINE = re.compile(r"^\s*\[(\d+)\]:?\s?(.*)$")
_QUOTED = re.compile(r"\"([^\"]*)\"")
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
        quoted = _QUOTED.search(rest)
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
    for k, m in enumerate(_QUOTED.finditer(instruction)):
        if m.group(1).strip():
            found.setdefault(m.group(1), (m.group(1), m.start(1), True, k + 1))
    if not found:
        for m in re.finditer(r"\S+", instruction):
            found.setdefault(m.group().strip(_STRIP), (m.group().strip(_STRIP), m.start(), False, 0))
    keep = [c for c in found.values() if c[0].strip() and len(c[0]) <= max_text and set(c[0]) <= PRINTABLE]
    return keep[:MAX_TEXTS]


ORDINALS = {w: n for n, w in enumerate("first second third fourth fifth sixth seventh eighth ninth tenth".split(), 1)}


def ordinal_of(instruction: str) -> int | None:
    """The first ordinal the instruction uses (`2nd`, `third`), as a number."""
    for w in words(instruction):
        if w in ORDINALS:
            return ORDINALS[w]
        m = re.fullmatch(r"(\d+)(st|nd|rd|th)", w)
        if m:
            return int(m.group(1))
    return None


def _context_words(instruction: str, position: int) -> list[str]:
    """The word just before and just after a candidate text: what says it is a username, a password, a date."""
    before = words(instruction[:position])[-1:]
    after = words(instruction[position:])[1:2]
    return [f"<{w}" for w in before] + [f">{w}" for w in after]


class PointerNet(nn.Module):
    MATCH_FEATURES = 7  # given twice: for fields (whose text is what was typed) and for everything else
    ELEMENT_FEATURES = 2 * MATCH_FEATURES + 12
    TEXT_FEATURES = 8

    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.words = nn.EmbeddingBag(BUCKETS, d, mode="mean")
        # An element's score sees only the features, never its own words or its number: a model that did would
        # learn "Tab #1 is a good tab" or "[0] is a good element" from its first successes, and filtered BC, which
        # learns only from successes, would never try [2] for "Tab #3" again.
        self.element = nn.Sequential(
            nn.Linear(self.ELEMENT_FEATURES, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        self.score = nn.Linear(hidden, 1)
        self.direct = nn.Linear(self.ELEMENT_FEATURES, 1)  # the features' own say, shared by every task
        self.verb = nn.Linear(hidden + d, 2)  # click or type, given the element and the instruction
        self.text = nn.Sequential(nn.Linear(hidden + d + self.TEXT_FEATURES, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        for last in (self.score, self.direct, self.verb, self.text[-1]):  # untrained, every choice is equally likely
            nn.init.zeros_(last.weight)
            nn.init.zeros_(last.bias)

    def bag(self, groups: list[list[str]]) -> torch.Tensor:
        """One mean embedding per group of tokens (an empty group gets zeros)."""
        ids = [bucket(t) for g in groups for t in g]
        offsets = torch.tensor([0] + [len(g) for g in groups[:-1]]).cumsum(0)
        device = self.words.weight.device
        return self.words(torch.tensor(ids, dtype=torch.long, device=device), offsets.to(device))


class Decision:
    """One observation's factored action distribution: the candidates and the net's logits over them."""

    def __init__(self, net: PointerNet, obs: Observation, temperature: float):
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

    def _element_features(self, k: int, rank: int, first_mention: float) -> list[float]:
        element = self.elements[k]
        instr_words = set(words(self.instruction))
        instr_seq = " ".join(words(self.instruction))
        mine = words(element.text)
        quoted = {q.strip().lower() for q in _QUOTED.findall(self.instruction)}
        match = [
            float(bool(mine)),
            float(bool(mine) and f" {' '.join(mine)} " in f" {instr_seq} "),
            sum(w in instr_words for w in mine) / len(mine) if mine else 0.0,
            float(any(w in instr_words for w in mine)),
            float(element.text.strip().lower() in quoted and bool(element.text.strip())),
            first_mention,
            float(rank == 0),  # named before every other element
        ]
        none = [0.0] * len(match)
        clicks = sum(1 for verb, i, _ in self.previous if verb == "click" and i == element.index)
        types = sum(1 for verb, i, _ in self.previous if verb == "type" and i == element.index)
        last = self.previous[-1][1] == element.index if self.previous else False
        n = len(self.elements)
        step = len(self.previous)
        ordinal = ordinal_of(self.instruction)
        same_tag = [e for e in self.elements if e.tag == element.tag].index(element)
        return [
            *(none + match if self.typeable[k] else match + none),
            float(self.typeable[k]),
            min(clicks, 2) / 2,
            min(types, 2) / 2,
            float(last),
            k / max(n - 1, 1),
            float(k == n - 1),
            float(step == 0),
            float(step == 1),
            float(step >= 2),
            float(ordinal is not None),
            float(ordinal == k + 1),
            float(ordinal == same_tag + 1),
        ]

    def _score(self) -> None:
        net = self.net
        instr_tokens = words(self.instruction)
        instr_tokens = instr_tokens + [f"{a}_{b}" for a, b in zip(instr_tokens, instr_tokens[1:])]
        u = net.bag([instr_tokens])[0]
        # where each element's whole text first occurs in the instruction, and which element is named first
        flat = words(self.instruction)
        first = []
        for el in self.elements:
            mine = words(el.text)
            hits = [k for k in range(len(flat) - len(mine) + 1) if mine and flat[k : k + len(mine)] == mine]
            first.append(hits[0] / max(len(flat), 1) if hits else -1.0)
        mentioned = sorted((f, k) for k, f in enumerate(first) if f >= 0)
        rank = {k: r for r, (_, k) in enumerate(mentioned)}
        feats = torch.tensor(
            [self._element_features(k, rank.get(k, -1), first[k]) for k in range(len(self.elements))], device=u.device
        )
        h = net.element(feats)
        self.hidden = h
        self.element_logits = (net.score(h) + net.direct(feats)).squeeze(-1) / self.temperature
        self.verb_logits = net.verb(torch.cat([h, u.expand(len(self.elements), -1)], -1)) / self.temperature
        if self.texts:
            typed = {t for verb, _, t in self.previous if verb == "type"}
            ctx = net.bag([_context_words(self.instruction, pos) or ["<none>"] for _, pos, _, _ in self.texts])
            n = len(self.instruction) or 1
            self.text_feats = torch.tensor(
                [
                    [
                        float(quoted),
                        float(order == 1),
                        float(order == 2),
                        float(order >= 3),
                        pos / n,
                        float(text in typed),
                        float(bool(re.search(r"\d", text))),
                        min(len(text), 32) / 32,
                    ]
                    for text, pos, quoted, order in self.texts
                ],
                device=h.device,
            )
            self.text_ctx = ctx

    def _text_logits(self, k: int, texts: list) -> torch.Tensor:
        feats, ctx = self.text_feats, self.text_ctx
        if len(texts) > len(self.texts):  # a text from elsewhere (a demonstration): scored with neutral features
            extra = len(texts) - len(self.texts)
            feats = torch.cat([feats, feats.new_zeros(extra, feats.shape[1])])
            ctx = torch.cat([ctx, ctx.new_zeros(extra, ctx.shape[1])])
        h = self.hidden[k].expand(len(texts), -1)
        return self.net.text(torch.cat([h, ctx, feats], -1)).squeeze(-1) / self.temperature

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
        text_logp = torch.log_softmax(self._text_logits(k, self.texts), -1)
        t = pick(text_logp)
        return f"type [{index}] {self.texts[t][0]}", float(total + text_logp[t])

    def logprob(self, action: str) -> torch.Tensor:
        """The log-prob `sample` gives `action` (differentiable); -inf for what it could never say."""
        parsed = parse_action(action)
        minus_inf = torch.tensor(float("-inf"))
        if not self.elements or parsed is None:
            return minus_inf
        verb, index, text = parsed
        found = [k for k, e in enumerate(self.elements) if e.index == index]
        if not found:
            return minus_inf
        k = found[0]
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


class ElementPointerPolicy(ModulePolicy):
    """The Policy contract (see `rlsys.policies`) for `PointerNet`."""

    SAVED_AS = (CONFIG_NAME,)  # what save_pretrained writes that marks a folder as this kind (see HFPolicy)

    def __init__(self, net: PointerNet, cfg: PolicyConfig, device: str = "cpu"):
        self.model = net.to(device)
        self.cfg = cfg
        self.device = device
        self.version = 0

    @classmethod
    def create(cls, cfg: PolicyConfig, seed: int = 0, device: str = "cpu") -> ElementPointerPolicy:
        if cfg.path:
            return cls.from_pretrained(cfg.path, cfg, device)
        torch.manual_seed(seed)
        return cls(PointerNet(cfg.d_model, cfg.d_ff), cfg, device)

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, cfg: PolicyConfig, device: str = "cpu") -> ElementPointerPolicy:
        folder = model_folder(path, "policy.path")
        sizes = json.loads((folder / CONFIG_NAME).read_text())
        net = PointerNet(sizes["d_model"], sizes["hidden"])
        net.load_state_dict(torch.load(folder / WEIGHTS_NAME, map_location="cpu", weights_only=True))
        return cls(net, cfg, device)

    def save_pretrained(self, path: str | os.PathLike) -> None:
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        sizes = {"kind": "element_pointer", "d_model": self.model.words.embedding_dim}
        sizes["hidden"] = self.model.score.in_features
        (folder / CONFIG_NAME).write_text(json.dumps(sizes, indent=2) + "\n")
        torch.save(self.state_dict(), folder / WEIGHTS_NAME)

    def _decisions(self, observations: Sequence[Observation]) -> list[Decision]:
        return [Decision(self.model, o, self.cfg.temperature) for o in observations]

    @torch.no_grad()
    def act(self, observations: Sequence[Observation], greedy: bool = False) -> list[ActionSample]:
        self.model.eval()
        return [ActionSample(*d.sample(greedy), self.version) for d in self._decisions(observations)]

    def token_logprobs(
        self, observations: Sequence[Observation], actions: Sequence[str]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Each action's log-prob as a single token ([B, 1]) and an all-true mask."""
        decisions = self._decisions(observations)
        logp = torch.stack([d.logprob(a).to(self.device) for d, a in zip(decisions, actions, strict=True)])
        logp = logp.unsqueeze(-1)
        return logp, torch.ones_like(logp, dtype=torch.bool)
