"""A pointing policy that learns to read the instruction against the page (`policy.kind: learned_pointer`).

`element_pointer` scores elements by hand-built features ("the element's whole text occurs in the
instruction", "an ordinal in the instruction is its place"): a few weights solve whole task families with no
training, so its learning curves say little about the algorithm that trained it. This policy is given no such
feature. What it sees of each element of the numbered list:

- a learned match between its text and the instruction: each hashed word (and word pair) has a fixed random
  code, the instruction's tokens go through a learned query projection and the element's through a separate
  learned key projection: nothing makes the same word on both sides match until it is learned. Each
  element token takes a soft maximum over the instruction's tokens (less their mean: a word that was often
  right is no match by itself), and the element pools these by mean, min and max (min can say "every word of
  it occurs");
- its own tag and words (a bag of embeddings), its place in the list (relative, and whether last), whether
  the grammar lets it take text, and what the previous actions did to it (clicked, typed, the last target).

For `type [k] text` it chooses among candidate texts (the instruction's quoted spans, else its words) by a
learned score of the words just around each candidate, the candidate's own words and the element's state;
nothing says which span is quoted first or which one was named.

The factored action distribution, its log-prob as one "token", save and load and the untrained uniform policy
(every head starts at zero) are shared with `element_pointer` (rlsys/policies/pointing.py).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from rlsys.policies.pointing import BUCKETS, PointingDecision, PointingPolicy, bucket, context_words, words

CONFIG_NAME = "learned_pointer.json"
WEIGHTS_NAME = "learned_pointer.pt"
NONE = "<none>"  # the token of an empty text or instruction


def tokens(text: str) -> list[str]:
    """The words of a text and its adjacent word pairs (what can tell `red kettle` from `soft kettle` when the
    instruction names `soft kettle` and, elsewhere, `red tools`)."""
    ws = words(text)
    return (ws + [f"{a}_{b}" for a, b in zip(ws, ws[1:])]) or [NONE]


class LearnedPointerNet(nn.Module):
    MATCH = 4  # mean, min and max over the element's tokens of their best match, and whether it has words
    STATE = 9  # typeable, place, last in the list, and `PointingDecision.history`

    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.d, self.hidden = d, hidden
        self.embed = nn.Embedding(BUCKETS, d)
        # what the match reads: a fixed random code per hashed token (the same in every process), so that what it
        # learns is the projections, one way of comparing any two words, not a table of which words were right
        codes = torch.randn(BUCKETS, d, generator=torch.Generator().manual_seed(0))
        self.register_buffer("codes", codes, persistent=False)
        self.query = nn.Linear(d, d, bias=False)  # instruction tokens
        self.key = nn.Linear(d, d, bias=False)  # element tokens: another map, so equal words start unmatched
        # the match is given twice, for fields (whose text is what was typed) and for everything else
        inputs = 2 * self.MATCH + 2 * d + self.STATE
        self.element = nn.Sequential(nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.score = nn.Linear(hidden, 1)
        self.direct = nn.Linear(2 * self.MATCH, 1)  # the match's own say, a short path for its gradient
        self.verb = nn.Linear(hidden + d, 2)  # click or type, given the element and the instruction
        self.text = nn.Sequential(nn.Linear(hidden + 2 * d + 1, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        for last in (self.score, self.direct, self.verb, self.text[-1]):  # untrained, every choice is equally likely
            nn.init.zeros_(last.weight)
            nn.init.zeros_(last.bias)

    def ids(self, groups: list[list[str]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids [G, L] padded with 0, and the mask of real tokens."""
        width = max(len(g) for g in groups)
        ids = torch.zeros(len(groups), width, dtype=torch.long)
        mask = torch.zeros(len(groups), width, dtype=torch.bool)
        for i, g in enumerate(groups):
            ids[i, : len(g)] = torch.tensor([bucket(t) for t in g])
            mask[i, : len(g)] = True
        device = self.embed.weight.device
        return ids.to(device), mask.to(device)

    def bag(self, groups: list[list[str]]) -> torch.Tensor:
        """One mean embedding per (non-empty) group of tokens."""
        ids, mask = self.ids(groups)
        e = self.embed(ids) * mask.unsqueeze(-1)
        return e.sum(1) / mask.sum(1, keepdim=True)

    def match(self, instruction: list[str], texts: list[list[str]]) -> torch.Tensor:
        """[E, 3]: for each text, the mean, min and max over its tokens of a soft maximum over the instruction's
        tokens of the learned query-key similarity."""
        q = self.query(self.codes[self.ids([instruction])[0][0]])  # [N, d]
        ids, mask = self.ids(texts)
        k = self.key(self.codes[ids])  # [E, L, d]
        sim = torch.einsum("eld,nd->eln", k, q) / math.sqrt(self.d)
        # less the mean over the instruction: what an element token shares with every instruction token (a word
        # that was often right in training) is no match, only what it shares with some more than with others
        best = torch.logsumexp(sim, -1) - math.log(q.shape[0]) - sim.mean(-1)  # [E, L]
        count = mask.sum(1)
        mean = (best * mask).sum(1) / count
        low = best.masked_fill(~mask, float("inf")).amin(1)
        high = best.masked_fill(~mask, float("-inf")).amax(1)
        return torch.stack([mean, low, high], -1)


