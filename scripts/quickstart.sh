#!/usr/bin/env bash
# Set up, then run the main job: a short GRPO run on a tiny model with telemetry to the embedded
# file backend. Prints progress, where the step time went, and where the trace files are.
# Extra args are config overrides, e.g. `grpo.max_steps=10 telemetry.span_groups=all`.
# Each run gets its own folder under runs/, so a second run starts afresh instead of resuming
# from the first one's final checkpoint (pass logger.log_dir=... to choose, and to resume).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python examples/run_grpo.py "logger.log_dir=runs/quickstart_$(date -u +%Y%m%d_%H%M%S)" "$@"
