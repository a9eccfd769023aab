#!/usr/bin/env bash
# Set up, then run the main job: a short GRPO run on a tiny model with telemetry to the embedded
# file backend. Prints progress, where the step time went, and where the trace files are.
# Extra args are config overrides, e.g. `grpo.max_steps=10 telemetry.span_groups=all`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python examples/run_grpo.py "$@"