class Decision(PointingDecision):
    """One observation's factored action distribution, scored by `LearnedPointerNet`."""

    net: LearnedPointerNet

    def _score(self) -> None:
        net, elements = self.net, self.elements
        instruction = tokens(self.instruction)
        texts = [tokens(e.text) for e in elements]
        has_words = torch.tensor([[float(bool(words(e.text)))] for e in elements], device=net.embed.weight.device)
        match = torch.cat([net.match(instruction, texts), has_words], -1)
        typeable = torch.tensor(self.typeable, device=match.device).unsqueeze(-1)
        match = torch.cat([match * ~typeable, match * typeable], -1)
        n = len(elements)
        state = torch.tensor(
            [
                [float(self.typeable[k]), k / max(n - 1, 1), float(k == n - 1), *self.history(e)]
                for k, e in enumerate(elements)
            ],
            device=match.device,
        )
        own = net.bag([[f"<tag:{e.tag}>"] for e in elements])
        h = net.element(torch.cat([match, own, net.bag(texts), state], -1))
        self.hidden = h
        self.element_logits = (net.score(h) + net.direct(match)).squeeze(-1) / self.temperature
        u = net.bag([instruction])[0]
        self.verb_logits = net.verb(torch.cat([h, u.expand(n, -1)], -1)) / self.temperature
        self.typed = {t for verb, _, t in self.previous if verb == "type"}
        if self.texts:
            self.text_ctx = net.bag([context_words(self.instruction, pos) or [NONE] for _, pos, *_ in self.texts])

    def _text_logits(self, k: int, texts: list) -> torch.Tensor:
        ctx = self.text_ctx if self.texts else self.hidden.new_zeros(0, self.net.d)
        if len(texts) > len(self.texts):  # a text from elsewhere (a demonstration): no context around it
            ctx = torch.cat([ctx, ctx.new_zeros(len(texts) - len(self.texts), ctx.shape[1])])
        own = self.net.bag([tokens(t) for t in texts])
        typed = torch.tensor([[float(t in self.typed)] for t in texts], device=own.device)
        h = self.hidden[k].expand(len(texts), -1)
        return self.net.text(torch.cat([h, ctx, own, typed], -1)).squeeze(-1) / self.temperature


class LearnedPointerPolicy(PointingPolicy):
    """The Policy contract (see `rlsys.policies`) for `LearnedPointerNet`."""

    KIND = "learned_pointer"
    CONFIG_NAME = CONFIG_NAME
    WEIGHTS_NAME = WEIGHTS_NAME
    Net = LearnedPointerNet
    Decision = Decision
