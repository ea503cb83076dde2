"""PAE's task proposer against real local HTTP servers: the OpenAI-compatible client over plain HTTP,
and the Bedrock client through real boto3 with fake credentials (requests are SigV4-signed)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import yaml

from rlsys.cli.propose_tasks import main
from rlsys.config import ApiConfig, ProposerConfig, load_config
from rlsys.core.types import Task
from rlsys.envs.tasks import TaskSource
from rlsys.envs.web.task_files import load_task_file
from rlsys.envs.web.task_proposer import normalize_question, propose, propose_new_tasks
from rlsys.llm import make_client
from tests.conftest import make_config
from tests.support.http_stubs import BedrockStub, OpenAIStub, Recorded, Reply

BEDROCK_MODEL = "anthropic.claude-3-sonnet-20240229-v1:0"
OPENAI_MODEL = "Qwen/Qwen2-VL-7B-Instruct"
FAST = {"base_delay_s": 0.01, "max_delay_s": 0.02}

SHOP = {
    "web_name": "Shop",
    "id": "Shop--0",
    "ques": "Search for a red umbrella and report its price.",
    "web": "https://shop.example.com/",
}
WIKI = {
    "web_name": "Wiki",
    "id": "Wiki--0",
    "ques": "Find the year the Eiffel Tower was completed.",
    "web": "https://wiki.example.org/wiki/Main_Page",
}


def line(web_name="Shop", ques=None, web="https://shop.example.com/", **extra) -> str:
    row = {"web_name": web_name, "id": "llm-id", "ques": ques, "web": web, **extra}
    return json.dumps({k: v for k, v in row.items() if v is not None})


MIXED_REPLY = "\n".join(
    [
        "Here are the tasks:",  # invalid_json
        line(ques="Find the price of the blue kettle.", id="Shop--p9"),  # kept, as Shop--p1
        '{"web_name": "Shop", "id": "x", "ques": "broken", ',  # invalid_json
        line(ques=None),  # invalid_task: no ques
        line(web_name="Wiki", ques="List the opening hours of the store."),  # wrong_site: web_name
        line(ques="Open the returns policy page.", web="https://evil.example.net/returns"),  # wrong_site: host
        line(ques="  find the PRICE of the blue   kettle ", web="https://shop.example.com/kettles"),  # duplicate
        line(ques="search for a red umbrella and report its price!"),  # duplicate of the example
        "",
        json.dumps(  # kept, as Shop--p2 (no id given at all)
            {
                "web_name": "Shop",
                "ques": "How many reviews does the cheapest toaster have?",
                "web": "https://shop.example.com/toasters?sort=price",
            }
        ),
        line(ques="Find the warranty length of the Acme drill.", web="ftp://shop.example.com/"),  # invalid_task
    ]
)
MIXED_KEPT = [
    {"web_name": "Shop", "id": "Shop--p1", "ques": "Find the price of the blue kettle.", "web": SHOP["web"]},
    {
        "web_name": "Shop",
        "id": "Shop--p2",
        "ques": "How many reviews does the cheapest toaster have?",
        "web": "https://shop.example.com/toasters?sort=price",
    },
]


pytestmark = pytest.mark.usefixtures("stub_api_env")


# ---------------------------------------------------------------------------------- helpers


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def examples(tmp_path: Path, rows=(SHOP,)) -> list[Task]:
    return load_task_file(write_jsonl(tmp_path / "examples.jsonl", list(rows)))


def llm_cfg(provider: str, stub, **kw) -> dict:
    if provider == "openai":
        base = {"provider": "openai", "model_id": OPENAI_MODEL, "endpoint_url": stub.endpoint_url}
    else:
        base = {"provider": "bedrock", "model_id": BEDROCK_MODEL, "endpoint_url": stub.base_url}
    return {**base, "timeout_s": 2.0, "max_retries": 2, **kw}


def proposer(provider: str, stub, tasks_per_site: int = 25, **llm) -> ProposerConfig:
    llm = ApiConfig(**llm_cfg(provider, stub, max_tokens=900, **llm))
    return ProposerConfig(llm=llm, tasks_per_site=tasks_per_site, temperature=0.8)


def stub_for(provider: str, responder=None):
    return (OpenAIStub if provider == "openai" else BedrockStub)(responder)


def ok(provider: str, text: str) -> Reply:
    return Reply(200, OpenAIStub.completion(text) if provider == "openai" else BedrockStub.message(text))


def fail(provider: str, status: int) -> Reply:
    if provider == "openai":
        return Reply(status, {"error": {"message": f"stub status {status}"}})
    code = {429: "ThrottlingException", 500: "InternalServerException"}[status]
    return BedrockStub.error(status, code, f"stub status {status}")


def prompt_of(rec: Recorded) -> str:
    (message,) = rec.json["messages"][-1:]
    return "".join(p["text"] for p in message["content"] if p["type"] == "text")


def by_question(provider: str, replies: dict[str, Reply | str]):
    """A responder answering each site's request by the example question its prompt carries."""

    def respond(rec: Recorded) -> Reply:
        for question, reply in replies.items():
            if question in prompt_of(rec):
                return ok(provider, reply) if isinstance(reply, str) else reply
        return Reply(400, {"error": "stub: unknown site"})

    return respond


