#!/usr/bin/env bash
# GPU check, prepared for a machine with an NVIDIA GPU: sets up CUDA vLLM (scripts/setup.sh
# --vllm picks it where nvidia-smi sees a GPU), runs a few GRPO steps with
# generation.backend=vllm (Ray gives the engine the GPU; bf16) and prints the step breakdown.
#
#   bash scripts/gpu_check.sh [STEPS]        (default 5; about 3 minutes after setup)
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-5}
if ! nvidia-smi -L; then
  echo "gpu_check: no NVIDIA GPU visible (nvidia-smi -L failed); this check needs one" >&2
  exit 2
fi
bash scripts/setup.sh --vllm
.venv/bin/python - <<'PY'
import torch, vllm
print(f"gpu_check: torch {torch.__version__} cuda={torch.cuda.is_available()}, vllm {vllm.__version__}")
assert torch.cuda.is_available(), "torch cannot see the GPU: setup installed a CPU build"
PY
LOG_DIR=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check_XXXX")
.venv/bin/python examples/run_grpo.py \
  generation.backend=vllm \
  grpo.max_steps="$STEPS" grpo.val_period=0 \
  checkpointing.enabled=false \
  logger.tqdm=false logger.log_dir="$LOG_DIR" \
  telemetry.exporter=file telemetry.span_groups=per_step,model_init
grep -q '"rl.vllm.generate"' "$LOG_DIR/telemetry/traces.jsonl" \
  && echo "gpu_check: ok, rl.vllm.generate traced ($LOG_DIR/telemetry/traces.jsonl)"
