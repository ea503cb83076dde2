"""Action grammars for constrained decoding.

An env describes the actions valid in the current observation as a set of complete strings
(`click [3]`) and of prefixes followed by free text (`type [2] `). A policy that decodes under
the grammar can only emit parseable actions, so RL can start from an untrained model.
"""

from __future__ import annotations

from dataclasses import dataclass

PRINTABLE = frozenset(chr(c) for c in range(32, 127))


@dataclass(frozen=True)
class Grammar:
    choices: tuple[str, ...] = ()
    text_prefixes: tuple[str, ...] = ()
    max_text: int = 32

    def allowed_next(self, prefix: str) -> tuple[frozenset[str], bool]:
        """Characters that may follow `prefix`, and whether the action may end here."""
        chars: set[str] = set()
        can_end = False
        for choice in self.choices:
            if choice == prefix:
                can_end = True
            elif choice.startswith(prefix):
                chars.add(choice[len(prefix)])
        for head in self.text_prefixes:
            if prefix.startswith(head):
                text = prefix[len(head) :]
                if len(text) < self.max_text:
                    chars |= PRINTABLE
                if text.strip():
                    can_end = True
            elif head.startswith(prefix):
                chars.add(head[len(prefix)])
        return frozenset(chars), can_end

    def accepts(self, text: str) -> bool:
        return text in self.choices or any(
            text.startswith(h)
            and 0 < len(text[len(h) :].strip())
            and len(text) - len(h) <= self.max_text
            and set(text[len(h) :]) <= PRINTABLE
            for h in self.text_prefixes
        )

    def to_dict(self) -> dict:
        return {"choices": list(self.choices), "text_prefixes": list(self.text_prefixes), "max_text": self.max_text}

    @classmethod
    def from_dict(cls, d: dict) -> Grammar:
        return cls(tuple(d["choices"]), tuple(d["text_prefixes"]), d.get("max_text", 32))