def write_config(tmp_path: Path, stub, examples_path: str, **proposer_keys) -> str:
    data = {
        "run": {"name": "propose", "output_dir": str(tmp_path / "run")},
        "proposer": {
            "llm": llm_cfg("openai", stub, max_retries=1),
            "examples": examples_path,
            "tasks_per_site": 5,
            **proposer_keys,
        },
    }
    path = tmp_path / "propose.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


# ---------------------------------------------------------------------------------- propose()


@pytest.mark.parametrize("provider", ["openai", "bedrock"])
def test_a_mixed_reply_is_filtered_with_exact_counts(tmp_path, provider):
    with stub_for(provider) as stub:
        stub.script(ok(provider, MIXED_REPLY))
        cfg = proposer(provider, stub)
        rows, counts = propose(cfg, make_client(cfg.llm, key="proposer.llm"), examples(tmp_path), **FAST)
    assert rows == MIXED_KEPT
    assert counts == {
        "proposed": 10,
        "kept": 2,
        "invalid_json": 2,
        "invalid_task": 2,
        "wrong_site": 2,
        "duplicate": 2,
        "llm_errors": 0,
        "per_site": {"Shop": 2},
        "failed_sites": [],
    }
    (rec,) = stub.requests
    prompt = prompt_of(rec)
    assert "Shop" in prompt and SHOP["ques"] in prompt and SHOP["web"] in prompt and "25" in prompt
    assert rec.json["max_tokens"] == 900 and rec.json["temperature"] == 0.8
    if provider == "bedrock":
        assert BedrockStub.model_id(rec) == BEDROCK_MODEL
        assert rec.headers["Authorization"].startswith("AWS4-HMAC-SHA256 ")
    assert not stub.unexpected


def test_a_fenced_reply_parses_and_one_example_per_site_is_used(tmp_path, caplog):
    fenced = "```json\n" + line(ques="Find the blue kettle.") + "\n\n" + line(ques="Find the green kettle.") + "\n```\n"
    second_shop = {**SHOP, "id": "Shop--1", "ques": "Find a yellow raincoat."}
    with stub_for("openai") as stub:
        stub.script(ok("openai", fenced))
        cfg = proposer("openai", stub)
        with caplog.at_level(logging.WARNING, logger="rlsys.envs.web.task_proposer"):
            rows, counts = propose(cfg, make_client(cfg.llm), examples(tmp_path, [SHOP, second_shop]), **FAST)
    assert [r["ques"] for r in rows] == ["Find the blue kettle.", "Find the green kettle."]
    assert counts["proposed"] == 2 and counts["kept"] == 2
    assert len(stub.requests) == 1 and SHOP["ques"] in prompt_of(stub.requests[0])
    assert "several example tasks" in caplog.text and "Shop--1" in caplog.text


@pytest.mark.parametrize("provider", ["openai", "bedrock"])
def test_a_rate_limited_call_is_retried(tmp_path, provider):
    with stub_for(provider) as stub:
        stub.script(fail(provider, 429), ok(provider, line(ques="Find the blue kettle.")))
        cfg = proposer(provider, stub)
        rows, counts = propose(cfg, make_client(cfg.llm), examples(tmp_path), **FAST)
    assert len(stub.requests) == 2 and not stub.unexpected
    assert [r["id"] for r in rows] == ["Shop--p1"] and counts["llm_errors"] == 0


