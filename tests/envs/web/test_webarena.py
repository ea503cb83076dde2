from __future__ import annotations

import functools
import shutil
import socket
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rlsys.envs.web.webarena import evaluate, program_html, string_match, url_match

PAGES = {
    "index.html": """<html><body>
        <h1 id="title">Cheapest   Mug</h1>
        <p id="price">$4.99</p>
        <ul id="items"><li>Blue mug</li><li>Red cup</li></ul>
    </body></html>""",
    "cart.html": """<html><body><div id="cart">Your cart is empty.</div></body></html>""",
}


# ---------------------------------------------------------------- string_match


def test_exact_match_normalizes_case_whitespace_quotes_and_punctuation():
    score, reason = string_match(
        {"exact_match": "Pittsburgh International Airport"}, '"pittsburgh  INTERNATIONAL airport."'
    )
    assert score == 1.0 and "equals" in reason


def test_exact_match_fails_on_a_different_answer():
    score, reason = string_match({"exact_match": "Pittsburgh International Airport"}, "Pittsburgh airport")
    assert score == 0.0 and "differs" in reason


def test_must_include_needs_every_entry():
    refs = {"must_include": ["pittsburgh", "airport"]}
    assert string_match(refs, "It is Pittsburgh International Airport.")[0] == 1.0
    score, reason = string_match(refs, "Pittsburgh station")
    assert score == 0.0 and "airport" in reason


def test_must_include_or_alternatives():
    refs = {"must_include": ["Pittsburgh |OR| PIT", "airport"]}
    assert string_match(refs, "PIT airport")[0] == 1.0
    assert string_match(refs, "pittsburgh airport")[0] == 1.0
    assert string_match(refs, "Philadelphia airport")[0] == 0.0


@pytest.mark.parametrize("verdict, expected", [(True, 1.0), (False, 0.0), (None, None)])
def test_fuzzy_match_delegates_to_the_judge(verdict, expected):
    calls = []

    def judge(answer, references):
        calls.append((answer, references))
        return verdict

    score, reason = string_match({"fuzzy_match": ["about 20 minutes"]}, "roughly twenty minutes", fuzzy_judge=judge)
    assert score == expected
    assert calls == [("roughly twenty minutes", ["about 20 minutes"])]
    if verdict is None:
        assert "fuzzy_match needs an LLM judge" in reason


def test_fuzzy_match_na_reference_is_passed_as_a_list():
    calls = []
    string_match({"fuzzy_match": "N/A"}, "This cannot be done.", fuzzy_judge=lambda a, refs: calls.append(refs))
    assert calls == [["N/A"]]


def test_fuzzy_match_without_a_judge_is_unknown():
    score, reason = string_match({"fuzzy_match": ["about 20 minutes"]}, "20 minutes")
    assert score is None and "fuzzy_match needs an LLM judge" in reason


def test_string_match_is_the_product_over_kinds_and_a_zero_beats_unknown():
    refs = {"must_include": ["airport"], "fuzzy_match": ["Pittsburgh International Airport"]}
    assert string_match(refs, "the airport")[0] is None
    assert string_match(refs, "the station")[0] == 0.0
    assert string_match(refs, "the airport", fuzzy_judge=lambda a, r: True)[0] == 1.0


def test_string_match_without_references_is_unknown():
    assert string_match({}, "anything")[0] is None


# ---------------------------------------------------------------- url_match


@pytest.mark.parametrize(
    "reference, final",
    [
        ("http://shop.test/mugs", "http://shop.test/mugs/"),
        ("http://shop.test/mugs/", "https://shop.test/mugs"),
        ("http://shop.test/mugs", "http://shop.test/mugs/blue?sort=price"),
        ("http://shop.test/caf%C3%A9", "http://shop.test/café"),
        ("http://shop.test/cups |OR| http://shop.test/mugs", "http://shop.test/mugs"),
        ("http://shop.test/search?q=mug", "http://shop.test/search?page=2&q=mug"),
        ("http://shop.test/search?tag=a&tag=b", "http://shop.test/search?tag=b&tag=c&tag=a"),
    ],
)
def test_url_match_passes(reference, final):
    score, reason = url_match(reference, final)
    assert score == 1.0, reason


