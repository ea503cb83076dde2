"""Configs that try to exhaust memory: alias bombs are refused, and no error message grows with its value."""

import subprocess
import sys

import pytest

from rlsys.config import ConfigError, load_config
from rlsys.config.errors import MAX_MESSAGE


def bomb(levels: int) -> str:
    """A YAML flow list of `levels` anchors, each ten aliases of the one before: 10**levels strings expanded."""
    items = ["&l0 [lol,lol,lol,lol,lol,lol,lol,lol,lol,lol]"]
    items += [f"&l{i} [{','.join([f'*l{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "[" + ", ".join(items) + "]"


def test_alias_expansion_in_a_file_is_refused_and_the_message_is_short(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(f"run:\n  iterations: {bomb(5)}\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert "alias" in str(e.value) and "bomb.yaml" in str(e.value)
    assert len(str(e.value)) <= MAX_MESSAGE


def test_an_override_with_an_alias_bomb_names_the_key():
    assert len(bomb(6)) < 400
    with pytest.raises(ConfigError) as e:
        load_config(None, [f"run.iterations={bomb(6)}"])
    assert "run.iterations" in str(e.value) and "alias" in str(e.value)
    assert len(str(e.value)) <= MAX_MESSAGE


def test_a_recursive_alias_is_refused():
    with pytest.raises(ConfigError, match="alias"):
        load_config(None, ["tasks.train=&a [*a]"])


def test_a_full_size_bomb_fails_fast_in_bounded_memory(tmp_path):
    """The issue's size: 10**9 strings from about 500 bytes; checked in a child limited to 512 MiB."""
    path = tmp_path / "bomb.yaml"
    path.write_text(f"run:\n  iterations: {bomb(9)}\n")
    assert path.stat().st_size < 600
    limit = 512 << 20
    code = (
        "import resource, sys\n"
        f"resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))\n"
        "from rlsys.config import ConfigError, load_config\n"
        f"try:\n    load_config({str(path)!r})\nexcept ConfigError as e:\n    sys.exit('config error: ' + str(e))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1 and proc.stderr.startswith("config error:"), proc.stderr[-2000:]
    assert "alias" in proc.stderr and len(proc.stderr) < 2 * MAX_MESSAGE


def test_every_config_error_message_is_bounded(tmp_path):
    huge = "x" * 100_000
    with pytest.raises(ConfigError) as e:
        load_config(None, [f"run.iterations={huge}"])
    assert "run.iterations" in str(e.value) and len(str(e.value)) <= 200 and "xxx...xxx" in str(e.value)
    with pytest.raises(ConfigError) as e:
        load_config(None, [f"run.mode={huge}"])
    assert len(str(e.value)) <= MAX_MESSAGE
    long = str(ConfigError("y" * 10**6))
    assert len(long) == MAX_MESSAGE and long.endswith("…")
