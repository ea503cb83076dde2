"""Scripted demonstrations for a suite of multi-step MiniWoB++ tasks, in the `element` action space.

A demonstrator reads what a policy reads at one step, the instruction (`obs.task`) and the element list
(`obs.extras["elements"]`: tag, type, text, value, checked of each listed element), plus the actions taken
so far (`obs.extras["previous_actions"]`, which the env runner puts into every observation it shows a
policy), and returns the next action's text: `click [k]` or `type [k] text`. It is a function of the
observation, so it is played step by step in the env loop like a policy; it never reads the page's
answer from the page's script.

Each task's page was read to write its demonstrator; what each needs from the observation:
- click-button-sequence: ONE, then TWO (the page shows nothing of the first click: previous actions say it). In
  about 3 problems of 100 TWO lies over ONE so that none of the points the element finder tries reaches ONE, which
  is then not listed: the problem cannot be solved in the element space.
- click-checkboxes: every named checkbox that is not checked yet, then Submit (2-6 boxes, 0-6 named).
- click-collapsible-2: open the sections in turn (the open one is the header its links follow in the list; one
  without links by the steps so far) until the link is listed, then click it.
- click-tab-2: the other tabs in turn (the tabs come first in the list, so a previous click's index still
  names its tab) until the link is listed, then click it.
- enter-password: the password into each field that does not hold it yet, then Submit.
- enter-text-2: the word in the case the instruction asks for, then Submit.
- form-sequence-2: the named radio button, the number into the named textbox, then Submit.
- login-user: the username into the text field and the password into the password field (their
  labels are not tied to them, so the list names neither; their input types tell them apart), then Login.

An observation that does not show what the demonstrator needs (a link never listed) raises
NoDemonstration rather than guessing. `play` runs a demonstrator for a whole episode and returns the trajectory
as a runner records one (benchmarks/miniwob_demos.py writes them as shards for `offline.data`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from rlsys.core.types import Observation, Step, Task, Trajectory
from rlsys.envs.web.spaces import WebAction, element

Demonstrator = Callable[[str, list[dict], list[str]], str]


class NoDemonstration(ValueError):
    """The observation does not show what the task's demonstrator needs to act."""


_QUOTED = re.compile(r'"([^"]*)"')
_CLICK = re.compile(r"^\s*click\s*\[\s*(\d+)\s*\]\s*$", re.IGNORECASE)
_ORDINAL = re.compile(r"\b(\d+)(?:st|nd|rd|th)\b")


def _click(index: int) -> str:
    return element.render(WebAction("click", index))


def _type(index: int, text: str) -> str:
    return element.render(WebAction("type", index, text))


def _quoted(instruction: str, count: int = 1) -> list[str]:
    spans = _QUOTED.findall(instruction)
    if len(spans) < count:
        raise NoDemonstration(f"expected {count} quoted text(s) in the instruction {instruction!r}")
    return spans


def _find(elements: list[dict], what: str, test: Callable[[dict], bool]) -> int:
    for index, found in enumerate(elements):
        if test(found):
            return index
    raise NoDemonstration(f"no {what} among the {len(elements)} listed elements")


def _button(elements: list[dict], label: str) -> int:
    return _find(elements, f"button {label!r}", lambda e: e["tag"] == "button" and e["text"] == label)


def _clicked(elements: list[dict], previous: list[str]) -> list[dict]:
    """The elements the previous clicks named, read by index in this list: only for elements that precede
    everything a click can add to the page, so that their indices do not move."""
    out = []
    for action in previous:
        m = _CLICK.match(action)
        if m and int(m.group(1)) < len(elements):
            out.append(elements[int(m.group(1))])
    return out


def _link(elements: list[dict], text: str) -> int | None:
    """A listed link (a `span` of the page) whose text is `text`, if one is listed."""
    for index, found in enumerate(elements):
        if found["tag"] == "span" and found["text"] == text:
            return index
    return None


def click_button_sequence(instruction: str, elements: list[dict], previous: list[str]) -> str:
    one, two = _button(elements, "ONE"), _button(elements, "TWO")
    pressed_one = any(e is elements[one] for e in _clicked(elements, previous))
    return _click(two if pressed_one else one)


def click_checkboxes(instruction: str, elements: list[dict], previous: list[str]) -> str:
    m = re.fullmatch(r"Select (.*) and click Submit\.", instruction.strip())
    if not m:
        raise NoDemonstration(f"not a click-checkboxes instruction: {instruction!r}")
    wanted = set() if m.group(1) == "nothing" else set(m.group(1).split(", "))
    for index, box in enumerate(elements):
        if box.get("type") == "checkbox" and bool(box["checked"]) != (box["text"] in wanted):
            return _click(index)
    return _click(_button(elements, "Submit"))


def click_collapsible_2(instruction: str, elements: list[dict], previous: list[str]) -> str:
    target = _quoted(instruction)[-1]
    if (link := _link(elements, target)) is not None:
        return _click(link)
    headers = [i for i, e in enumerate(elements) if e["tag"] == "h3" and e["text"].startswith("Section #")]
    if not headers:
        raise NoDemonstration("no section header is listed")
    # The open section is the header its links follow. A section may hold no link (one in a hundred does), and
    # then looks closed: the demonstrator opens one section a step, so the steps so far say which opens next.
    opened = [n for n, i in enumerate(headers) if i + 1 < len(elements) and elements[i + 1]["tag"] == "span"]
    following = opened[0] + 1 if opened else len(previous)
    if following >= len(headers):
        raise NoDemonstration(f"the link {target!r} was in no section")
    return _click(headers[following])


