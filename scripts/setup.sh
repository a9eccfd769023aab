#!/usr/bin/env bash
# Create .venv and install the project with everything it needs (idempotent; safe to re-run).
#
# torch is installed first and pinned: where no NVIDIA GPU is visible we ask for the CPU build,
# because an unpinned torch pulls a multi-GB CUDA build that a CPU machine cannot use.
#   TORCH_SPEC        what to ask pip for (default torch==2.13.0)
#   TORCH_INDEX_URL   an extra index holding CPU wheels, if this machine's pip has none on disk
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
"$PYTHON" -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is needed"'
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PIP=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)

TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
if ! .venv/bin/python -c 'import torch' 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    "${PIP[@]}" "$TORCH_SPEC"
  else
    "${PIP[@]}" ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} "$TORCH_SPEC"
    if .venv/bin/python -c 'import sys, torch; sys.exit(torch.version.cuda is None)'; then
      echo "setup: warning: no GPU here, but pip installed a CUDA build of torch;" \
           "set TORCH_INDEX_URL to an index with CPU wheels and re-run" >&2
    fi
  fi
fi
"${PIP[@]}" -e ".[otel,rl,dev]"
echo "setup: ready (.venv, torch $(.venv/bin/python -c 'import torch; print(torch.__version__)'))"
