#!/usr/bin/env bash
# Installs rlsys for training released models on NVIDIA GPUs (Debian/Ubuntu, x86_64). What it installs:
#   - Chromium and chromedriver from apt: Debian's chromium and chromium-driver where the distribution has
#     them; on Ubuntu chromium-browser and chromium-chromedriver, which install the Chromium snap (then pass
#     env.chromium=/snap/bin/chromium env.chromedriver=/snap/bin/chromium.chromedriver).
#   - torch==2.13.0 from PyPI. On Linux x86_64 PyPI's wheel is the CUDA build: torch itself (about 1 GB)
#     plus the NVIDIA runtime libraries as about 18 separate nvidia-* wheels (cuBLAS, cuDNN, cuFFT, NCCL,
#     ...) and triton: several GB to download and more installed. The script prints the exact count and
#     size at the end. TORCH_INDEX_URL=URL installs torch from another index instead (a PyTorch index
#     built for an older CUDA, when the NVIDIA driver is too old for PyPI's build).
#   - this package with its web, android and bedrock extras; `--quant4` adds the quant4 extra
#     (bitsandbytes, for policy.load_in_4bit).
# It does not install the NVIDIA driver: `nvidia-smi` must work first. It ends by checking that torch sees
# the GPUs. docs/real-models.md says what each recipe needs next. For CPU-only machines: scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

EXTRAS="web,android,bedrock"
for arg in "$@"; do
  case "$arg" in
    --quant4) EXTRAS="$EXTRAS,quant4" ;;
    *) echo "usage: bash scripts/setup-gpu.sh [--quant4]" >&2; exit 2 ;;
  esac
done

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "no working NVIDIA driver (nvidia-smi fails): install the driver first, or use scripts/setup.sh" >&2
  exit 1
fi
nvidia-smi -L

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
has() { command -v "$1" >/dev/null; }
if ! { has chromium || has chromium-browser; } || ! { has chromedriver || has chromium.chromedriver; }; then
  $SUDO apt-get update -qq
  if apt-cache show chromium-driver >/dev/null 2>&1; then
    PKGS="chromium chromium-driver"
  else
    PKGS="chromium-browser chromium-chromedriver"
  fi
  $SUDO apt-get install -y -qq $PKGS >/dev/null
fi

PY=${PYTHON:-python3}
TORCH="torch==${TORCH_VERSION:-2.13.0}"
# torch first, pinned, so that installing the package does not pull whatever torch is newest
if [ -n "${TORCH_INDEX_URL:-}" ]; then
  $PY -m pip install -q "$TORCH" --index-url "$TORCH_INDEX_URL"
else
  $PY -m pip install -q "$TORCH"
fi
$PY -m pip install -q -e ".[$EXTRAS]"

$PY - <<'EOF'
import importlib.metadata as md
import sys

import torch

nvidia = [d for d in md.distributions() if (d.metadata["Name"] or "").lower().startswith("nvidia-")]
size = sum(f.size or 0 for d in nvidia for f in (d.files or []))
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}; {len(nvidia)} nvidia-* packages, {size / 1e9:.1f} GB")
if torch.version.cuda is None:
    sys.exit(f"torch {torch.__version__} is a CPU build: `pip uninstall torch`, then run this script again")
if not torch.cuda.is_available():
    sys.exit("torch cannot use the GPU: check that the NVIDIA driver is new enough for CUDA " + torch.version.cuda)
for i in range(torch.cuda.device_count()):
    props = torch.cuda.get_device_properties(i)
    print(f"cuda:{i} {props.name}, {props.total_memory / 2**30:.0f} GiB")
EOF
echo "done"