def test_propose_new_tasks_skips_known_questions_and_ids(tmp_path):
    known = load_task_file(
        write_jsonl(
            tmp_path / "known.jsonl",
            [{**SHOP, "id": "Shop--p1", "ques": "Find the blue kettle"}, {**SHOP, "id": "Shop--p2", "ques": "Other"}],
        )
    )
    reply = "\n".join([line(ques="find the blue kettle."), line(ques="Find the green kettle.")])
    with stub_for("openai") as stub:
        stub.script(ok("openai", reply))
        cfg = proposer("openai", stub)
        tasks = propose_new_tasks(cfg, make_client(cfg.llm), examples(tmp_path), known, suite="webvoyager", **FAST)
    assert tasks == [
        Task(
            id="Shop--p3",
            instruction="Find the green kettle.",
            suite="webvoyager",
            split="train",
            start=SHOP["web"],
            meta={"web_name": "Shop"},
        )
    ]


def test_normalized_questions():
    assert normalize_question("  Find the PRICE\tof it?! ") == normalize_question("find the price of it")
    assert normalize_question("Find A") != normalize_question("Find B")


# ---------------------------------------------------------------------------------- CLI


def test_cli_writes_a_task_file_and_reruns_do_not_duplicate(tmp_path, capsys):
    replies = {
        SHOP["ques"]: "\n".join([line(ques="Find the blue kettle."), line(ques="Find the green kettle.")]),
        WIKI["ques"]: line(web_name="Wiki", ques="Who designed the Eiffel Tower?", web=WIKI["web"]),
    }
    examples_path = write_jsonl(tmp_path / "examples.jsonl", [SHOP, WIKI])
    with stub_for("openai", by_question("openai", replies)) as stub:
        config = write_config(tmp_path, stub, examples_path)
        assert main(["--config", config], **FAST) == 0
        output = tmp_path / "run" / "proposed_tasks.jsonl"
        first = output.read_text()
        tasks = load_task_file(output)
        assert [(t.id, t.instruction) for t in tasks] == [
            ("Shop--p1", "Find the blue kettle."),
            ("Shop--p2", "Find the green kettle."),
            ("Wiki--p1", "Who designed the Eiffel Tower?"),
        ]
        assert [sorted(json.loads(x)) for x in first.splitlines()] == [sorted(["web_name", "id", "ques", "web"])] * 3
        out = capsys.readouterr().out
        assert "Shop: kept 2 of 2" in out and "Wiki: kept 1 of 1" in out and "proposed 3, kept 3," in out
        summary = json.loads((tmp_path / "run" / "proposed_tasks.jsonl.summary.json").read_text())
        assert summary["counts"]["kept"] == 3 and summary["counts"]["per_site"] == {"Shop": 2, "Wiki": 1}

        # the same replies again: nothing new, the file untouched
        assert main(["--config", config], **FAST) == 0
        assert output.read_text() == first
        summary = json.loads((tmp_path / "run" / "proposed_tasks.jsonl.summary.json").read_text())
        assert summary["counts"]["duplicate"] == 3 and summary["counts"]["kept"] == 0

        # one new task: appended after the others, with the next id
        replies[SHOP["ques"]] += "\n" + line(ques="Find the red kettle.")
        assert main(["--config", config], **FAST) == 0
        assert output.read_text().startswith(first)
        assert [t.id for t in load_task_file(output)] == ["Shop--p1", "Shop--p2", "Wiki--p1", "Shop--p3"]
        assert len(stub.requests) == 6 and not stub.unexpected
    assert not list(output.parent.glob(".*.tmp"))

    # the file is a training task file as it stands
    cfg = make_config(tmp_path, env__kind="web", tasks__suite="webvoyager", tasks__file=str(output))
    assert len(TaskSource(cfg.tasks).pool) == 4


def test_cli_skips_a_failing_site_and_writes_the_others(tmp_path, capsys, caplog):
    replies = {SHOP["ques"]: line(ques="Find the blue kettle."), WIKI["ques"]: fail("openai", 500)}
    output = tmp_path / "out" / "tasks.jsonl"
    with stub_for("openai", by_question("openai", replies)) as stub:
        config = write_config(
            tmp_path, stub, write_jsonl(tmp_path / "examples.jsonl", [SHOP, WIKI]), output=str(output)
        )
        with caplog.at_level(logging.WARNING, logger="rlsys.envs.web.task_proposer"):
            assert main(["--config", config, "proposer.llm.max_retries=2"], **FAST) == 0
    wiki_calls = [r for r in stub.requests if WIKI["ques"] in prompt_of(r)]
    assert len(wiki_calls) == 3  # the first call and two retries
    assert [t.id for t in load_task_file(output)] == ["Shop--p1"]
    summary = json.loads(output.with_name("tasks.jsonl.summary.json").read_text())
    assert summary["counts"]["llm_errors"] == 1 and summary["counts"]["failed_sites"] == ["Wiki"]
    assert "Wiki" in caplog.text and "Wiki" in capsys.readouterr().err


