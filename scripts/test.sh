#!/usr/bin/env bash
# The test suite: real Ray actors, real headless Chromium, tiny models built offline.
# Much of it waits on browsers, Ray and child processes rather than computing, so it runs on pytest-xdist workers
# (RLSYS_TEST_WORKERS, 2 unless set; 0 runs it in this process), a test file to a worker so that a module's
# fixtures start once. tests/conftest.py keeps the workers' processes apart.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 WANDB_MODE=offline TOKENIZERS_PARALLELISM=false
exec ${PYTHON:-python3} -m pytest -q -p no:cacheprovider --durations=10 -n "${RLSYS_TEST_WORKERS:-2}" --dist loadfile "$@"
