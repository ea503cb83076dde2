"""PAE's task proposer: an LLM writes new tasks for each website from one example task (`rlsys-propose-tasks`,
and the trainer's proposer hook).

For every site (`web_name`) in `proposer.examples`, one call asks `proposer.llm` for
`proposer.tasks_per_site` tasks as JSON Lines. Every line of the reply is checked with the task file
rules (`rlsys.envs.web.task_files`), must name the site asked for and start on the example's host, and must
not repeat a known task (the example, a task already in the output file, an earlier line of the
reply); questions are compared casefolded, with whitespace collapsed and trailing punctuation
stripped. Kept tasks get our own ids, `<web_name>--p<n>` (the model's ids are ignored), and are
appended to `proposer.output`, a task file usable as `tasks.file` in a train config. Running it again
adds to that file without repeating its tasks.
"""

from __future__ import annotations

import json
import logging
import os
import string
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
from urllib.parse import urlparse

from rlsys.config import ConfigError, ProposerConfig
from rlsys.core.templates import packaged, read_template
from rlsys.core.types import Task
from rlsys.envs.web.task_files import TaskFileError, load_task_file, parse_task_line
from rlsys.llm import ChatClient, LLMError, with_retries

log = logging.getLogger(__name__)

TEMPLATES = ("propose_tasks",)
TEMPLATE_FIELDS = ("site", "start_url", "example", "question", "count")
OUTPUT_KEYS = ("web_name", "id", "ques", "web")
REASONS = ("kept", "invalid_json", "invalid_task", "wrong_site", "duplicate")
BASE_DELAY_S = 1.0  # retry backoff of a failed call (full jitter, doubling)
MAX_DELAY_S = 30.0


# ---------------------------------------------------------------------------------- prompt


@cache
def template(name: str) -> str:
    """A packaged template by name, or a user's template file (`.txt`)."""
    try:
        return read_template(name, packaged("rlsys", "templates"), TEMPLATES, "proposer.prompt")
    except (ValueError, OSError) as e:
        raise ConfigError(str(e)) from None


def task_row(task: Task) -> dict:
    """A task as a task file line's object (`web_name`, `id`, `ques`, `web`)."""
    return {"web_name": task.meta.get("web_name", ""), "id": task.id, "ques": task.instruction, "web": task.start}


def render_prompt(text: str, example: Task, count: int) -> str:
    """The template filled in for one site; fields: {site}, {start_url}, {example}, {question}, {count}."""
    try:
        return text.format(
            site=example.meta.get("web_name", ""),
            start_url=example.start,
            example=json.dumps(task_row(example), ensure_ascii=False),
            question=example.instruction,
            count=count,
        )
    except (KeyError, IndexError, ValueError) as e:
        raise ConfigError(
            f"proposer.prompt: the template cannot be filled in ({type(e).__name__}: {e}); its fields are "
            f"{', '.join('{' + f + '}' for f in TEMPLATE_FIELDS)}, and literal braces must be doubled"
        ) from None


# ---------------------------------------------------------------------------------- checking replies


def normalize_question(text: str) -> str:
    """What two questions are compared by: casefolded, whitespace collapsed, trailing punctuation stripped."""
    return " ".join(str(text).casefold().split()).rstrip(string.punctuation + " ")


def site_host(url: str) -> str:
    """Host and non-default port of a URL (`127.0.0.1:7770` and `127.0.0.1:9999` are different sites)."""
    parsed = urlparse(url)
    host = (parsed.hostname or "").lower()
    try:
        port = parsed.port
    except ValueError:
        return host
    default = {"http": 80, "https": 443}.get(parsed.scheme)
    return f"{host}:{port}" if port is not None and port != default else host


def reply_lines(text: str) -> list[str]:
    """The candidate lines of a reply: blank lines and code fences (```json ... ```) left out."""
    return [s for line in text.splitlines() if (s := line.strip()) and not s.startswith("```")]