def test_cli_exits_1_when_every_site_fails(tmp_path):
    with stub_for("openai", lambda rec: fail("openai", 500)) as stub:
        config = write_config(tmp_path, stub, write_jsonl(tmp_path / "examples.jsonl", [SHOP, WIKI]))
        assert main(["--config", config, "proposer.llm.max_retries=0"], **FAST) == 1
    assert len(stub.requests) == 2
    assert not (tmp_path / "run" / "proposed_tasks.jsonl").exists()
    summary = json.loads((tmp_path / "run" / "proposed_tasks.jsonl.summary.json").read_text())
    assert summary["counts"]["llm_errors"] == 2


@pytest.mark.parametrize(
    "override, named",
    [
        ("proposer.examples=null", "proposer.examples"),
        ("proposer.examples={tmp}/missing.jsonl", "proposer.examples"),
        ("proposer.examples={tmp}/bad.jsonl", "proposer.examples"),
        ("proposer.llm.endpoint_url=null", "proposer.llm.endpoint_url"),
        ("proposer.llm.model_id=", "proposer.llm.model_id"),
        ("proposer.llm.provider=gemini", "proposer.llm.provider"),
        ("proposer.tasks_per_sit=3", "proposer.tasks_per_site"),
        ("proposer.tasks_per_site=0", "proposer.tasks_per_site"),
        ("proposer.prompt=nope", "proposer.prompt"),
        ("proposer.prompt={tmp}/prompt.txt", "proposer.prompt"),
    ],
)
def test_cli_config_errors_exit_2_naming_the_key(tmp_path, capsys, override, named):
    (tmp_path / "bad.jsonl").write_text('{"web_name": "Shop", "id": "x", "web": "https://shop.example.com/"}\n')
    (tmp_path / "prompt.txt").write_text("Tasks for {website}, please.")
    with stub_for("openai") as stub:
        config = write_config(tmp_path, stub, write_jsonl(tmp_path / "examples.jsonl", [SHOP]))
        assert main(["--config", config, override.replace("{tmp}", str(tmp_path))], **FAST) == 2
    assert not stub.requests
    err = capsys.readouterr().err
    assert err.startswith("config error:") and named in err


def test_the_sample_config_loads():
    cfg = load_config(Path(__file__).resolve().parents[2] / "configs" / "pae_propose.yaml")
    assert cfg.proposer.llm.provider == "bedrock" and cfg.proposer.llm.model_id == BEDROCK_MODEL
    assert cfg.proposer.examples == "data/pae/site_examples.jsonl" and cfg.proposer.tasks_per_site == 25
    assert cfg.proposer.output == "data/pae/proposed_tasks.jsonl" and cfg.tasks.suite == "webvoyager"


# ---------------------------------------------------------------------------------- TaskSource.add


def test_added_tasks_are_drawn_and_resume_exactly(tmp_path):
    file = write_jsonl(tmp_path / "train.jsonl", [SHOP, WIKI])
    cfg = make_config(tmp_path, env__kind="web", tasks__suite="webvoyager", tasks__file=file).tasks
    source = TaskSource(cfg, seed=3)
    [source.next() for _ in range(3)]
    new = [
        Task(
            id=f"Shop--p{i}",
            instruction=f"Find kettle {i}",
            suite="webvoyager",
            start=SHOP["web"],
            meta={"web_name": "Shop"},
        )
        for i in range(1, 5)
    ]
    assert source.add(new[:3]) == 3
    assert source.add([new[2], new[3], Task(id="Wiki--0", instruction="again", suite="webvoyager")]) == 1
    assert [t.id for t in source.pool] == ["Shop--0", "Wiki--0", "Shop--p1", "Shop--p2", "Shop--p3", "Shop--p4"]
    state = json.loads(json.dumps(source.state_dict()))  # checkpoints are JSON
    expected = [source.next().id for _ in range(30)]
    assert {"Shop--p1", "Shop--p4"} <= set(expected)

    resumed = TaskSource(cfg, seed=99)
    resumed.load_state_dict(state)
    drawn = [resumed.next() for _ in range(30)]
    assert [t.id for t in drawn] == expected
    assert next(t for t in drawn if t.id == "Shop--p2") == new[1]

    with pytest.raises(ValueError, match="miniwob"):
        TaskSource(make_config(tmp_path).tasks).add(new)
