"""Prompts shared by the policies that act in the same action format.

Templates are package data (`prompts/*.txt`) so a user can read and replace them; the code only
fills in the observation.
"""

from __future__ import annotations

from functools import cache

from rlsys.core.templates import packaged, read_template
from rlsys.core.types import Observation

TEMPLATES = ("pae_agent", "element_agent", "android_autoui", "android_cogagent", "digiq_change")


@cache
def template(name: str) -> str:
    """A packaged template by name, or a user's template file (`.txt`)."""
    return read_template(name, packaged("rlsys.policies", "templates"), TEMPLATES, "policy.prompt")


def agent_prompt(obs: Observation, name: str = "pae_agent") -> str:
    """The agent's turn: task, page, numbered elements, recent steps, and what went wrong last (and, for
    templates that judge one action, such as `digiq_change`, the candidate action in `extras`)."""
    history = obs.extras.get("history") or []
    steps = "\n".join(f"{h.get('step', i + 1)}. {h.get('action', '')}" for i, h in enumerate(history)) or "none"
    feedback = obs.extras.get("feedback")
    return (
        template("pae_agent" if name == "auto" else name)
        .format(
            task=obs.task,
            location=obs.location or "unknown",
            elements=obs.ui_text or "none",
            history=steps,
            feedback=f"The last action did not work: {feedback}" if feedback else "",
            action=obs.extras.get("candidate_action", ""),
        )
        .rstrip()
        + "\n"
    )


def autoui_prompt(obs: Observation) -> str:
    """AutoUI's prompt: only the previous action and the goal (docs/algorithms/digirl.md#networks)."""
    previous = obs.extras.get("previous_actions") or []
    return f"Previous Actions: {previous[-1] if previous else ''} Goal: {obs.task}"
