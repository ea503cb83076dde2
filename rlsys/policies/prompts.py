"""Prompts shared by the policies that act in the same action format.

Templates are package data (`prompts/*.txt`) so a user can read and replace them; the code only
fills in the observation.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from rlsys.types import Observation


@cache
def template(name: str) -> str:
    return resources.files("rlsys.policies").joinpath("prompts", f"{name}.txt").read_text()


def pae_prompt(obs: Observation, template_text: str | None = None) -> str:
    """The PAE agent's turn: task, page, numbered elements, recent steps, and what went wrong last."""
    history = obs.extras.get("history") or []
    steps = "\n".join(f"{h.get('step', i + 1)}. {h.get('action', '')}" for i, h in enumerate(history)) or "none"
    feedback = obs.extras.get("feedback")
    return (template_text or template("pae_agent")).format(
        task=obs.task,
        location=obs.location or "unknown",
        elements=obs.ui_text or "none",
        history=steps,
        feedback=f"The last action did not work: {feedback}" if feedback else "",
    ).rstrip() + "\n"


def autoui_prompt(obs: Observation) -> str:
    """AutoUI's prompt: only the previous action and the goal (REFERENCE.md §2.1)."""
    previous = obs.extras.get("previous_actions") or []
    return f"Previous Actions: {previous[-1] if previous else ''} Goal: {obs.task}"
