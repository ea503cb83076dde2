"""boto3 is optional: rlsys.llm imports without it, and only a Bedrock client asks for it, with an error
that names the `bedrock` extra. Each check runs in a fresh interpreter; `sys.modules["boto3"] = None`
makes `import boto3` fail there as it would were boto3 not installed."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import yaml

NO_BOTO3 = 'import sys\nsys.modules["boto3"] = None\n'


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)


def last_json(result: subprocess.CompletedProcess) -> dict:
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_importing_rlsys_llm_does_not_import_boto3():
    result = run_python(
        """
        import json, sys
        import rlsys.llm
        after_import = sorted(m for m in sys.modules if m.split(".")[0] in ("boto3", "botocore"))
        rlsys.llm.BedrockClaudeClient("anthropic.claude-test", region="us-east-1")
        print(json.dumps({"after_import": after_import, "after_client": "boto3" in sys.modules}))
        """
    )
    seen = last_json(result)
    assert seen["after_import"] == []
    assert seen["after_client"], "creating a Bedrock client should import boto3 (the probe sees imports)"


def test_without_boto3_the_http_clients_work_and_bedrock_names_the_extra():
    result = run_python(
        NO_BOTO3
        + """
import json
from rlsys.config import ApiConfig
from rlsys.llm import BedrockClaudeClient, GeminiClient, MissingExtraError, make_client

seen = {}
seen["openai"] = type(make_client(ApiConfig(provider="openai", model_id="m", endpoint_url="http://127.0.0.1:9/v1"))).__name__
seen["gemini"] = type(GeminiClient("gemini-test", api_key="k")).__name__
try:
    make_client(ApiConfig(provider="bedrock", model_id="anthropic.claude-test"), key="proposer.llm")
except Exception as e:
    seen["make_client"] = {
        "type": type(e).__name__,
        "message": str(e),
        "extra": getattr(e, "extra", None),
        "import_error": isinstance(e, ImportError),
        "value_error": isinstance(e, ValueError),
    }
try:
    BedrockClaudeClient("anthropic.claude-test")
except MissingExtraError as e:
    seen["direct"] = str(e)
print(json.dumps(seen))
"""
    )
    seen = last_json(result)
    assert seen["openai"] == "OpenAIChatClient" and seen["gemini"] == "GeminiClient"
    error = seen.get("make_client")
    assert error is not None, "make_client built a Bedrock client without boto3"
    assert error["type"] == "MissingExtraError" and error["extra"] == "bedrock"
    # an ImportError for whoever checks the dependency, a ValueError for the callers that report config errors
    assert error["import_error"] and error["value_error"]
    assert error["message"].startswith("proposer.llm.provider is 'bedrock'")
    assert "pip install 'rlsys[bedrock]'" in error["message"]
    assert seen.get("direct") == "the Bedrock client needs boto3: pip install 'rlsys[bedrock]'"


def test_propose_tasks_reports_missing_boto3_as_a_config_error(tmp_path):
    examples = tmp_path / "examples.jsonl"
    examples.write_text(
        json.dumps({"web_name": "Shop", "id": "Shop--0", "ques": "q", "web": "https://shop.test/"}) + "\n"
    )
    config = tmp_path / "propose.yaml"
    llm = {"provider": "bedrock", "model_id": "anthropic.claude-test", "max_retries": 0}
    data = {"run": {"name": "propose", "output_dir": str(tmp_path / "run")}}
    data["proposer"] = {"llm": llm, "examples": str(examples), "tasks_per_site": 1}
    config.write_text(yaml.safe_dump(data))
    result = run_python(
        NO_BOTO3 + f"from rlsys.cli.propose_tasks import main\nsys.exit(main(['--config', {str(config)!r}]))\n"
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "config error: proposer.llm.provider is 'bedrock'" in result.stderr
    assert "pip install 'rlsys[bedrock]'" in result.stderr
    assert "Traceback" not in result.stderr


def test_training_with_a_bedrock_judge_and_no_boto3_stops_before_ray_starts(tmp_path):
    """The train CLI names the key and the extra at start-up, not at the first judge call of the run."""
    config = tmp_path / "cfg.yaml"
    judge = {"provider": "bedrock", "model_id": "anthropic.claude-test"}
    evaluator = {"kind": "judge", "judge": judge}
    config.write_text(yaml.safe_dump({"run": {"output_dir": str(tmp_path / "run")}, "evaluator": evaluator}))
    result = run_python(
        NO_BOTO3
        + f"""
from rlsys.cli.train import main
sys.exit(main(["--config", {str(config)!r}]))
"""
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "evaluator.judge.provider is 'bedrock', which needs boto3: pip install 'rlsys[bedrock]'" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "run" / "checkpoints").exists()
