"""Grammar-constrained decoding: one decoding step at batch 8, and the teacher-forcing mask, at 32k and 152k tokens.

The tokenizers are built here, with no download: a byte-level BPE (Qwen2 / GPT-2 style: the 256 byte
symbols, then multi-character tokens) whose vocabulary is the word pieces of the repository's own
Markdown and Python files, most frequent first, topped up with made-up pieces (a fifth of them
non-ASCII, as in a multilingual vocabulary) up to `--vocab`.

Each row of the batch is a different page's element grammar (`envs/web/spaces/element.grammar`:
`--elements` clickable elements, a tenth of them typeable, 32 characters of free text), so nothing
is shared between rows. Timed, per step, for `GrammarLogitsProcessor.__call__` on [8, V] logits, with
one torch thread (as in a runner):
- choice, first step: nothing generated yet; every choice and head is a literal to continue.
- choice, mid-literal: `click [1` generated.
- free text: `type [N] red sh` generated (the room left is 26 characters).
- finished: EOS generated; only EOS and padding remain.
The new code indexes each grammar on first use and keeps, per tokenizer, the tokens that begin each
literal ending (`click [12]`, `2]`: the same on every page) and each character set's and room's token
row. So each step is timed three ways: "new pages" (grammar indexes dropped before each step: the first
step of every generation in a run), "first pages ever" (every lazily filled cache dropped: the first
generation after start-up) and "warm" (a later step of the same generation). The table's set-up
(decoding every token, and the table of the characters each token uses) is timed on its own, "setup".
"old" is the implementation this replaced (Python sets of token ids per row, a float mask), kept
below verbatim; "new" is `rlsys.policies.grammar_decoding`.

Teacher forcing: the mask for [32, 12] targets (half the rows a click, half typed text), old float32
additive mask against the new boolean one, with their sizes.

The `pae` and `coords` spaces' grammars (`Thought:` / `Action Plan:` free text, then the action; points
as `0.` and up to four digits) had no "old" implementation; their branches are timed the same three
ways, on pages of the same size, and their teacher-forcing mask for [32, T] targets of whole actions.

    python benchmarks/grammar_decoding.py --vocab 32000 152000
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import re
import statistics
import time
from collections import Counter, defaultdict
from functools import partial
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LogitsProcessor, PreTrainedTokenizerFast

import rlsys.core.grammar as core_grammar
from rlsys.core.grammar import Grammar
from rlsys.envs.web.spaces import coords, pae
from rlsys.envs.web.spaces.element import grammar as element_grammar
from rlsys.policies.causal_lm import byte_symbols
from rlsys.policies.grammar_decoding import GrammarLogitsProcessor, TokenTable, grammar_token_mask

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
SPECIALS = ["<pad>", "</s>", "<unk>"]
PIECE = re.compile(r" ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]+|\s+")


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-to-symbol map, which `pre_tokenizers.ByteLevel` and its decoder use."""
    return dict(enumerate(byte_symbols()))


def vocabulary(size: int, seed: int = 0) -> list[str]:
    """`size` distinct texts: the repository's word pieces (every prefix of 2+ characters of each
    pre-token, by frequency), then made-up ones."""
    counts: Counter[str] = Counter()
    for path in sorted([*ROOT.glob("docs/**/*.md"), *ROOT.glob("rlsys/**/*.py"), ROOT / "README.md"]):
        for piece in PIECE.findall(path.read_text(errors="ignore")):
            counts.update(piece[:k] for k in range(2, min(len(piece), 16) + 1))
    texts = [t for t, _ in counts.most_common(size)]
    rng, seen = random.Random(seed), set(texts)
    letters, foreign = "abcdefghijklmnopqrstuvwxyz", "éèàüößçñ日本語中文字Россияπλ"
    while len(texts) < size:
        alphabet = foreign if rng.random() < 0.2 else letters
        text = rng.choice(["", " "]) + "".join(rng.choices(alphabet, k=rng.randint(2, 10)))
        if text not in seen:
            seen.add(text)
            texts.append(text)
    return texts


def synthetic_tokenizer(size: int) -> PreTrainedTokenizerFast:
    symbols = bytes_to_unicode()
    vocab = {token: i for i, token in enumerate(SPECIALS)}
    for b in range(256):
        vocab[symbols[b]] = len(vocab)
    for text in vocabulary(size - len(vocab)):
        vocab.setdefault("".join(symbols[b] for b in text.encode()), len(vocab))
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(SPECIALS)
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="</s>", pad_token="<pad>", unk_token="<unk>")


