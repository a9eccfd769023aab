#!/usr/bin/env bash
# GPU check, prepared for a machine with NVIDIA GPUs: sets up CUDA vLLM (scripts/setup.sh
# --vllm picks it where nvidia-smi sees a GPU), then runs a few GRPO steps with the policy and
# the generation groups over every GPU present: one policy rank and one vLLM engine per GPU,
# sharing it (half a GPU each in Ray's accounting), the policy ranks averaging gradients over
# NCCL; it prints the step breakdown with the slowest rank of each worker row.
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
GPUS=$(nvidia-smi -L | grep -c '^GPU')
LOG_DIR=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check_XXXX")
.venv/bin/python examples/run_grpo.py \
  generation.backend=vllm \
  policy.num_workers="$GPUS" generation.num_workers="$GPUS" \
  cluster.worker_num_gpus=0.5 cluster.num_cpus=$((4 * GPUS)) cluster.worker_num_cpus=1 \
  grpo.num_prompts_per_step=$((8 * GPUS)) policy.train_global_batch_size=$((16 * GPUS)) \
  grpo.max_steps="$STEPS" grpo.val_period=0 \
  checkpointing.enabled=false \
  logger.tqdm=false logger.log_dir="$LOG_DIR" \
  telemetry.exporter=file telemetry.span_groups=per_step,model_init \
  telemetry.export_strategy=all_ranks
TRACES="$LOG_DIR/telemetry/traces.jsonl"
grep -q '"rl.vllm.generate"' "$TRACES" \
  && echo "gpu_check: ok, rl.vllm.generate traced ($TRACES)"
if [ "$GPUS" -gt 1 ]; then
  grep -q '"rl.worker.allreduce"' "$TRACES" \
    && echo "gpu_check: ok, $GPUS policy ranks averaged gradients (rl.worker.allreduce traced)"
fi