def check_line(line: str, example: Task, url_map: dict | None = None, suite: str | None = None) -> tuple[str, dict]:
    """One reply line against the task file rules and the example's site: `(reason, row)`, where
    reason is "ok", "invalid_json", "invalid_task" or "wrong_site", and row the line as it would be
    written (`web_name`, `ques`, `web`, no id yet) when it is ok."""
    try:
        row = json.loads(line)
    except ValueError:
        return "invalid_json", {}
    if not isinstance(row, dict):
        return "invalid_task", {}
    row["id"] = "proposed"  # ids are ours; the model's is never used (nor required)
    try:
        task = parse_task_line(json.dumps(row), "train", url_map or {}, suite)
    except ValueError:
        return "invalid_task", {}
    site = example.meta.get("web_name")
    if task.meta["web_name"] != site or site_host(task.start) != site_host(example.start):
        return "wrong_site", {}
    return "ok", {"web_name": site, "ques": task.instruction.strip(), "web": task.start}


def row_task(row: dict, suite: str | None = None) -> Task:
    """A written row as the `Task` `load_task_file` would read from it."""
    return parse_task_line(json.dumps({k: row[k] for k in OUTPUT_KEYS}), "train", {}, suite)


def site_examples(examples: Iterable[Task], warn: bool = True) -> dict[str, Task]:
    """One example per site (`web_name`), the first of each; later ones are ignored (with a warning)."""
    sites: dict[str, Task] = {}
    for task in examples:
        site = task.meta.get("web_name") or ""
        if site in sites:
            if not warn:
                continue
            log.warning(
                "site %r has several example tasks; using the first (%s), ignoring %s", site, sites[site].id, task.id
            )
            continue
        sites[site] = task
    return sites


def _question_key(web_name: str, question: str) -> tuple[str, str]:
    return web_name, normalize_question(question)


# ---------------------------------------------------------------------------------- proposing


def propose(
    cfg: ProposerConfig,
    client: ChatClient,
    examples: list[Task],
    known: Iterable[Task] = (),
    *,
    url_map: dict | None = None,
    suite: str | None = None,
    base_delay_s: float = BASE_DELAY_S,
    max_delay_s: float = MAX_DELAY_S,
    progress: Callable[[str], None] | None = None,
) -> tuple[list[dict], dict]:
    """Ask for `cfg.tasks_per_site` tasks per site and keep the valid, new ones.

    `known`: tasks the proposals must not repeat (by question, within a site) and whose ids are taken.
    Returns the kept rows (`web_name`, `id`, `ques`, `web`, in site order) and the counts: `proposed`
    (candidate lines), one count per outcome (`kept`, `invalid_json`, `invalid_task`, `wrong_site`,
    `duplicate`), `llm_errors` (sites whose call failed after retries; they are skipped),
    `per_site` (kept per site) and `failed_sites`."""
    if cfg.tasks_per_site < 1:
        raise ConfigError(f"proposer.tasks_per_site must be at least 1, got {cfg.tasks_per_site}")
    known = list(known)
    sites = site_examples(examples)
    text = template(cfg.prompt)
    prompts = {site: render_prompt(text, example, cfg.tasks_per_site) for site, example in sites.items()}
    seen = {_question_key(t.meta.get("web_name", ""), t.instruction) for t in [*known, *sites.values()]}
    used_ids = {t.id for t in known}
    next_n: Counter = Counter()
    rows: list[dict] = []
    counts: dict = {"proposed": 0, **{r: 0 for r in REASONS}, "llm_errors": 0, "per_site": {}, "failed_sites": []}

    for i, (site, example) in enumerate(sites.items(), start=1):
        prompt = prompts[site]
        try:
            reply, _ = with_retries(
                lambda prompt=prompt: client.chat(None, [prompt], cfg.llm.max_tokens, cfg.temperature),
                cfg.llm.max_retries,
                base_delay_s=base_delay_s,
                max_delay_s=max_delay_s,
                on_retry=lambda e, delay, site=site: log.info("site %r: %s; retrying in %.1fs", site, e, delay),
            )
        except LLMError as e:
            counts["llm_errors"] += 1
            counts["failed_sites"].append(site)
            log.warning("site %r skipped: the proposer call failed after %d retries: %s", site, e.retries, e)
            if progress:
                progress(f"[{i}/{len(sites)}] {site}: failed ({e.kind})")
            continue
        site_counts: Counter = Counter()
        for line in reply_lines(reply.text):
            reason, row = check_line(line, example, url_map, suite)
            if reason == "ok":
                key = _question_key(site, row["ques"])
                if key in seen:
                    reason = "duplicate"
                else:
                    seen.add(key)
                    row["id"] = _new_id(site, used_ids, next_n)
                    rows.append({k: row[k] for k in OUTPUT_KEYS})
                    reason = "kept"
            site_counts[reason] += 1
        counts["proposed"] += sum(site_counts.values())
        for reason in REASONS:
            counts[reason] += site_counts[reason]
        counts["per_site"][site] = site_counts["kept"]
        if progress:
            dropped = ", ".join(f"{site_counts[r]} {r}" for r in REASONS[1:] if site_counts[r])
            progress(
                f"[{i}/{len(sites)}] {site}: kept {site_counts['kept']} of {sum(site_counts.values())}"
                + (f" ({dropped})" if dropped else "")
            )
    return rows, counts