def tokens_for(table: TokenTable, text: str) -> list[int]:
    """`text` in the longest tokens that spell it (how a trained policy tends to write)."""
    ids = []
    while text:
        piece = next(text[:k] for k in range(min(len(text), table.longest), 0, -1) if text[:k] in table.by_text)
        ids.append(int(table.by_text[piece][0]))
        text = text[len(piece) :]
    return ids


def page_grammars(batch: int, elements: int, space_grammar=element_grammar) -> list[Grammar]:
    pages = []
    for row in range(batch):
        n = elements + row  # a different page per row
        pages.append(space_grammar([{"editable": i % 10 == 3} for i in range(n)], max_text=32))
    return pages


THOUGHT = "Thought: The search box is empty, so I type the name."
PLAN = "Action Plan: tap the search box"
SPACE_BRANCHES = {  # what was generated before the timed step
    "pae, first step": (pae, ""),
    "pae, thought": (pae, THOUGHT[:50]),
    "pae, action after the thought": (pae, THOUGHT + "\nAction: Cli"),
    "pae, typed text": (pae, THOUGHT + "\nAction: Type [3]; [red sh"),
    "coords, first step": (coords, ""),
    "coords, plan": (coords, PLAN),
    "coords, point": (coords, PLAN + ' ; Action Decision: "action_type": "DUAL_POINT", "touch_point": "[0.12'),
}
SPACE_ACTIONS = {
    pae: [THOUGHT + "\nAction: Click [12]", THOUGHT + "\nAction: Type [3]; [red shoes size 9]"],
    coords: [
        PLAN + ' ; Action Decision: "action_type": "DUAL_POINT", "touch_point": "[0.1234, 0.5]", '
        '"lift_point": "[0.1234, 0.5]", "typed_text": ""',
        PLAN + ' ; Action Decision: "action_type": "TYPE", "touch_point": "[-1.0, -1.0]", '
        '"lift_point": "[-1.0, -1.0]", "typed_text": "red shoes size 9"',
    ],
}


# -- the implementation this replaced, verbatim but for taking the table's fields as arguments


class HeadTable:
    def __init__(self, table: TokenTable):
        self.eos_id, self.pad_id, self.texts = table.eos_id, table.pad_id, table.texts
        self.by_text: dict[str, list[int]] = defaultdict(list)
        for i, text in enumerate(self.texts):
            if text:
                self.by_text[text].append(i)
        self.lengths = table.lengths
        self.printable = table.printable

    def text_of(self, ids: list[int]) -> str:
        return "".join(self.texts[i] for i in ids if i < len(self.texts))

    def allowed(self, grammar: Grammar, prefix: str) -> tuple[set[int], bool]:
        ids: set[int] = set()
        can_end = False

        def add_prefixes_of(rest: str) -> None:
            for k in range(1, len(rest) + 1):
                ids.update(self.by_text.get(rest[:k], ()))

        for choice in grammar.choices:
            if choice == prefix:
                can_end = True
            elif choice.startswith(prefix):
                add_prefixes_of(choice[len(prefix) :])
        for head in grammar.text_prefixes:
            if prefix.startswith(head):
                text = prefix[len(head) :]
                room = grammar.max_text - len(text)
                if room > 0:
                    ids.update(np.flatnonzero(self.printable & (self.lengths <= room)).tolist())
                can_end = can_end or bool(text.strip())
            elif head.startswith(prefix):
                add_prefixes_of(head[len(prefix) :])
        return ids, can_end


class HeadLogitsProcessor(LogitsProcessor):
    def __init__(self, grammars, table: HeadTable, prompt_len: int):
        self.grammars, self.table, self.prompt_len = grammars, table, prompt_len

    def __call__(self, input_ids, scores):
        mask = torch.zeros_like(scores)
        eos = self.table.eos_id
        for row, grammar in enumerate(self.grammars):
            if grammar is None:
                continue
            mask[row] = float("-inf")
            generated = input_ids[row, self.prompt_len :].tolist()
            if eos in generated:
                mask[row, [eos, self.table.pad_id]] = 0
                continue
            ids, can_end = self.table.allowed(grammar, self.table.text_of(generated))
            if can_end or not ids:
                ids.add(eos)
            mask[row, sorted(i for i in ids if i < scores.shape[1])] = 0
        return scores + mask


