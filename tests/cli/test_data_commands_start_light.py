"""rlsys-data and rlsys-digiq start without PyTorch or transformers (a --help answers at once): of the image features
they only need the key stored features are kept under, rlsys/policies/feature_key.py."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_data_commands_import_neither_torch_nor_transformers():
    script = "import sys, rlsys.cli.data, rlsys.cli.digiq; print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
