"""VLM judges (docs/evaluators.md#judges): what a judge is shown, and how its reply becomes a verdict.

Two styles:
- `digirl`: few-shot exemplars (screenshot, task, written judgement), then the current screen,
  downscaled; the reply ends with `Status: success|failure`.
- `pae`: the task, the agent's final answer and the last k screenshots; the reply ends with
  `Verdict: SUCCESS|NOT SUCCESS`.

A judgement is split in two so that screenshots cross the network once: `episode_query` runs where
the episode was played and keeps only what this episode contributes (downscaled screens, task,
answer); `VLMJudge` runs in the evaluator pool, which holds the prompt and the exemplars and parses
replies. A reply without a verdict is no verdict (`None`), never a failure.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from rlsys.config import JudgeConfig
from rlsys.core.evaluator import judge_inputs
from rlsys.core.templates import packaged, read_template
from rlsys.core.types import Task, Trajectory
from rlsys.llm import BedrockClaudeClient, ChatClient, GeminiClient, OpenAIChatClient

STYLE_TEMPLATES = {"digirl": "digirl_judge", "pae": "pae_judge"}
TEMPLATES = (*STYLE_TEMPLATES.values(), "fuzzy_match")
DEFAULT_KEY_ENV = {"gemini": "GEMINI_API_KEY", "openai": "OPENAI_API_KEY"}
EXEMPLARS_FILE = "exemplars.jsonl"

_STATUS = re.compile(r"Status:\s*\**\s*([A-Za-z]+)", re.IGNORECASE)
_VERDICT = re.compile(r"Verdict:\s*\**\s*(NOT\s+SUCCESS|SUCCESS)", re.IGNORECASE)
_BARE = re.compile(r"\b(NOT\s+SUCCESS|SUCCESS)\b")
_SUCCESS_WORDS = {"success", "successful", "succeeded", "completed", "complete"}
_FAILURE_WORDS = {"failure", "fail", "failed", "incomplete"}


@dataclass
class JudgeQuery:
    """What one episode contributes to a judgement; `key` identifies it for the cache."""

    task: str
    answer: str
    screens: list[bytes]  # PNG, already downscaled where the style asks for it
    key: str


@dataclass
class Exemplar:
    screenshot_png: bytes
    task: str
    response: str


# ---------------------------------------------------------------------------------- the episode side


def episode_query(cfg: JudgeConfig, task: Task, trajectory: Trajectory) -> JudgeQuery:
    """The episode's part of the prompt. `digirl` judges the screen the last action led to; `pae` the
    answer and the screens the agent answered on."""
    if cfg.style == "digirl":
        screen = _current_screen(trajectory)
        screens = [screen] if screen else []
        return JudgeQuery(task.instruction, "", [downscale(s, cfg.downscale) for s in screens], _key(task, "", screens))
    answer, screens = judge_inputs(trajectory, cfg.screenshots)
    return JudgeQuery(task.instruction, answer or "", screens, _key(task, answer or "", screens))


def _current_screen(trajectory: Trajectory) -> bytes | None:
    if trajectory.final_observation is not None:
        return trajectory.final_observation.screenshot_png
    return trajectory.steps[-1].observation.screenshot_png if trajectory.steps else None


def _key(task: Task, answer: str, screens: list[bytes]) -> str:
    h = hashlib.sha256()
    for field in (task.instruction, answer, *(screen_hash(s) for s in screens)):
        h.update(field.encode() + b"\0")
    return h.hexdigest()


def fuzzy_match_query(answer: str, references: list[str]) -> tuple[str, list[str | bytes], str]:
    """WebArena's fuzzy_match as a text-only judgement: (system, parts, cache key); the reply is read
    with `parse_pae_verdict`."""
    listed = "\n".join(f"- {r}" for r in references)
    parts: list[str | bytes] = [f"Reference answers:\n{listed}\n\nAgent's answer: {answer}"]
    key = hashlib.sha256(json.dumps(["fuzzy_match", answer, references]).encode()).hexdigest()
    return template("fuzzy_match"), parts, key


def screen_hash(png: bytes) -> str:
    return hashlib.sha256(png).hexdigest()


def downscale(png: bytes, factor: int) -> bytes:
    """The screenshot shrunk `factor` times per side (DigiRL sends a quarter of each side), as PNG."""
    if factor <= 1:
        return png
    from PIL import Image

    with Image.open(io.BytesIO(png)) as im:
        small = im.convert("RGB").resize((max(1, im.width // factor), max(1, im.height // factor)), Image.BILINEAR)
    out = io.BytesIO()
    small.save(out, format="PNG")
    return out.getvalue()


# ---------------------------------------------------------------------------------- the pool side


class VLMJudge:
    """Holds the prompt (and the DigiRL exemplars) and reads verdicts out of replies."""

    def __init__(self, cfg: JudgeConfig):
        self.cfg = cfg
        self.style = cfg.style
        self.instructions = template(STYLE_TEMPLATES[cfg.style] if cfg.prompt == "auto" else cfg.prompt)
        self.exemplars = load_exemplars(cfg.exemplars, cfg.downscale) if cfg.exemplars else []
        self.source = f"{cfg.provider}:{cfg.model_id}"

    def messages(self, query: JudgeQuery) -> tuple[str | None, list[str | bytes]]:
        """The system text and the user turn for one query."""
        if self.style == "pae":
            prompt = self.instructions.replace("{task}", query.task).replace("{answer}", query.answer or "(none)")
            parts: list[str | bytes] = [prompt]
            for i, png in enumerate(query.screens, start=1):
                parts += [f"Screenshot {i} of {len(query.screens)}:", png]
            return None, parts
        parts = []
        for i, ex in enumerate(self.exemplars, start=1):
            parts += [f"Example {i}:", ex.screenshot_png, f"Task: {ex.task}\nJudgement: {ex.response}"]
        parts += ["Now the screen to judge:", *query.screens, f"Task: {query.task}\nJudgement:"]
        return self.instructions, parts

    def parse(self, reply: str) -> tuple[bool | None, str]:
        return parse_status(reply) if self.style == "digirl" else parse_pae_verdict(reply)


def parse_status(reply: str) -> tuple[bool | None, str]:
    """DigiRL's `Status: success|failure`; the last Status line counts."""
    found = _STATUS.findall(reply)
    if not found:
        return None, "the reply has no `Status:` line"
    word = found[-1].lower()
    if word in _SUCCESS_WORDS:
        return True, "Status: success"
    if word in _FAILURE_WORDS:
        return False, "Status: failure"
    return None, f"the reply's status {found[-1]!r} is neither success nor failure"


