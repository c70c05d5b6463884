#!/usr/bin/env bash
# The quickest real run: a 2-node x 2-process torchrun all-reduce (gloo, CPU) on this
# machine, launched by herd. Creates the cached torch virtualenv first if needed.
set -euo pipefail
cd "$(dirname "$0")/.."
HERD_VENV=$(./scripts/torch-venv.sh)
export HERD_VENV
cargo build --release --quiet
exec ./target/release/herd run -c examples/local.toml "$@"
