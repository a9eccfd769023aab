"""Run PPO (policy + value model) on the tiny arithmetic task, traced, then print where the step time went.

    python examples/run_ppo.py [--config examples/configs/ppo_tiny.yaml] [key=value ...]

Overrides are dotted keys: ``ppo.max_steps=20 telemetry.span_groups=all``.
"""

from __future__ import annotations

import os
import sys

from nemo_rl.algorithms import ppo
from nemo_rl.entrypoint import Loop, run_loop

LOOP = Loop(
    "ppo",
    ppo.MasterConfig,
    ppo.run,
    os.path.join(os.path.dirname(__file__), "configs", "ppo_tiny.yaml"),
)


def main(argv: list[str] | None = None) -> int:
    """Runs the job; returns the process exit code (2 for bad input)."""
    return run_loop(LOOP, argv, doc=__doc__)


if __name__ == "__main__":
    sys.exit(main())