@pytest.mark.parametrize(
    "reference, final",
    [
        ("http://shop.test/mugs", "http://shop.test/cups"),
        ("http://shop.test/mugs/blue", "http://shop.test/mugs"),
        ("http://shop.test/cups |OR| http://shop.test/plates", "http://shop.test/mugs"),
        ("http://shop.test/search?q=mug", "http://shop.test/search?q=cup"),
        ("http://shop.test/search?q=mug", "http://shop.test/search"),
        ("http://shop.test/search?tag=a&tag=b", "http://shop.test/search?tag=a"),
        ("http://shop.test/mugs", ""),
    ],
)
def test_url_match_fails(reference, final):
    score, reason = url_match(reference, final)
    assert score == 0.0 and "matches none" in reason


# ---------------------------------------------------------------- evaluate without a browser


def test_evaluate_string_and_url_match():
    checks = {
        "eval_types": ["string_match", "url_match"],
        "reference_answers": {"must_include": ["$4.99"]},
        "reference_url": "http://shop.test/mugs",
    }
    verdict = evaluate(checks, "It costs $4.99.", "http://shop.test/mugs")
    assert verdict.success is True and verdict.score == 1.0 and verdict.source == "webarena"
    assert verdict.latency_s >= 0
    failed = evaluate(checks, "It costs $4.99.", "http://shop.test/cups")
    assert failed.success is False and failed.score == 0.0
    assert "must_include" in failed.reason and "url_match" in failed.reason


def test_evaluate_unknown_eval_type_is_unknown_unless_another_check_fails():
    checks = {"eval_types": ["string_match", "page_image_query"], "reference_answers": {"exact_match": "yes"}}
    verdict = evaluate(checks, "yes", "")
    assert verdict.success is None and verdict.score is None
    assert "unknown eval type 'page_image_query'" in verdict.reason
    assert verdict.reward is None
    failed = evaluate(checks, "no", "")
    assert failed.success is False and failed.score == 0.0


def test_evaluate_fuzzy_match_uses_the_judge():
    checks = {"eval_types": ["string_match"], "reference_answers": {"fuzzy_match": ["twenty"]}}
    assert evaluate(checks, "20", "").success is None
    assert evaluate(checks, "20", "", fuzzy_judge=lambda a, r: True).success is True
    assert evaluate(checks, "20", "", fuzzy_judge=lambda a, r: False).success is False


def test_evaluate_without_eval_types_is_unknown():
    verdict = evaluate({"eval_types": []}, "yes", "")
    assert verdict.success is None and "no eval_types" in verdict.reason


def test_evaluate_program_html_without_a_browser_is_unknown():
    checks = {
        "eval_types": ["program_html"],
        "program_html": [{"url": "last", "locator": "", "required_contents": {"must_include": ["mug"]}}],
    }
    verdict = evaluate(checks, "", "http://shop.test/", driver=None)
    assert verdict.success is None and "needs a browser" in verdict.reason


# ---------------------------------------------------------------- program_html with a real browser


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("site")
    for name, html in PAGES.items():
        (root / name).write_text(html)

    class QuietHandler(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture(scope="module")
def driver():
    from rlsys.envs.web.browser import Browser

    chromium, chromedriver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and chromedriver):
        pytest.skip("chromium and chromedriver are needed for program_html")
    browser = Browser(chromium, chromedriver, [800, 600], headless=True, timeout_s=30)
    try:
        yield browser.driver
    finally:
        browser.close()


def entry(url, locator, **required_contents):
    return {"url": url, "locator": locator, "required_contents": required_contents}


def test_program_html_passes_by_locator(site, driver):
    entries = [entry(f"{site}/index.html", "document.querySelector('#price').outerText", exact_match="$4.99")]
    score, reason = program_html(entries, driver, final_url=f"{site}/cart.html")
    assert score == 1.0, reason
    assert driver.current_url == f"{site}/index.html"


def test_program_html_fails_on_content(site, driver):
    entries = [entry(f"{site}/index.html", "document.querySelector('#price').outerText", exact_match="$5.99")]
    score, reason = program_html(entries, driver, final_url="")
    assert score == 0.0 and "differs from '$5.99'" in reason


