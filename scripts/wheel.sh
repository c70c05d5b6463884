#!/usr/bin/env bash
# Builds herd's wheel into target/wheels and prints its absolute path: the release binary in a wheel,
# as ruff and uv ship theirs (maturin, `bindings = "bin"`, see pyproject.toml), tagged for
# the oldest glibc it runs on, as maturin's audit of its symbols finds it. maturin is
# installed once from PyPI into a cached virtualenv.
#   HERD_MATURIN_VENV  where maturin lives (default: ~/.cache/herd/venv-maturin<ver>)
set -euo pipefail
cd "$(dirname "$0")/.."

MATURIN_VERSION=1.16.0
venv=${HERD_MATURIN_VENV:-$HOME/.cache/herd/venv-maturin$MATURIN_VERSION}

if [ ! -x "$venv/bin/maturin" ]; then
  mkdir -p "$(dirname "$venv")"
  exec 9>"$venv.lock"
  flock 9
  if [ ! -x "$venv/bin/maturin" ]; then
    echo "wheel: installing maturin $MATURIN_VERSION into $venv (once)" >&2
    rm -rf "$venv"
    "${PYTHON:-python3}" -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "maturin==$MATURIN_VERSION" >&2
  fi
  exec 9>&-
fi

out=target/wheels
rm -f "$out"/herd-*.whl
"$venv/bin/maturin" build --release --out "$out" >&2
echo "$PWD/$(ls "$out"/herd-*.whl)"
