#!/usr/bin/env bash
# Set up, then run the whole test suite (lint, registry checks, pytest). Extra args go to pytest.
#
# As root, pytest runs in a fresh network namespace with only loopback up, so every server the
# tests start (OTLP receivers, the collector, Ray) can listen on 127.0.0.1 and nowhere else.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
ruff check .
ruff format --check .
spanspec check schemas/span_groups.yaml examples/configs --code spanspec --code nemo_rl --code examples --require-used 'rl.grpo.*' --require-used 'rl.ppo.*' --require-used 'rl.distillation.*'
if [ "$(id -u)" = 0 ] && unshare -n true 2>/dev/null; then
  exec unshare -n bash -c 'ip link set lo up && exec python -m pytest "$@"' pytest "$@"
fi
echo "test: not root (or no unshare): running without a loopback-only network namespace" >&2
exec python -m pytest "$@"
