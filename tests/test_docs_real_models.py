"""docs/real-models.md stays true to the repository: the configs it names exist, the commands it shows are
installed scripts with those subcommands and flags, every `rlsys-...` command line with a config loads and
validates through the repository's config loader, every config key it mentions is in the schema, and the
GPU setup script it describes parses."""

from __future__ import annotations

import contextlib
import importlib
import io
import re
import shlex
import subprocess
import tomllib
from dataclasses import fields
from pathlib import Path

import pytest

from rlsys.config import Config, load_config, to_dict

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "real-models.md"
SECTIONS = [f.name for f in fields(Config)]
OVERRIDE = re.compile(rf"^(?:{'|'.join(SECTIONS)})(?:\.\w+)+=")
CONFIG_KEY = re.compile(rf"(?<![\w/.-])((?:{'|'.join(SECTIONS)})(?:\.\w+)+)")
SCRIPT = re.compile(r"\brlsys-[a-z]+(?:-[a-z]+)*")


def doc_text() -> str:
    return DOC.read_text()


def scripts() -> dict[str, str]:
    """Console scripts from pyproject.toml: name -> "module:function"."""
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def shell_lines(text: str) -> list[str]:
    """The lines of the doc's code blocks, with backslash continuations joined."""
    lines = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
        lines += block.replace("\\\n", " ").splitlines()
    return lines


def invocations(text: str) -> list[list[str]]:
    """Every `rlsys-...` command in the code blocks, as argv (from the script name to the end of the command)."""
    found = []
    for line in shell_lines(text):
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:  # a line of an embedded Python snippet, not a shell command
            continue
        for i, token in enumerate(tokens):
            if token.startswith("rlsys-"):
                end = next((j for j in range(i + 1, len(tokens)) if tokens[j] in ("&&", "||", "|", ";")), None)
                found.append(tokens[i:end])
    return found


def config_of(argv: list[str]) -> str | None:
    return argv[argv.index("--config") + 1] if "--config" in argv else None


def help_text(script: str, argv: list[str]) -> str:
    """What the installed command prints for `argv + ["--help"]`."""
    module, function = scripts()[script].split(":")
    main = getattr(importlib.import_module(module), function)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_info:
        main([*argv, "--help"])
    assert exit_info.value.code in (0, None), f"{script} {' '.join(argv)} --help failed"
    return out.getvalue()


def subcommand(argv: list[str], help_of_script: str) -> str | None:
    choices = re.search(r"\{([\w,-]+)\}", help_of_script)
    if not choices or len(argv) < 2 or argv[1].startswith("-"):
        return None
    return argv[1]


def test_the_doc_shows_commands_and_configs():
    text = doc_text()
    assert len(invocations(text)) >= 15
    assert sum(config_of(argv) is not None for argv in invocations(text)) >= 10


def test_named_configs_exist():
    text = doc_text()
    named = set(re.findall(r"configs/(\w+)\.yaml", text))
    named |= {config_of(argv) for argv in invocations(text) if config_of(argv)}
    missing = sorted(name for name in named if not (ROOT / "configs" / f"{name}.yaml").is_file())
    assert not missing, f"docs/real-models.md names configs that do not exist: {missing}"


def test_commands_are_installed_scripts():
    unknown = sorted(set(SCRIPT.findall(doc_text())) - set(scripts()))
    assert not unknown, f"docs/real-models.md shows commands that pyproject.toml does not install: {unknown}"


def test_subcommands_and_flags_exist():
    problems = []
    for argv in invocations(doc_text()):
        script = argv[0]
        if script not in scripts():
            continue  # reported by test_commands_are_installed_scripts
        top = help_text(script, [])
        sub = subcommand(argv, top)
        if sub is not None and not re.search(rf"\{{[\w,-]*\b{re.escape(sub)}\b[\w,-]*\}}", top):
            problems.append(f"{script} has no subcommand {sub!r}")
            continue
        usage = help_text(script, [sub]) if sub else top
        for flag in (t.split("=")[0] for t in argv if t.startswith("--")):
            if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", usage):
                problems.append(f"{' '.join(argv[:2])}: no flag {flag}")
    assert not problems, "\n".join(problems)


def test_command_lines_with_a_config_validate():
    """Each `--config NAME key=value ...` of the doc loads through the config loader: known keys, right types,
    the cross-section rules (no files are looked for)."""
    problems = []
    for argv in invocations(doc_text()):
        name = config_of(argv)
        if name is None:
            continue
        overrides = [t for t in argv if OVERRIDE.match(t)]
        try:
            load_config(name, overrides)
        except Exception as e:  # every failure is reported with its command line
            problems.append(f"{' '.join(argv)}\n    {type(e).__name__}: {e}")
    assert not problems, "\n".join(problems)


def test_config_keys_in_the_text_exist():
    schema = to_dict(Config())
    problems = []
    for span in re.findall(r"`([^`\n]+)`", doc_text()):
        for key in CONFIG_KEY.findall(span):
            node = schema
            for part in key.split("."):
                if not isinstance(node, dict) or part not in node:
                    problems.append(key)
                    break
                node = node[part]
    assert not problems, f"docs/real-models.md mentions config keys the schema lacks: {sorted(set(problems))}"


def test_setup_gpu_script_parses():
    script = ROOT / "scripts" / "setup-gpu.sh"
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "scripts/setup-gpu.sh" in doc_text()


def test_the_doc_is_linked():
    assert "real-models.md" in (ROOT / "docs" / "README.md").read_text()
    assert "docs/real-models.md" in (ROOT / "README.md").read_text()
