from __future__ import annotations

import json

import pytest

from rlsys.envs.web.task_files import TaskFileError, allowed_domains, load_task_file

URL_MAP = {"__SHOPPING__": "http://127.0.0.1:7770", "__MAP__": "http://127.0.0.1:3000/"}


def voyager_row(**overrides) -> dict:
    row = {
        "web_name": "Allrecipes",
        "id": "Allrecipes--0",
        "ques": "Find a vegan lasagna recipe.",
        "web": "https://www.allrecipes.com/",
    }
    row.update(overrides)
    return row


def webarena_row(**overrides) -> dict:
    row = {
        "web_name": "shopping",
        "id": "7",
        "ques": "What is the price of the cheapest mug?",
        "web": "__SHOPPING__/",
        "eval": {
            "eval_types": ["string_match", "url_match", "program_html"],
            "reference_answers": {"must_include": ["$4.99"]},
            "reference_url": "__SHOPPING__/mugs.html |OR| __SHOPPING__/cups.html",
            "program_html": [
                {"url": "last", "locator": "", "required_contents": {"must_include": ["mug"]}},
                {"url": "__SHOPPING__/cart", "locator": "", "required_contents": {"exact_match": "empty"}},
            ],
            "string_note": "",
            "url_note": "GOLD in PRED",
        },
    }
    row.update(overrides)
    return row


def write_rows(path, rows) -> str:
    lines = [row if isinstance(row, str) else json.dumps(row) for row in rows]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def load_error(tmp_path, rows, url_map=URL_MAP) -> str:
    """The message of the TaskFileError that loading `rows` raises."""
    path = write_rows(tmp_path / "bad.jsonl", rows)
    with pytest.raises(TaskFileError) as excinfo:
        load_task_file(path, url_map=url_map)
    return str(excinfo.value)


def test_loads_webvoyager_rows(tmp_path):
    path = write_rows(tmp_path / "voyager.jsonl", [voyager_row(), "", voyager_row(id="1", web="http://example.org/a")])
    tasks = load_task_file(path, split="test")
    assert [t.id for t in tasks] == ["Allrecipes--0", "Allrecipes--1"]
    first = tasks[0]
    assert first.instruction == "Find a vegan lasagna recipe."
    assert first.start == "https://www.allrecipes.com/"
    assert first.suite == "webvoyager"
    assert first.split == "test"
    assert first.checks is None
    assert first.meta == {"web_name": "Allrecipes"}


def test_ids_already_prefixed_are_kept(tmp_path):
    path = write_rows(tmp_path / "pae.jsonl", [voyager_row(web_name="map", id="map--0", web="__MAP__/")])
    [task] = load_task_file(path, url_map=URL_MAP)
    assert task.id == "map--0"


def test_loads_webarena_rows_with_placeholders_substituted(tmp_path):
    path = write_rows(tmp_path / "webarena.jsonl", [webarena_row()])
    [task] = load_task_file(path, url_map=URL_MAP)
    assert task.id == "shopping--7"
    assert task.suite == "webarena"
    assert task.start == "http://127.0.0.1:7770/"
    assert task.checks["reference_url"] == "http://127.0.0.1:7770/mugs.html |OR| http://127.0.0.1:7770/cups.html"
    assert [e["url"] for e in task.checks["program_html"]] == ["last", "http://127.0.0.1:7770/cart"]
    assert task.checks["reference_answers"] == {"must_include": ["$4.99"]}
    assert task.checks["url_note"] == "GOLD in PRED"


def test_map_base_url_trailing_slash_is_not_doubled(tmp_path):
    path = write_rows(tmp_path / "map.jsonl", [voyager_row(web_name="map", id="3", web="__MAP__/search")])
    [task] = load_task_file(path, url_map=URL_MAP)
    assert task.start == "http://127.0.0.1:3000/search"


def test_suite_can_be_given(tmp_path):
    path = write_rows(tmp_path / "tasks.jsonl", [voyager_row(), webarena_row()])
    tasks = load_task_file(path, url_map=URL_MAP, suite="pae")
    assert {t.suite for t in tasks} == {"pae"}


def test_allowed_domains(tmp_path):
    rows = [
        voyager_row(),
        voyager_row(id="1", web="https://WWW.allrecipes.com/recipes"),
        voyager_row(web_name="Apple", id="2", web="https://www.apple.com/"),
        webarena_row(),
    ]
    tasks = load_task_file(write_rows(tmp_path / "tasks.jsonl", rows), url_map=URL_MAP)
    assert allowed_domains(tasks) == ["127.0.0.1", "www.allrecipes.com", "www.apple.com"]