def click_tab_2(instruction: str, elements: list[dict], previous: list[str]) -> str:
    target = _quoted(instruction)[-1]
    if (link := _link(elements, target)) is not None:
        return _click(link)
    tabs = [i for i, e in enumerate(elements) if e["tag"] == "a" and e["text"].startswith("Tab #")]
    seen = {tabs[0]} if tabs else set()  # the first tab is shown at the start
    seen |= {i for i in tabs if any(e is elements[i] for e in _clicked(elements, previous))}
    unseen = [i for i in tabs if i not in seen]
    if not unseen:
        raise NoDemonstration(f"the link {target!r} was in no tab")
    return _click(unseen[0])


def enter_password(instruction: str, elements: list[dict], previous: list[str]) -> str:
    password = _quoted(instruction)[0]
    fields = [i for i, e in enumerate(elements) if e.get("type") == "password"]
    if len(fields) != 2:
        raise NoDemonstration(f"expected two password fields, found {len(fields)}")
    for index in fields:
        if elements[index]["value"] != password:
            return _type(index, password)
    return _click(_button(elements, "Submit"))


def enter_text_2(instruction: str, elements: list[dict], previous: list[str]) -> str:
    word = _quoted(instruction)[0]
    if "upper case" in instruction:
        word = word.upper()
    elif "lower case" in instruction:
        word = word.lower()
    else:
        raise NoDemonstration(f"the instruction names no case: {instruction!r}")
    field = _find(elements, "text input", lambda e: e.get("type") == "text")
    if elements[field]["value"] != word:
        return _type(field, word)
    return _click(_button(elements, "Submit"))


def form_sequence_2(instruction: str, elements: list[dict], previous: list[str]) -> str:
    ordinals = [int(n) for n in _ORDINAL.findall(instruction)]
    if len(ordinals) != 2:
        raise NoDemonstration(f"expected two ordinals (radio button, textbox) in {instruction!r}")
    number = _quoted(instruction)[0]
    radios = [i for i, e in enumerate(elements) if e.get("type") == "radio"]
    boxes = [i for i, e in enumerate(elements) if e.get("type") == "text"]
    if max(ordinals[0], ordinals[1]) > min(len(radios), len(boxes)):
        raise NoDemonstration(f"{len(radios)} radio buttons and {len(boxes)} textboxes listed for {instruction!r}")
    radio, box = radios[ordinals[0] - 1], boxes[ordinals[1] - 1]
    if not elements[radio]["checked"]:
        return _click(radio)
    if elements[box]["value"] != number:
        return _type(box, number)
    return _click(_button(elements, "Submit"))


def login_user(instruction: str, elements: list[dict], previous: list[str]) -> str:
    username, password = _quoted(instruction, 2)[:2]
    user_field = _find(elements, "text field", lambda e: e.get("type") == "text")
    password_field = _find(elements, "password field", lambda e: e.get("type") == "password")
    if elements[user_field]["value"] != username:
        return _type(user_field, username)
    if elements[password_field]["value"] != password:
        return _type(password_field, password)
    return _click(_button(elements, "Login"))


DEMONSTRATORS: dict[str, Demonstrator] = {
    "click-button-sequence": click_button_sequence,
    "click-checkboxes": click_checkboxes,
    "click-collapsible-2": click_collapsible_2,
    "click-tab-2": click_tab_2,
    "enter-password": enter_password,
    "enter-text-2": enter_text_2,
    "form-sequence-2": form_sequence_2,
    "login-user": login_user,
}
SUITE = tuple(DEMONSTRATORS)
# the most steps a demonstration takes: click-checkboxes may name all of its six boxes
MAX_DEMO_STEPS = 7


def next_action(task_name: str, obs: Observation) -> str:
    """The demonstrator of `task_name` (a MiniWoB++ task of SUITE) at `obs`: the next action's text."""
    try:
        demonstrate = DEMONSTRATORS[task_name]
    except KeyError:
        raise ValueError(f"no demonstrator for {task_name!r}; the suite is {', '.join(SUITE)}") from None
    extras = obs.extras
    return demonstrate(obs.task or "", extras.get("elements") or [], extras.get("previous_actions") or [])


# what the runner keeps out of a step's info, as the step holds it in fields of its own
_STEP_FIELDS = ("action", "parse_error", "action_error")


def play(env, task: Task, max_steps: int) -> Trajectory:
    """One episode of `task` (a MiniWoB++ task of SUITE, `task.start` its name) played by its demonstrator in
    `env` (a MiniWoBEnv), recorded as the env runner records a policy's: each step's observation holds the
    previous actions, the behaviour log-prob is None (no policy sampled the action) and the policy version -1.
    An observation the demonstrator cannot act on ends the episode as `unknown`, which nothing trains on; the
    trajectory's `error` says why. EnvBrokenError is the caller's to handle, as in the runner."""
    obs = env.reset(task)
    task.instruction = task.instruction or obs.task
    steps: list[Step] = []
    for _ in range(max_steps):
        obs.extras["previous_actions"] = [s.action_text for s in steps]
        try:
            text = next_action(task.start, obs)
        except NoDemonstration as e:
            return Trajectory(task, steps, "unknown", env.env_id, final_observation=obs, error=f"no demonstration: {e}")
        result = env.step(text)
        info = result.info
        steps.append(
            Step(
                observation=obs,
                action_text=text,
                action=info.get("action"),
                reward=result.reward,
                done=result.done,
                policy_version=-1,
                logprob=None,
                error=info.get("parse_error") or info.get("action_error"),
                info={k: v for k, v in info.items() if k not in _STEP_FIELDS and v is not None},
            )
        )
        obs = result.observation
        if result.done:
            return Trajectory(task, steps, info.get("outcome", "failure"), env.env_id, final_observation=obs)
    return Trajectory(task, steps, "timeout", env.env_id, final_observation=obs)
