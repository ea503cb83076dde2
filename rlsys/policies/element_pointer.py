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

import re

import torch
from torch import nn

from rlsys.policies.pointing import (
    BUCKETS,
    QUOTED,
    PointingDecision,
    PointingPolicy,
    bucket,
    candidate_texts,
    context_words,
    elements_of,
    words,
)

__all__ = ["ElementPointerPolicy", "PointerNet", "candidate_texts", "elements_of", "ordinal_of"]

CONFIG_NAME = "element_pointer.json"
WEIGHTS_NAME = "element_pointer.pt"


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


class PointerNet(nn.Module):
    MATCH_FEATURES = 7  # given twice: for fields (whose text is what was typed) and for everything else
    ELEMENT_FEATURES = 2 * MATCH_FEATURES + 12
    TEXT_FEATURES = 8

    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.d, self.hidden = d, hidden
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


class Decision(PointingDecision):
    """One observation's factored action distribution: the candidates and the net's logits over them."""

    def _element_features(self, k: int, rank: int, first_mention: float) -> list[float]:
        element = self.elements[k]
        instr_words = set(words(self.instruction))
        instr_seq = " ".join(words(self.instruction))
        mine = words(element.text)
        quoted = {q.strip().lower() for q in QUOTED.findall(self.instruction)}
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
        done, steps = self.history(element)[:3], self.history(element)[3:]  # to it (clicks, types, last); how many
        n = len(self.elements)
        ordinal = ordinal_of(self.instruction)
        same_tag = [e for e in self.elements if e.tag == element.tag].index(element)
        return [
            *(none + match if self.typeable[k] else match + none),
            float(self.typeable[k]),
            *done,
            k / max(n - 1, 1),
            float(k == n - 1),
            *steps,
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
            ctx = net.bag([context_words(self.instruction, pos) or ["<none>"] for _, pos, _, _ in self.texts])
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


class ElementPointerPolicy(PointingPolicy):
    """The Policy contract (see `rlsys.policies`) for `PointerNet`."""

    KIND = "element_pointer"
    CONFIG_NAME = CONFIG_NAME
    WEIGHTS_NAME = WEIGHTS_NAME
    Net = PointerNet
    Decision = Decision