def test_bad_json_names_file_and_line(tmp_path):
    message = load_error(tmp_path, [voyager_row(), '{"web_name": "x",'])
    assert "bad.jsonl:2:" in message and "invalid JSON" in message


def test_non_object_row(tmp_path):
    assert "bad.jsonl:1:" in load_error(tmp_path, ["[1, 2]"])


@pytest.mark.parametrize("key", ["web_name", "id", "ques", "web"])
def test_missing_required_key(tmp_path, key):
    row = voyager_row()
    del row[key]
    message = load_error(tmp_path, [voyager_row(id="9"), row])
    assert "bad.jsonl:2:" in message and f"missing or empty required key {key!r}" in message


def test_empty_required_key(tmp_path):
    message = load_error(tmp_path, [voyager_row(ques="  ")])
    assert "bad.jsonl:1:" in message and "'ques'" in message


def test_non_http_start_url(tmp_path):
    message = load_error(tmp_path, [voyager_row(web="file:///etc/passwd")])
    assert "bad.jsonl:1:" in message and "http(s) URL" in message


def test_unknown_eval_type(tmp_path):
    row = webarena_row()
    row["eval"]["eval_types"] = ["string_match", "page_image_query"]
    message = load_error(tmp_path, [row])
    assert "bad.jsonl:1:" in message and "unknown eval type 'page_image_query'" in message


@pytest.mark.parametrize(
    "eval_type, field, value, expected",
    [
        ("url_match", "reference_url", "", "url_match needs a non-empty 'eval.reference_url'"),
        ("string_match", "reference_answers", {}, "string_match needs a non-empty 'eval.reference_answers'"),
        ("string_match", "reference_answers", {"must_include": []}, "must_include' must be a non-empty list"),
        ("string_match", "reference_answers", {"exact_match": ""}, "exact_match' must be a non-empty string"),
        ("string_match", "reference_answers", {"fuzzy_match": "yes"}, "fuzzy_match' must be"),
        ("string_match", "reference_answers", {"regex": "a.*"}, "unknown reference answer kind 'regex'"),
        ("program_html", "program_html", [], "program_html needs a non-empty 'eval.program_html' list"),
        ("program_html", "program_html", [{"url": "last", "locator": ""}], "needs 'required_contents'"),
        ("program_html", "program_html", [{"locator": "", "required_contents": {"exact_match": "a"}}], "'url'"),
    ],
)
def test_eval_type_without_its_data(tmp_path, eval_type, field, value, expected):
    row = webarena_row()
    row["eval"]["eval_types"] = [eval_type]
    row["eval"][field] = value
    message = load_error(tmp_path, [voyager_row(), row])
    assert "bad.jsonl:2:" in message and expected in message


def test_fuzzy_match_na_is_accepted(tmp_path):
    row = webarena_row()
    row["eval"]["eval_types"] = ["string_match"]
    row["eval"]["reference_answers"] = {"fuzzy_match": "N/A"}
    [task] = load_task_file(write_rows(tmp_path / "na.jsonl", [row]), url_map=URL_MAP)
    assert task.checks["reference_answers"] == {"fuzzy_match": "N/A"}


def test_duplicate_ids(tmp_path):
    # "0" becomes "Allrecipes--0", the same id as the first row
    message = load_error(tmp_path, [voyager_row(), voyager_row(id="1"), voyager_row(id="0")])
    assert "bad.jsonl:3:" in message and "duplicate task id 'Allrecipes--0' (first on line 1)" in message


def test_unreplaced_placeholder_in_start_url(tmp_path):
    message = load_error(tmp_path, [webarena_row()], url_map={})
    assert "bad.jsonl:1:" in message and "__SHOPPING__" in message and "url_map must define" in message


def test_unreplaced_placeholder_in_program_html_url(tmp_path):
    row = webarena_row()
    row["eval"]["program_html"][1]["url"] = "__REDDIT__/forums"
    message = load_error(tmp_path, [row])
    assert "bad.jsonl:1:" in message and "program_html[1].url" in message
    assert "url_map must define '__REDDIT__'" in message


def test_unreplaced_placeholder_in_reference_url(tmp_path):
    row = webarena_row()
    row["eval"]["reference_url"] = "__GITLAB__/explore"
    message = load_error(tmp_path, [row])
    assert "bad.jsonl:1:" in message and "reference_url" in message and "'__GITLAB__'" in message


def test_error_is_a_value_error(tmp_path):
    path = write_rows(tmp_path / "bad.jsonl", ["not json"])
    with pytest.raises(ValueError):
        load_task_file(path)
