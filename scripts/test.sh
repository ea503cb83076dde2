#!/usr/bin/env bash
# The test suite: real Ray actors, real headless Chromium, tiny models built offline.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 WANDB_MODE=offline TOKENIZERS_PARALLELISM=false
exec ${PYTHON:-python3} -m pytest -q -p no:cacheprovider --durations=10 "$@"
