"""TRL SFT on a tiny local model, traced with nemo_rl's telemetry (``examples/trl/dpo.py``'s
script on the right answers of its sums).

    python scripts/make_tiny_hf.py                  # runs/tiny_hf/tiny-math-llama, once
    NEMO_RL_OTEL_SPAN_GROUPS=all python examples/trl/sft.py --output-dir runs/trl_sft
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from dpo import main  # the script's own folder, as python adds it

if __name__ == "__main__":
    sys.exit(main("sft"))
