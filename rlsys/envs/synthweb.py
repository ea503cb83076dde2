"""A synthetic web-like task suite for controlled learning experiments (`env.kind: synthweb`, `tasks.suite:
synthweb`): thousands of steps a second on one core, observations shaped exactly as the web envs' (numbered element
list, element dicts, grammar, a small set-of-marks screenshot), and each mechanism a key whose effect can be worked
out before any run (docs/synthweb.md).

A task is a site made from its seed alone: a path of `depth` pages, each listing the link that leads on (named in
the instruction, in order) among `distractors` others. The instruction names every link of the path in words the
element texts must be matched against; a confusable distractor shares a word with the right link. An impossible
task lacks its last link. A wrong link costs steps (`env.synthweb.wrong_link`: a detour page with a Back link, no
change, or the end), clicks slip to a random element with `slip_prob`, and the last reward carries Gaussian noise
of `reward_noise`. `solve_probability` gives the exact chance that the uniform random clicker (`policy.kind:
random`) or the optimal policy solves a task within `env.max_steps`, from the same rules the env plays by.
"""

from __future__ import annotations

import functools
import io
import random
from collections import deque
from dataclasses import dataclass

from rlsys.config import EnvConfig, SynthWebTasksConfig
from rlsys.core.env import EnvSetupError
from rlsys.core.types import Observation, StepResult, Task
from rlsys.envs.web import spaces
from rlsys.envs.web.element_list import render_pae, render_roles

SUITE = "synthweb"
SEEDS_PER_BASE = 10_000_000  # task i of tasks.synthweb.seed s has seed s * SEEDS_PER_BASE + i
HELDOUT_OFFSET = 1_000_000  # held-out evaluation task i: seed s * SEEDS_PER_BASE + HELDOUT_OFFSET + i
ADJECTIVES = (
    "red", "blue", "green", "black", "white", "small", "large", "old", "new", "quiet", "bright", "dark", "round",
    "square", "soft", "hard", "warm", "cold", "fast", "slow", "light", "heavy", "plain", "fancy", "cheap", "rare",
    "wooden", "silver", "golden", "paper",
)  # fmt: skip
NOUNS = (
    "kettle", "lamp", "chair", "table", "garden", "tools", "books", "music", "shoes", "coats", "maps", "games",
    "clocks", "cups", "plates", "boxes", "pens", "bags", "hats", "rugs", "tents", "bikes", "boats", "trains",
    "paints", "seeds", "plants", "fruit", "bread", "cheese", "tea", "coffee", "soap", "towels", "pillows", "mirrors",
    "candles", "radios", "cameras", "phones",
)  # fmt: skip
NAMES = tuple(f"{adjective} {noun}" for adjective in ADJECTIVES for noun in NOUNS)
BACK = "Back"
# what a click on each element does: lead on, go back a page, a wrong link (wrong_link decides), one detour deeper
FORWARD, GO_BACK, WRONG, DEEPER = "forward", "back", "wrong", "deeper"


# -- tasks ------------------------------------------------------------------------------------------------------


def make_task(seed: int, mix: SynthWebTasksConfig, split: str = "train") -> Task:
    """The task of this seed in this mix: its depth, distractor count and impossibility drawn from the seed."""
    rng = random.Random(f"synthweb-task/{seed}")
    depth = rng.randint(mix.min_depth, mix.max_depth)
    distractors = rng.randint(mix.min_distractors, mix.max_distractors)
    impossible = rng.random() < mix.impossible
    meta = {
        "seed": seed,
        "depth": depth,
        "distractors": distractors,
        "confusable": mix.confusable,
        "impossible": impossible,
        "group": "impossible" if impossible else f"depth-{depth}",
    }
    task_id = f"synthweb-{seed}"
    site = build_site(meta)
    return Task(task_id, site.instruction, SUITE, split, start=f"synthweb://{task_id}/", meta=meta)