def head_logit_mask(grammars, table: HeadTable, targets, mask, vocab_size):
    out = torch.zeros((*targets.shape, vocab_size), device=targets.device)
    for row, grammar in enumerate(grammars):
        if grammar is None:
            continue
        so_far: list[int] = []
        for pos in mask[row].nonzero().flatten().tolist():
            ids, can_end = table.allowed(grammar, table.text_of(so_far))
            if can_end or not ids:
                ids.add(table.eos_id)
            out[row, pos] = float("-inf")
            out[row, pos, sorted(i for i in ids if i < vocab_size)] = 0
            so_far.append(int(targets[row, pos]))
    return out


# -- timing


def timed(step, reps: int, before=None) -> dict:
    """Wall and CPU milliseconds (the machine is shared: CPU time is the cost, wall time what a caller waits)."""
    wall, cpu = [], []
    for _ in range(reps):
        if before is not None:
            before()
        start, start_cpu = time.perf_counter(), time.thread_time()
        step()
        wall.append((time.perf_counter() - start) * 1000)
        cpu.append((time.thread_time() - start_cpu) * 1000)
    return {
        "wall_median_ms": round(statistics.median(wall), 3),
        "wall_min_ms": round(min(wall), 3),
        "cpu_median_ms": round(statistics.median(cpu), 3),
        "reps": reps,
    }


def forget_grammars(table: TokenTable) -> None:
    table._indexes.clear()
    core_grammar._MATCHERS.clear()


def forget_everything(table: TokenTable) -> None:
    forget_grammars(table)
    table._fits.clear()
    table._withins.clear()
    table._beginnings.clear()


def step_benchmarks(table: TokenTable, head: HeadTable, args) -> dict:
    grammars = page_grammars(args.batch, args.elements)
    prompt = [table.pad_id] * 16
    generated = {
        "choice, first step": [[] for _ in grammars],
        "choice, mid-literal": [tokens_for(table, "click [1") for _ in grammars],
        "free text": [tokens_for(table, "type [3] red sh") for _ in grammars],
        "finished": [tokens_for(table, "click [2]") + [table.eos_id] for _ in grammars],
    }
    scores = torch.randn(args.batch, table.size)
    rows = {}
    for branch, ids in generated.items():
        longest = max(map(len, ids))
        input_ids = torch.tensor([prompt + g + [table.pad_id] * (longest - len(g)) for g in ids])
        new = GrammarLogitsProcessor(grammars, table, len(prompt))
        old = HeadLogitsProcessor(grammars, head, len(prompt))
        assert torch.equal(new(input_ids, scores), old(input_ids, scores)), branch

        def first_step(input_ids=input_ids):  # a new generation: a new processor, its grammars not indexed yet
            GrammarLogitsProcessor(grammars, table, len(prompt))(input_ids, scores)

        rows[branch] = {
            "old": timed(partial(old, input_ids, scores), args.old_reps),
            "new, new pages": timed(first_step, args.reps, lambda: forget_grammars(table)),
            "new, first pages ever": timed(first_step, args.reps, lambda: forget_everything(table)),
            "new, warm": timed(partial(new, input_ids, scores), args.reps),
        }
        print(json.dumps({"vocab": table.size, "branch": branch, **rows[branch]}))
    return rows


def space_step_benchmarks(table: TokenTable, args) -> dict:
    prompt = [table.pad_id] * 16
    scores = torch.randn(args.batch, table.size)
    rows = {}
    for branch, (space, text) in SPACE_BRANCHES.items():
        grammars = page_grammars(args.batch, args.elements, space.grammar)
        input_ids = torch.tensor([prompt + tokens_for(table, text)] * args.batch)
        new = GrammarLogitsProcessor(grammars, table, len(prompt))
        assert all(bool((row > float("-inf")).any()) for row in new(input_ids, scores)), branch

        def first_step(grammars=grammars, input_ids=input_ids):
            GrammarLogitsProcessor(grammars, table, len(prompt))(input_ids, scores)

        last = len(table.text_of(tokens_for(table, text)[-1:]))

        def forget_last_step(new=new, text=text, last=last):  # what came before is known, as in a generation
            for index in new.indexes:
                index._steps.pop(text, None)
                for end in range(len(text) - last + 1, len(text) + 1):
                    index.matcher._states.pop(text[:end], None)

        rows[branch] = {
            "new, new pages": timed(first_step, args.reps, lambda: forget_grammars(table)),
            "new, first pages ever": timed(first_step, args.reps, lambda: forget_everything(table)),
            "new, next token": timed(partial(new, input_ids, scores), args.reps, forget_last_step),
            "new, warm": timed(partial(new, input_ids, scores), args.reps),
        }
        print(json.dumps({"vocab": table.size, "branch": branch, **rows[branch]}))
    return rows


