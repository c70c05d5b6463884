#!/usr/bin/env bash
# Creates (once) the Python virtualenv with torch and deepspeed that the demo and the
# end-to-end tests run, cached outside the repo, and prints its path. Jobs that use
# deepspeed should export TORCH_EXTENSIONS_DIR=<venv>/torch_extensions.
#   HERD_VENV   where it lives (default: ~/.cache/herd/venv-torch<ver>-ds<ver>)
set -euo pipefail

TORCH_VERSION=2.15.0
DEEPSPEED_VERSION=0.19.8
NUMPY_VERSION=2.4.6
PYSPY_VERSION=0.4.3
venv=${HERD_VENV:-$HOME/.cache/herd/venv-torch$TORCH_VERSION-ds$DEEPSPEED_VERSION}

# DeepSpeed JIT-compiles a C++ op on the CPU the first time a process group starts (about
# 100 s on 2 cores); build it once, here, where jobs find it through TORCH_EXTENSIONS_DIR.
build_extensions() {
  if [ ! -f "$venv/torch_extensions/.herd-built" ]; then
    echo "torch-venv: building DeepSpeed's CPU communication op (once)" >&2
    PATH="$venv/bin:$PATH" TORCH_EXTENSIONS_DIR="$venv/torch_extensions" "$venv/bin/python" -c \
      'from deepspeed.comm.torch import build_shm_op; build_shm_op()' >&2
    touch "$venv/torch_extensions/.herd-built"
  fi
}

# py-spy, for every rank's stack when a job hangs; added to a venv cached before it was.
add_pyspy() {
  if [ ! -x "$venv/bin/py-spy" ]; then
    echo "torch-venv: adding py-spy $PYSPY_VERSION" >&2
    "$venv/bin/pip" install --quiet --disable-pip-version-check "py-spy==$PYSPY_VERSION" >&2
  fi
}

if [ -f "$venv/.herd-complete" ] && [ -f "$venv/torch_extensions/.herd-built" ] && [ -x "$venv/bin/py-spy" ]; then
  echo "$venv"
  exit 0
fi

mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if [ ! -f "$venv/.herd-complete" ]; then
  python=${PYTHON:-python3}
  if ! "$python" -m venv --help >/dev/null 2>&1; then
    echo "torch-venv: $python has no venv module; on Debian: apt-get install python3-venv" >&2
    exit 1
  fi
  echo "torch-venv: creating $venv (torch $TORCH_VERSION, deepspeed $DEEPSPEED_VERSION; a few GB, once)" >&2
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "torch==$TORCH_VERSION" "numpy==$NUMPY_VERSION" >&2
  # deepspeed's setup.py imports torch, so it builds against the torch installed above.
  DS_BUILD_OPS=0 "$venv/bin/pip" install --quiet --disable-pip-version-check --no-build-isolation \
    "deepspeed==$DEEPSPEED_VERSION" >&2
  "$venv/bin/python" -c 'import torch, deepspeed, torch.distributed as d; assert d.is_gloo_available()' >&2
  touch "$venv/.herd-complete"
fi
build_extensions
add_pyspy
echo "$venv"