def suite_tasks(mix: SynthWebTasksConfig, split: str) -> list[Task]:
    """The training tasks, or the evaluation ones: the same (`eval_tasks: train`) or as many never trained on."""
    first = mix.seed * SEEDS_PER_BASE + (HELDOUT_OFFSET if split == "eval" and mix.eval_tasks == "heldout" else 0)
    return [make_task(first + i, mix, split) for i in range(mix.num_tasks)]


@dataclass(frozen=True)
class Site:
    instruction: str
    path: tuple[str, ...]  # the link to click on each page, in order, as the instruction names them
    links: tuple[tuple[str, ...], ...]  # each path page's links in the order shown (Back not included)
    right: tuple[int | None, ...]  # which of a page's links leads on (None: the impossible task's last page)


@functools.lru_cache(maxsize=4096)
def _site(seed: int, depth: int, distractors: int, confusable: float, impossible: bool) -> Site:
    rng = random.Random(f"synthweb-site/{seed}")
    path = tuple(rng.sample(NAMES, depth))
    links, right = [], []
    for i, name in enumerate(path):
        missing = impossible and i == depth - 1  # its link is replaced by one more distractor
        shown = _distractors(rng, name, set(path), distractors + missing, confusable)
        if missing:
            right.append(None)
        else:
            shown.insert(rng.randrange(len(shown) + 1), name)
            right.append(shown.index(name))
        links.append(tuple(shown))
    return Site(_instruction(rng, path), path, tuple(links), tuple(right))


def build_site(meta: dict) -> Site:
    try:
        return _site(int(meta["seed"]), int(meta["depth"]), int(meta["distractors"]), float(meta["confusable"]),
                     bool(meta["impossible"]))  # fmt: skip
    except (KeyError, TypeError, ValueError) as e:
        raise EnvSetupError(
            f"a synthweb task's meta needs seed, depth, distractors, confusable, impossible: {e}"
        ) from e


_CONFUSABLE_TRIES = 500


def _distractors(rng: random.Random, right: str, path: set[str], count: int, confusable: float) -> list[str]:
    adjective, noun = right.split(" ")
    chosen: list[str] = []
    tries = 0
    while len(chosen) < count:
        tries += 1
        # one word the same as the right link's; past a few hundred tries (a long path has used up the ~70 names
        # that share a word with it) any name, so that no mix of settings leaves this looking for ever
        if rng.random() < confusable and tries <= _CONFUSABLE_TRIES:
            name = rng.choice((f"{adjective} {rng.choice(NOUNS)}", f"{rng.choice(ADJECTIVES)} {noun}"))
        else:
            name = rng.choice(NAMES)
        if name not in path and name not in chosen:
            chosen.append(name)
    return chosen


def _instruction(rng: random.Random, path: tuple[str, ...]) -> str:
    last = path[-1]
    if len(path) == 1:
        return rng.choice(("Open {last}.", "Click {last}.", "Find {last}.")).format(last=last)
    via = " > ".join(path[:-1])
    forms = ("Go to {via}, then open {last}.", "Open {last} under {via}.", "Follow {via} to {last}.")
    return rng.choice(forms).format(via=via, last=last)


# -- pages ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    title: str
    texts: tuple[str, ...]
    kinds: tuple[str, ...]  # what a click on each element does (never shown to the agent)


def path_page(site: Site, index: int, back_link: bool) -> Page:
    links, right = site.links[index], site.right[index]
    kinds = tuple(FORWARD if k == right else WRONG for k in range(len(links)))
    title = site.path[index - 1] if index else "Home"
    if back_link and index:
        return Page(title, (BACK, *links), (GO_BACK, *kinds))
    return Page(title, links, kinds)


