"""WebArena-style programmatic checks: string_match, url_match and program_html.

Each check returns (score, reason), the score 1.0 / 0.0, or None when no verdict can be had
(e.g. fuzzy_match without an LLM judge); `evaluate` combines the checks of a task into a `Verdict`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from urllib.parse import parse_qs, unquote, urlparse

from selenium.common.exceptions import JavascriptException, WebDriverException

from rlsys.core.evaluator import Verdict

OR_SEPARATOR = " |OR| "
# quotes and sentence punctuation a model tends to wrap an answer in
_SURROUNDING = " \t\n\"'`.,;:!?\u201c\u201d\u2018\u2019"

FuzzyJudge = Callable[[str, list[str]], "bool | None"]


def normalize(text: object) -> str:
    return " ".join(str(text).lower().split()).strip(_SURROUNDING)


def combine(scores: Iterable[float | None]) -> float | None:
    """The product of the scores; a definite 0 wins over an unknown (None)."""
    scores = list(scores)
    if any(s == 0 for s in scores if s is not None):
        return 0.0
    if any(s is None for s in scores):
        return None
    product = 1.0
    for s in scores:
        product *= s
    return product


def string_match(
    reference_answers: dict, answer: str, fuzzy_judge: FuzzyJudge | None = None
) -> tuple[float | None, str]:
    if not reference_answers:
        return None, "no reference answers to match"
    results = [_match_reference(kind, value, answer, fuzzy_judge) for kind, value in reference_answers.items()]
    return combine(s for s, _ in results), "; ".join(r for _, r in results)


def url_match(reference_url: str, final_url: str) -> tuple[float, str]:
    final_base, final_query = _split_url(final_url or "")
    alternatives = [alt.strip() for alt in reference_url.split(OR_SEPARATOR) if alt.strip()]
    for alt in alternatives:
        ref_base, ref_query = _split_url(alt)
        if ref_base in final_base and _query_contained(ref_query, final_query):
            return 1.0, f"url_match: final URL {final_url!r} matches {alt!r}"
    return 0.0, f"url_match: final URL {final_url!r} matches none of {alternatives}"


def program_html(entries: list[dict], driver, final_url: str) -> tuple[float | None, str]:
    if not entries:
        return None, "program_html: no entries to check"
    results = [_check_page(entry, driver, final_url) for entry in entries]
    reasons = [f"program_html[{i}]: {reason}" for i, (_, reason) in enumerate(results)]
    return combine(s for s, _ in results), "; ".join(reasons)


def evaluate(checks: dict, answer: str, final_url: str, driver=None, fuzzy_judge: FuzzyJudge | None = None) -> Verdict:
    t0 = time.monotonic()
    eval_types = checks.get("eval_types") or []
    results = [_run_check(t, checks, answer or "", final_url or "", driver, fuzzy_judge) for t in eval_types]
    if not results:
        results = [(None, "no eval_types in the checks")]
    score = combine(s for s, _ in results)
    return Verdict(
        success=None if score is None else score == 1.0,
        source="webarena",
        reason="; ".join(r for _, r in results),
        latency_s=time.monotonic() - t0,
        score=score,
    )


def _run_check(eval_type, checks, answer, final_url, driver, fuzzy_judge) -> tuple[float | None, str]:
    if eval_type == "string_match":
        return string_match(checks.get("reference_answers") or {}, answer, fuzzy_judge)
    if eval_type == "url_match":
        if not checks.get("reference_url"):
            return None, "url_match: no reference_url"
        return url_match(checks["reference_url"], final_url)
    if eval_type == "program_html":
        if driver is None:
            return None, "program_html: needs a browser to inspect the pages, none given"
        return program_html(checks.get("program_html") or [], driver, final_url)
    return None, f"unknown eval type {eval_type!r}"


def _match_reference(kind: str, value, answer: str, fuzzy_judge: FuzzyJudge | None) -> tuple[float | None, str]:
    if kind == "exact_match":
        ok = normalize(answer) == normalize(value)
        return float(ok), f"exact_match: answer {_clip(answer)!r} {'equals' if ok else 'differs from'} {value!r}"
    if kind == "must_include":
        missing = [entry for entry in value if not _includes(normalize(answer), entry)]
        if missing:
            return 0.0, f"must_include: answer {_clip(answer)!r} lacks {missing}"
        return 1.0, f"must_include: answer holds all of {value}"
    if kind == "fuzzy_match":
        return _fuzzy_match(value, answer, fuzzy_judge)
    return None, f"unknown reference answer kind {kind!r}"


def _fuzzy_match(value, answer: str, fuzzy_judge: FuzzyJudge | None) -> tuple[float | None, str]:
    if fuzzy_judge is None:
        return None, "fuzzy_match needs an LLM judge, none given"
    references = [value] if isinstance(value, str) else list(value)
    verdict = fuzzy_judge(answer, references)
    if verdict is None:
        return None, "fuzzy_match: the LLM judge gave no verdict (fuzzy_match needs an LLM judge's verdict)"
    return float(bool(verdict)), f"fuzzy_match: the judge found the answer {'' if verdict else 'not '}matching"


def _includes(normalized_text: str, entry: str) -> bool:
    """Whether any of the " |OR| " alternatives of `entry` occurs in the text."""
    return any(normalize(alt) in normalized_text for alt in entry.split(OR_SEPARATOR))


def _split_url(url: str) -> tuple[str, dict[str, list[str]]]:
    """The scheme-less base (netloc + path, unquoted, no trailing slash) and the query."""
    parsed = urlparse(url.strip())
    base = unquote(parsed.netloc.lower() + parsed.path).rstrip("/")
    return base, parse_qs(parsed.query)


def _query_contained(reference: dict[str, list[str]], final: dict[str, list[str]]) -> bool:
    return all(key in final and set(values) <= set(final[key]) for key, values in reference.items())


def _check_page(entry: dict, driver, final_url: str) -> tuple[float | None, str]:
    url = entry.get("url") or "last"
    locator = (entry.get("locator") or "").strip()
    if url.startswith("func:"):
        return None, f"func: URLs are not supported ({url!r})"
    if locator.startswith("func:"):
        return None, f"func: locators are not supported ({locator!r})"
    try:
        navigated = _open_page(driver, url, final_url)
    except WebDriverException as e:
        return None, f"could not load {url!r}: {_first_line(e.msg)}"
    # a site that is down says nothing about the agent; Chromium shows its own error page then
    if navigated and driver.execute_script("return document.documentURI").startswith("chrome-error://"):
        return None, f"could not load {driver.current_url!r} (the site did not answer)"
    script = "return " + (locator or "document.body.outerText")
    try:
        content = driver.execute_script(script)
    except JavascriptException as e:
        return 0.0, f"locator {locator!r} failed on {driver.current_url!r}: {_first_line(e.msg)}"
    except WebDriverException as e:
        return None, f"locator {locator!r} could not run: {_first_line(e.msg)}"
    content = "" if content is None else str(content)
    return _required_contents(entry.get("required_contents") or {}, content)


def _open_page(driver, url: str, final_url: str) -> bool:
    """Go to the page an entry inspects; whether that took a navigation."""
    if url == "last":
        if not final_url or driver.current_url.rstrip("/") == final_url.rstrip("/"):
            return False
        url = final_url
    driver.get(url)
    return True


def _required_contents(required: dict, content: str) -> tuple[float | None, str]:
    normalized = normalize(content)
    results: list[tuple[float | None, str]] = []
    if "exact_match" in required:
        ok = normalized == normalize(required["exact_match"])
        verb = "equals" if ok else "differs from"
        results.append((float(ok), f"content {_clip(content)!r} {verb} {required['exact_match']!r}"))
    if "must_include" in required:
        missing = [entry for entry in required["must_include"] if not _includes(normalized, entry)]
        if missing:
            results.append((0.0, f"content {_clip(content)!r} lacks {missing}"))
        else:
            results.append((1.0, f"content holds all of {required['must_include']}"))
    if not results:
        return None, "no required_contents (exact_match or must_include) to check"
    return combine(s for s, _ in results), "; ".join(r for _, r in results)


def _clip(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _first_line(message: str | None) -> str:
    # chromedriver appends session details on further lines
    lines = (message or "").strip().splitlines()
    return lines[0] if lines else ""