def space_teacher_forcing(table: TokenTable, args) -> dict:
    """The teacher-forcing mask over whole `pae` and `coords` actions, 32 rows, half of each form."""
    out = {}
    for space, actions in SPACE_ACTIONS.items():
        grammars = page_grammars(32, args.elements, space.grammar)
        ids = [tokens_for(table, actions[row % 2]) + [table.eos_id] for row in range(32)]
        targets = torch.full((32, max(map(len, ids))), table.pad_id)
        mask = torch.zeros(targets.shape, dtype=torch.bool)
        for row, row_ids in enumerate(ids):
            targets[row, : len(row_ids)] = torch.tensor(row_ids)
            mask[row, : len(row_ids)] = True
        allowed = grammar_token_mask(grammars, table, targets, mask, table.size)
        assert bool(allowed.gather(-1, targets.unsqueeze(-1))[mask].all()), space.__name__
        name = space.__name__.rsplit(".", 1)[-1]
        out[name] = {
            "shape": list(allowed.shape),
            "bool_mask_mib": round(allowed.nelement() / 2**20, 1),
            "new, new pages": timed(
                partial(grammar_token_mask, grammars, table, targets, mask, table.size),
                5,
                partial(forget_grammars, table),
            ),
        }
        print(json.dumps({"vocab": table.size, f"teacher_forcing_{name}": out[name]}))
    return out


def teacher_forcing(table: TokenTable, head: HeadTable, args) -> dict:
    rows, length = 32, 12
    grammars = page_grammars(rows, args.elements)
    actions = [f"click [{r * 3}]" if r % 2 else f"type [{r // 10 * 10 + 3}] red shoes size 9" for r in range(rows)]
    targets = torch.full((rows, length), table.pad_id)
    mask = torch.zeros((rows, length), dtype=torch.bool)
    for row, action in enumerate(actions):
        ids = (tokens_for(table, action) + [table.eos_id])[:length]
        targets[row, : len(ids)] = torch.tensor(ids)
        mask[row, : len(ids)] = True
    new = grammar_token_mask(grammars, table, targets, mask, table.size)
    old = head_logit_mask(grammars, head, targets, mask, table.size)
    assert torch.equal(new, old == 0)
    out = {
        "shape": list(new.shape),
        "old_float32_mask_mib": round(old.element_size() * old.nelement() / 2**20, 1),
        "new_bool_mask_mib": round(new.element_size() * new.nelement() / 2**20, 1),
        "old": timed(lambda: head_logit_mask(grammars, head, targets, mask, table.size), 1),
        "new, new pages": timed(
            lambda: grammar_token_mask(grammars, table, targets, mask, table.size), 5, lambda: forget_grammars(table)
        ),
    }
    print(json.dumps({"vocab": table.size, "teacher_forcing": out}))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocab", type=int, nargs="+", default=[32000, 152000])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--elements", type=int, default=150, help="elements per page (choices per grammar)")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--old-reps", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS / "grammar_decoding.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = []
    for size in args.vocab:
        tokenizer = synthetic_tokenizer(size)
        start, start_cpu = time.perf_counter(), time.thread_time()
        table = TokenTable(tokenizer)
        setup = {
            "table_wall_s": round(time.perf_counter() - start, 2),
            "table_cpu_s": round(time.thread_time() - start_cpu, 2),
        }
        setup["char_table"] = timed(table._printable_char_bits, 5)  # the part of the set-up done for the first pages
        head = HeadTable(table)
        printable = int(table.printable.sum())
        print(json.dumps({"vocab": table.size, "printable": printable, "setup": setup}))
        results.append(
            {
                "vocab": table.size,
                "printable_tokens": printable,
                "longest_token_chars": table.longest,
                "setup": setup,
                "step_batch8": step_benchmarks(table, head, args),
                "teacher_forcing_b32_t12": teacher_forcing(table, head, args),
                "space_steps_batch8": space_step_benchmarks(table, args),
                "space_teacher_forcing_b32": space_teacher_forcing(table, args),
            }
        )
    machine = {"cpu": platform.processor() or platform.machine(), "torch_threads": torch.get_num_threads()}
    setup = {"batch": args.batch, "elements": args.elements, "max_text": 32, "prompt_tokens": 16}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": machine, "setup": setup, "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
