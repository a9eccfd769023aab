"""A TRL reward model (RewardTrainer) on a tiny local model, traced with nemo_rl's telemetry
(``examples/trl/dpo.py``'s script on its pairs, as whole texts).

    python scripts/make_tiny_hf.py                  # runs/tiny_hf/tiny-math-llama, once
    NEMO_RL_OTEL_SPAN_GROUPS=all python examples/trl/rm.py --output-dir runs/trl_rm
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from dpo import main  # the script's own folder, as python adds it

if __name__ == "__main__":
    sys.exit(main("rm"))