def _new_id(site: str, used: set[str], next_n: Counter) -> str:
    while True:
        next_n[site] += 1
        task_id = f"{site}--p{next_n[site]}"
        if task_id not in used:
            used.add(task_id)
            return task_id


def propose_new_tasks(
    proposer_cfg: ProposerConfig,
    client: ChatClient,
    examples: list[Task],
    known: list[Task],
    *,
    url_map: dict | None = None,
    suite: str | None = None,
    base_delay_s: float = BASE_DELAY_S,
    max_delay_s: float = MAX_DELAY_S,
) -> list[Task]:
    """New training tasks, for a trainer between iterations: validated, none repeating a `known`
    question within its site, ids not among `known`'s. `suite` is the tasks' suite (None: inferred
    as for a task file). A site whose call fails is skipped with a warning."""
    rows, counts = propose(
        proposer_cfg,
        client,
        examples,
        known,
        url_map=url_map,
        suite=suite,
        base_delay_s=base_delay_s,
        max_delay_s=max_delay_s,
    )
    log.info("task proposer: %s", {k: v for k, v in counts.items() if k != "per_site"})
    return [row_task(row, suite) for row in rows]


# ---------------------------------------------------------------------------------- CLI


def load_examples(path: str | None, url_map: dict | None = None) -> list[Task]:
    if not path:
        raise ConfigError("proposer.examples is not set: name a JSONL task file with one example task per site")
    if not Path(path).is_file():
        raise ConfigError(f"proposer.examples: {path} does not exist")
    try:
        examples = load_task_file(path, url_map=url_map)
    except TaskFileError as e:
        raise ConfigError(f"proposer.examples: {e}") from None
    if not examples:
        raise ConfigError(f"proposer.examples: {path} holds no tasks")
    return examples


def read_output(path: Path, url_map: dict | None = None) -> tuple[list[str], list[Task]]:
    """An existing output file's lines (kept verbatim) and tasks; nothing when it does not exist."""
    if not path.is_file():
        return [], []
    try:
        tasks = load_task_file(path, url_map=url_map)
    except TaskFileError as e:
        raise ConfigError(f"proposer.output: {e}") from None
    lines = [line.rstrip("\n") for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return lines, tasks


def write_atomic(path: Path, text: str) -> None:
    """Write through a temporary file in the same folder and rename it over `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
