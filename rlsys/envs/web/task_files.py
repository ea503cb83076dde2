"""Load web task files (PAE / WebVoyager / WebArena JSONL) into validated `Task`s.

One JSON object per line with `web_name`, `id`, `ques` (the instruction), `web` (the start URL) and,
for WebArena-style tasks, an `eval` block of programmatic checks. Site placeholders such as
`__SHOPPING__` are replaced through `url_map`.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from urllib.parse import urlparse

from rlsys.config.text_files import NotUTF8Error, read_utf8
from rlsys.core.types import Task

REQUIRED_KEYS = ("web_name", "id", "ques", "web")
EVAL_TYPES = ("string_match", "url_match", "program_html")
REFERENCE_ANSWER_KINDS = ("exact_match", "must_include", "fuzzy_match")
PLACEHOLDER = re.compile(r"__[A-Z][A-Z0-9_]*__")


class TaskFileError(ValueError):
    """A task file that cannot be used; the message names the file and line."""


def load_task_file(
    path: str | Path, split: str = "train", url_map: dict[str, str] | None = None, suite: str | None = None
) -> list[Task]:
    path = Path(path)
    tasks: list[Task] = []
    first_line_of_id: dict[str, int] = {}
    try:
        text = read_utf8(path)
    except NotUTF8Error as e:
        raise TaskFileError(str(e)) from None
    for lineno, line in enumerate(text.split("\n"), start=1):  # not splitlines: JSON strings may hold U+2028
        if not line.strip():
            continue
        try:
            task = parse_task_line(line, split, url_map or {}, suite)
        except ValueError as e:
            raise TaskFileError(f"{path}:{lineno}: {e}") from None
        if task.id in first_line_of_id:
            raise TaskFileError(
                f"{path}:{lineno}: duplicate task id {task.id!r} (first on line {first_line_of_id[task.id]})"
            )
        first_line_of_id[task.id] = lineno
        tasks.append(task)
    return tasks


def allowed_domains(tasks: list[Task]) -> list[str]:
    """Hostnames of the tasks' start URLs, a default allowlist for navigation."""
    return sorted({host for task in tasks if (host := urlparse(task.start).hostname)})


def parse_task_line(line: str, split: str, url_map: dict[str, str], suite: str | None) -> Task:
    """One task file line as a validated `Task`; a ValueError says what is wrong with it."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"invalid JSON: {e}") from None
    if not isinstance(row, dict):
        raise ValueError(f"expected a JSON object, got {type(row).__name__}")
    for key in REQUIRED_KEYS:
        value = row.get(key)
        if value is None or (isinstance(value, str) and not value.strip()):
            raise ValueError(f"missing or empty required key {key!r}")
    web_name = str(row["web_name"])
    start = _substitute(str(row["web"]), url_map, "web")
    _require_http_url(start, "web")
    checks = row.get("eval")
    if checks is not None:
        checks = _parse_checks(checks, url_map)
    return Task(
        id=_unique_id(web_name, str(row["id"])),
        instruction=str(row["ques"]),
        suite=suite or ("webarena" if checks is not None else "webvoyager"),
        split=split,
        start=start,
        checks=checks,
        meta={"web_name": web_name},
    )


def _unique_id(web_name: str, row_id: str) -> str:
    prefix = f"{web_name}--"
    return row_id if row_id.startswith(prefix) else prefix + row_id


def _substitute(url: str, url_map: dict[str, str], field: str) -> str:
    # longest placeholder first, so one never eats the start of another
    for placeholder in sorted(url_map, key=len, reverse=True):
        url = url.replace(placeholder, url_map[placeholder].rstrip("/"))
    leftover = PLACEHOLDER.search(url)
    if leftover:
        raise ValueError(
            f"{field} {url!r} still holds the placeholder {leftover.group()}; url_map must define {leftover.group()!r}"
        )
    return url


def _require_http_url(url: str, field: str) -> None:
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"{field} must be an http(s) URL, got {url!r}")


def _parse_checks(checks: object, url_map: dict[str, str]) -> dict:
    if not isinstance(checks, dict):
        raise ValueError(f"'eval' must be an object, got {type(checks).__name__}")
    checks = copy.deepcopy(checks)
    eval_types = checks.get("eval_types")
    if not isinstance(eval_types, list) or not eval_types:
        raise ValueError("'eval.eval_types' must be a non-empty list")
    for eval_type in eval_types:
        if eval_type not in EVAL_TYPES:
            raise ValueError(f"unknown eval type {eval_type!r}; known: {', '.join(EVAL_TYPES)}")
    if "string_match" in eval_types:
        _check_reference_answers(checks.get("reference_answers"))
    if "url_match" in eval_types:
        _check_reference_url(checks.get("reference_url"))
    if checks.get("reference_url"):
        checks["reference_url"] = _substitute(checks["reference_url"], url_map, "eval.reference_url")
    if "program_html" in eval_types:
        _check_program_html(checks.get("program_html"))
    for i, entry in enumerate(checks.get("program_html") or []):
        if isinstance(entry, dict) and isinstance(entry.get("url"), str):
            entry["url"] = _substitute(entry["url"], url_map, f"eval.program_html[{i}].url")
    return checks


def _check_reference_answers(answers: object) -> None:
    if not isinstance(answers, dict) or not answers:
        raise ValueError("string_match needs a non-empty 'eval.reference_answers' object")
    for kind, value in answers.items():
        if kind not in REFERENCE_ANSWER_KINDS:
            raise ValueError(f"unknown reference answer kind {kind!r}; known: {', '.join(REFERENCE_ANSWER_KINDS)}")
        if kind == "exact_match" and not _non_empty_str(value):
            raise ValueError("'reference_answers.exact_match' must be a non-empty string")
        if kind == "must_include" and not _non_empty_str_list(value):
            raise ValueError("'reference_answers.must_include' must be a non-empty list of strings")
        if kind == "fuzzy_match" and not (value == "N/A" or _non_empty_str_list(value)):
            raise ValueError("'reference_answers.fuzzy_match' must be a non-empty list of strings or 'N/A'")


def _check_reference_url(reference_url: object) -> None:
    if not _non_empty_str(reference_url):
        raise ValueError("url_match needs a non-empty 'eval.reference_url'")


def _check_program_html(entries: object) -> None:
    if not isinstance(entries, list) or not entries:
        raise ValueError("program_html needs a non-empty 'eval.program_html' list")
    for i, entry in enumerate(entries):
        where = f"'eval.program_html[{i}]'"
        if not isinstance(entry, dict):
            raise ValueError(f"{where} must be an object")
        if not _non_empty_str(entry.get("url")):
            raise ValueError(f"{where} needs a non-empty 'url' ('last' or a URL)")
        if not isinstance(entry.get("locator", ""), str):
            raise ValueError(f"{where}.locator must be a string")
        contents = entry.get("required_contents")
        if not isinstance(contents, dict) or not ({"exact_match", "must_include"} & contents.keys()):
            raise ValueError(f"{where} needs 'required_contents' with 'exact_match' or 'must_include'")
        if "exact_match" in contents and not _non_empty_str(contents["exact_match"]):
            raise ValueError(f"{where}.required_contents.exact_match must be a non-empty string")
        if "must_include" in contents and not _non_empty_str_list(contents["must_include"]):
            raise ValueError(f"{where}.required_contents.must_include must be a non-empty list of strings")


def _non_empty_str(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _non_empty_str_list(value: object) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, str) for v in value)
