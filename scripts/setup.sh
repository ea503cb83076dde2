#!/usr/bin/env bash
# Installs rlsys and what it needs on a Debian/Ubuntu machine: Chromium and its driver from
# the distribution, PyTorch (pinned), then the package with its web and test extras.
# PyTorch is the CPU build only where pip is offered one (a local wheel, or PyTorch's CPU index:
# `pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu` beforehand); from
# PyPI on Linux x86_64 the same pin is the CUDA build, about 1 GB plus some 18 NVIDIA runtime
# packages. For GPUs and released models: scripts/setup-gpu.sh and docs/real-models.md.
# `--test` also installs the documentation sites (Debian doc packages) the tests and benchmarks
# serve on 127.0.0.1 as real pages nobody here wrote.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
PY=${PYTHON:-python3}
# The vLLM placement's tests run a real engine (vLLM's CPU build) from its own environment, built
# meanwhile: it shares nothing with the steps below.
if [ "${1:-}" = "--test" ]; then
  PYTHON=$PY bash scripts/setup-vllm.sh > .venv-vllm.log 2>&1 &
  VLLM_SETUP=$!
fi
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
fi
DOC_SITES="python3.11-doc sphinx-doc git-doc debian-reference-en bash-doc sqlite3-doc"
if [ "${1:-}" = "--test" ] && ! dpkg -s $DOC_SITES >/dev/null 2>&1; then
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends $DOC_SITES >/dev/null
fi
# torch first, pinned: an unpinned torch would pull several GB of CUDA packages.
$PY -m pip install -q "torch==${TORCH_VERSION:-2.13.0}"
# every other package at the version CI last passed with (constraints.txt, written by scripts/lock.py)
$PY -m pip install -q -c constraints.txt -e ".[web,android,dev]"
if [ -n "${VLLM_SETUP:-}" ] && ! wait "$VLLM_SETUP"; then
  tail -n 30 .venv-vllm.log
  echo "scripts/setup-vllm.sh failed (log: .venv-vllm.log)" >&2
  exit 1
fi