def parse_pae_verdict(reply: str) -> tuple[bool | None, str]:
    """`Verdict: SUCCESS|NOT SUCCESS` (the last one counts); without that line, a reply that says only
    SUCCESS or only NOT SUCCESS (PAE's rule); a reply that says both is no verdict."""
    found = _VERDICT.findall(reply)
    if found:
        success = not found[-1].upper().startswith("NOT")
        return success, f"Verdict: {'SUCCESS' if success else 'NOT SUCCESS'}"
    bare = {" ".join(m.split()) for m in _BARE.findall(reply)}
    if bare == {"SUCCESS"}:
        return True, "the reply says SUCCESS"
    if bare == {"NOT SUCCESS"}:
        return False, "the reply says NOT SUCCESS"
    if bare:
        return None, "the reply says both SUCCESS and NOT SUCCESS without a `Verdict:` line"
    return None, "the reply has no verdict (`Verdict: SUCCESS` or `Verdict: NOT SUCCESS`)"


@cache
def template(name: str) -> str:
    """A packaged judge prompt by name, or a user's `.txt` file."""
    return read_template(name, packaged("rlsys.envs.evaluators", "templates"), TEMPLATES, "evaluator.judge.prompt")


def load_exemplars(folder: str | os.PathLike, factor: int) -> list[Exemplar]:
    """`folder/exemplars.jsonl`: one `{"image": file, "task": text, "response": judgement}` per line, the
    image relative to the folder; every response must end in the `Status:` format it teaches."""
    path = Path(folder) / EXEMPLARS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"evaluator.judge.exemplars: {path} not found")
    exemplars = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}: invalid JSON: {e}") from None
        missing = [k for k in ("image", "task", "response") if not isinstance(row.get(k), str) or not row[k]]
        if missing:
            raise ValueError(f"{where}: missing or empty {missing}")
        if parse_status(row["response"])[0] is None:
            raise ValueError(f"{where}: the response must end with `Status: success` or `Status: failure`")
        image = Path(folder) / row["image"]
        if not image.is_file():
            raise FileNotFoundError(f"{where}: image {image} not found")
        exemplars.append(Exemplar(downscale(image.read_bytes(), factor), row["task"], row["response"]))
    if not exemplars:
        raise ValueError(f"{path}: no exemplars")
    return exemplars


def make_judge_clients(cfg: JudgeConfig, max_pool_connections: int = 16) -> list[ChatClient]:
    """One client per credential: each API key named in `auth_env` (Gemini, OpenAI-compatible), or the
    AWS credential chain (Bedrock)."""
    where = "evaluator.judge"
    if cfg.provider is None:
        raise ValueError(f"{where}.provider is not set: no judge is configured")
    if not cfg.model_id:
        raise ValueError(f"{where}.model_id must name the judge model (provider {cfg.provider!r})")
    if cfg.provider == "bedrock":
        return [BedrockClaudeClient(cfg.model_id, cfg.region, cfg.endpoint_url, cfg.timeout_s, max_pool_connections)]
    names = cfg.auth_env or [DEFAULT_KEY_ENV[cfg.provider]]
    keys = [os.environ.get(name) for name in names]
    if cfg.provider == "gemini":
        missing = [n for n, k in zip(names, keys) if not k]
        if missing:
            raise ValueError(f"{where}.auth_env: environment variable(s) {missing} hold no Gemini API key")
        return [GeminiClient(cfg.model_id, k, cfg.endpoint_url, cfg.timeout_s) for k in keys]
    if not cfg.endpoint_url:
        raise ValueError(f"{where}.endpoint_url is required for provider 'openai' (e.g. http://127.0.0.1:8000/v1)")
    if cfg.auth_env and not all(keys):  # keys named explicitly must exist; the default one is optional
        raise ValueError(f"{where}.auth_env: environment variable(s) {cfg.auth_env} are not all set")
    return [OpenAIChatClient(cfg.endpoint_url, cfg.model_id, k, cfg.timeout_s) for k in keys]