def test_program_html_must_include_with_or_alternatives(site, driver):
    locator = "document.querySelector('#items').outerText"
    passing = [entry(f"{site}/index.html", locator, must_include=["green mug |OR| blue mug", "cup"])]
    assert program_html(passing, driver, final_url="")[0] == 1.0
    failing = [entry(f"{site}/index.html", locator, must_include=["green mug |OR| yellow mug", "cup"])]
    score, reason = program_html(failing, driver, final_url="")
    assert score == 0.0 and "green mug |OR| yellow mug" in reason


def test_program_html_missing_element_scores_zero(site, driver):
    entries = [entry(f"{site}/index.html", "document.querySelector('#missing').outerText", must_include=["x"])]
    score, reason = program_html(entries, driver, final_url="")
    assert score == 0.0 and "#missing" in reason and "failed" in reason
    assert "Session info" not in reason


def test_program_html_last_uses_the_current_page(site, driver):
    driver.get(f"{site}/cart.html")
    # a change made after loading survives only if the check does not reload the page
    driver.execute_script("document.querySelector('#cart').innerText = 'Your cart holds 1 item.'")
    entries = [entry("last", "document.querySelector('#cart').outerText", must_include=["1 item"])]
    score, reason = program_html(entries, driver, final_url=f"{site}/cart.html")
    assert score == 1.0, reason


def test_program_html_last_goes_to_the_final_url_when_the_browser_left_it(site, driver):
    driver.get(f"{site}/index.html")
    entries = [entry("last", "document.querySelector('#cart').outerText", exact_match="your cart is empty")]
    score, reason = program_html(entries, driver, final_url=f"{site}/cart.html")
    assert score == 1.0, reason
    assert driver.current_url == f"{site}/cart.html"


def test_program_html_empty_locator_reads_the_body(site, driver):
    entries = [entry(f"{site}/index.html", "", must_include=["cheapest mug", "$4.99", "red cup"])]
    score, reason = program_html(entries, driver, final_url="")
    assert score == 1.0, reason


def test_program_html_on_a_site_that_is_down_is_unknown(driver):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    entries = [entry(f"http://127.0.0.1:{closed_port}/", "", must_include=["mug"])]
    score, reason = program_html(entries, driver, final_url="")
    assert score is None and "could not load" in reason


def test_program_html_func_locator_is_unknown(site, driver):
    entries = [entry(f"{site}/index.html", "func:shopping_get_sku_latest_review_rating('B01')", exact_match="5")]
    score, reason = program_html(entries, driver, final_url="")
    assert score is None and "not supported" in reason


def test_program_html_is_the_product_over_entries(site, driver):
    entries = [
        entry(f"{site}/index.html", "", must_include=["mug"]),
        entry(f"{site}/cart.html", "", must_include=["mug"]),
    ]
    score, reason = program_html(entries, driver, final_url="")
    assert score == 0.0
    assert "program_html[0]: content holds" in reason and "program_html[1]" in reason


def test_evaluate_is_the_product_across_eval_types(site, driver):
    checks = {
        "eval_types": ["string_match", "url_match", "program_html"],
        "reference_answers": {"must_include": ["$4.99"]},
        "reference_url": f"{site}/index.html",
        "program_html": [entry("last", "document.querySelector('#title').outerText", exact_match="Cheapest Mug")],
    }
    driver.get(f"{site}/index.html")
    verdict = evaluate(checks, "$4.99", driver.current_url, driver=driver)
    assert verdict.success is True and verdict.score == 1.0, verdict.reason

    # string_match passing x url_match failing = 0
    driver.get(f"{site}/cart.html")
    verdict = evaluate(checks, "$4.99", driver.current_url, driver=driver)
    assert verdict.success is False and verdict.score == 0.0
    assert "must_include: answer holds" in verdict.reason and "matches none" in verdict.reason


def test_evaluate_unknown_program_html_with_passing_string_match_is_unknown(site, driver):
    checks = {
        "eval_types": ["string_match", "program_html"],
        "reference_answers": {"exact_match": "$4.99"},
        "program_html": [entry(f"{site}/index.html", "func:get_price()", exact_match="$4.99")],
    }
    verdict = evaluate(checks, "$4.99", f"{site}/index.html", driver=driver)
    assert verdict.success is None and verdict.score is None and "not supported" in verdict.reason