@functools.lru_cache(maxsize=65536)
def detour_page(seed: int, index: int, detours: int, links: int) -> Page:
    """The page a wrong link leads to: Back, and `links` more links each one detour deeper. It depends on the task,
    the path's page and how deep the detour is, not on which links led there: a task has few of them, and each one's
    screenshot is drawn once."""
    names = random.Random(f"synthweb-detour/{seed}/{index}/{detours}").sample(NAMES, links)
    return Page("Not here", (BACK, *names), (GO_BACK, *[DEEPER] * links))


@dataclass(frozen=True)
class View:
    """What every observation of one page shares, made once per page layout and kept."""

    elements: list
    ui_text: str
    png: bytes
    grammar: dict | None


def _slug(text: str) -> str:
    return text.replace(" ", "-")


@functools.lru_cache(maxsize=8192)
def page_view(title: str, texts: tuple[str, ...], size: tuple[int, int], marks: bool, listing: str, space: str) -> View:
    width, height = size
    header = min(16, height // 8)
    row = max(1, min(20, (height - header - 2) // max(len(texts), 1)))
    elements = []
    for k, text in enumerate(texts):
        box = [4, header + k * row + 1, width - 8, max(1, row - 2)]
        elements.append({
            "tag": "a", "type": "", "role": "link", "name": text, "value": "", "text": text, "editable": False,
            "checked": None, "disabled": False, "href": f"synthweb:{_slug(text)}", "box": box,
            "point": [box[0] + box[2] / 2, box[1] + box[3] / 2],
        })  # fmt: skip
    render = render_roles if listing == "roles" else render_pae
    build = getattr(spaces.get(space), "grammar", None)
    grammar = build(elements) if build is not None else None
    return View(
        elements,
        "\n".join(render(k, e) for k, e in enumerate(elements)),
        _draw(title, elements, size, marks),
        grammar.to_dict() if grammar is not None else None,
    )


def _draw(title: str, elements: list[dict], size: tuple[int, int], marks: bool) -> bytes:
    from PIL import Image, ImageDraw

    image = Image.new("RGB", size, (255, 255, 255))
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 0, size[0] - 1, min(15, size[1] // 8)), fill=(40, 60, 110))
    draw.text((4, 2), title[:40], fill=(255, 255, 255))
    for element in elements:
        left, top, _, height = element["box"]
        colour = (20, 20, 20) if element["text"] == BACK else (0, 60, 200)
        draw.text((left + 4, top + max(0, (height - 11) // 2)), element["text"], fill=colour)
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    png = buf.getvalue()
    if marks:
        from rlsys.envs.web.marks import draw_marks

        png = draw_marks(png, elements)
    return png


# -- the env ----------------------------------------------------------------------------------------------------


class SynthWebEnv:
    def __init__(self, cfg: EnvConfig, env_id: str = "synthweb"):
        self.cfg = cfg
        self.syn = cfg.synthweb
        self.env_id = env_id
        self.space = spaces.get(cfg.action_space)
        self.image_size = (int(self.syn.image_size[0]), int(self.syn.image_size[1]))
        self.rng = random.Random(f"synthweb-env/{self.syn.seed}/{env_id}")  # training episodes' slips and noise
        self.draws = self.rng
        self.task: Task | None = None
        self.site: Site | None = None
        self.position = 0  # which page of the path
        self.trail: tuple[str, ...] = ()  # the links followed into detours, deepest last
        self.steps = 0
        self._history: deque[dict] = deque(maxlen=max(cfg.history, 0))
        self._page: Page | None = None
        self._view: View | None = None

    def reset(self, task: Task) -> Observation:
        if task.suite != SUITE:
            raise EnvSetupError(f"env.kind 'synthweb' plays tasks of tasks.suite 'synthweb', not {task.suite!r}")
        self.task, self.site = task, build_site(task.meta)
        self.draws = self._evaluation_draws(task) if task.split == "eval" else self.rng
        self.position, self.trail, self.steps = 0, (), 0
        self._history.clear()
        self._enter()
        return self._observe(None)

    def step(self, action_text: str) -> StepResult:
        if self.task is None:
            raise RuntimeError("step() before reset()")
        self.steps += 1
        # drawn every step in this order, whatever happens, so that the stream stays aligned
        slip, slip_to, noise = self.draws.random(), self.draws.random(), self.draws.gauss(0.0, 1.0)
        page = self._page
        action, parse_error = spaces.try_parse(self.space, action_text, len(page.texts))
        info: dict = {"parse_error": parse_error, "action": action.to_dict() if action else None}
        outcome, error = None, None
        if action is not None:
            target = self._target(action)
            if target is not None and slip < self.syn.slip_prob:
                target = int(slip_to * len(page.texts))
                info["slipped"] = True
            outcome, error = self._act(action, target)
            if error:
                info["action_error"] = error
        if outcome is None and self.steps >= self.cfg.max_steps:
            outcome = "timeout"
        obs = self._observe(parse_error or error)
        info["synthweb"] = {"page": self.position, "detours": len(self.trail)}
        self._history.append(
            {"step": self.steps, "action": action_text[:200], "url": obs.location, "error": obs.extras["feedback"]}
        )
        if outcome is None:
            return StepResult(obs, 0.0, False, info)
        info["outcome"] = outcome
        reward = 1.0 if outcome == "success" else 0.0
        info["clean_reward"] = reward
        return StepResult(obs, reward + self.syn.reward_noise * noise, True, info)

    def _evaluation_draws(self, task: Task) -> random.Random:
        """An evaluation episode's own stream, seeded by its task and its pass over the evaluation tasks: the same
        weights then evaluate the same whichever runner plays which episode, and evaluations leave the training
        stream alone."""
        return random.Random(f"synthweb-eval/{self.syn.seed}/{task.id}/{task.meta.get('eval_pass', 0)}")

    def _target(self, action: spaces.WebAction) -> int | None:
        """The element a click or tap hits (a tap on no element hits none)."""
        if action.kind == "click":
            return action.element
        if action.kind == "tap":
            x, y = action.point[0] * self.image_size[0], action.point[1] * self.image_size[1]
            for k, element in enumerate(self._view.elements):
                left, top, width, height = element["box"]
                if left <= x < left + width and top <= y < top + height:
                    return k
        return None

    def _act(self, action: spaces.WebAction, target: int | None) -> tuple[str | None, str | None]:
        """Carry out an action: (the outcome if it ends the episode, the error shown to the agent if any)."""
        kind = action.kind
        if kind in spaces.TERMINAL:
            return "failure", None  # the site has nothing to answer: only reaching the last link solves a task
        if kind == "type":
            if action.element is None:
                return None, "no element has focus: nothing was typed"
            return None, f"element [{action.element}] does not take text"
        if kind in ("goto", "google"):
            return None, f"navigation to {action.url or 'the search engine'} is not allowed"
        if kind == "home":
            self.position, self.trail = 0, ()
        elif kind == "back":
            self._go_back()
        elif target is not None:
            return self._follow(target), None
        self._enter()
        return None, None

    def _follow(self, target: int) -> str | None:
        what = self._page.kinds[target]
        if what == FORWARD:
            self.position += 1
            if self.position == len(self.site.path):
                self.position -= 1  # the last link: the task is done where it was clicked
                return "success"
        elif what == GO_BACK:
            self._go_back()
        elif what == WRONG:
            mode = self.syn.wrong_link
            if mode == "end":
                return "failure"
            if mode == "detour":
                self.trail = (self._page.texts[target],)
        elif what == DEEPER:
            self.trail = (*self.trail, self._page.texts[target])
        self._enter()
        return None

    def _go_back(self) -> None:
        if self.trail:
            self.trail = self.trail[:-1]
        elif self.position:
            self.position -= 1

    def _enter(self) -> None:
        if self.trail:
            seed = int(self.task.meta["seed"])
            self._page = detour_page(seed, self.position, len(self.trail), self.syn.detour_links)
        else:
            self._page = path_page(self.site, self.position, self.syn.back_link)
        page, cfg = self._page, self.cfg
        self._view = page_view(
            page.title, page.texts, self.image_size, cfg.set_of_marks, cfg.element_list, cfg.action_space
        )

    def _location(self) -> str:
        parts = [_slug(name) for name in self.site.path[: self.position]]
        parts += [f"~{_slug(name)}" for name in self.trail]
        return self.task.start + "/".join(parts)

    def _observe(self, feedback: str | None) -> Observation:
        view = self._view
        extras = {
            "elements": [dict(element) for element in view.elements],  # the view is shared: a copy to change
            "history": list(self._history),
            "feedback": feedback,
            "settled": True,
            "settle_ms": 0.0,
            "early_scan": False,
            "early_screenshot": False,
        }
        if view.grammar is not None:
            extras["grammar"] = view.grammar
        return Observation(view.png, view.ui_text, self._location(), self.task.instruction, extras)

    def pids(self) -> dict:
        return {}  # nothing runs besides this process

    def close(self) -> None:
        self.task = None


# -- what a policy can expect ----------------------------------------------------------------------------------


def solve_probability(task: Task, cfg: EnvConfig, policy: str = "random") -> float:
    """The exact chance that `policy` solves `task` within env.max_steps under `cfg`'s rules: "random" clicks an
    element of the page uniformly (policy.kind random), "optimal" clicks the named link, and Back on a detour page.
    A slip (env.synthweb.slip_prob) sends either one's click to a uniformly drawn element."""
    if policy not in ("random", "optimal"):
        raise ValueError(f"policy is 'random' or 'optimal', got {policy!r}")
    site, syn = build_site(task.meta), cfg.synthweb
    depth = len(site.path)
    states = {(0, 0): 1.0}  # (page of the path, detour depth) -> probability, among episodes still going
    solved = 0.0
    for _ in range(cfg.max_steps):
        following: dict[tuple[int, int], float] = {}
        for (index, detours), p in states.items():
            kinds = _kinds(site, index, detours, syn)
            for what, q in _click_distribution(kinds, bool(detours), policy, syn.slip_prob).items():
                moved = _move(index, detours, what, syn.wrong_link)
                if moved == "success" and index == depth - 1:
                    solved += p * q
                elif moved == "success":
                    following[(index + 1, 0)] = following.get((index + 1, 0), 0.0) + p * q
                elif moved is not None:
                    following[moved] = following.get(moved, 0.0) + p * q
        states = following
    return solved


def _kinds(site: Site, index: int, detours: int, syn) -> tuple[str, ...]:
    if detours:
        return (GO_BACK, *[DEEPER] * syn.detour_links)
    return path_page(site, index, syn.back_link).kinds


def _click_distribution(kinds: tuple[str, ...], detour: bool, policy: str, slip: float) -> dict[str, float]:
    uniform = {what: kinds.count(what) / len(kinds) for what in set(kinds)}
    chosen = GO_BACK if detour else FORWARD
    if policy == "random" or chosen not in kinds:  # the impossible task's last page: no click is better
        return uniform
    mixed = {what: slip * q for what, q in uniform.items()}
    mixed[chosen] = mixed.get(chosen, 0.0) + 1 - slip
    return mixed


def _move(index: int, detours: int, what: str, wrong_link: str):
    """Where a click of this kind goes from (index, detours): a state, "success" for the path's next link, or None
    for an episode that ended without success."""
    if what == FORWARD:
        return "success"
    if what == GO_BACK:
        return (index, detours - 1) if detours else (max(index - 1, 0), 0)
    if what == DEEPER:
        return (index, detours + 1)
    return {"detour": (index, 1), "stay": (index, 0), "end": None}[wrong_link]
