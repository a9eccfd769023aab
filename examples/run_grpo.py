"""Run GRPO on the tiny arithmetic task, traced, then print where the step time went.

    python examples/run_grpo.py [--config examples/configs/grpo_tiny.yaml] [key=value ...]

Overrides are dotted keys: ``grpo.max_steps=20 telemetry.span_groups=all``.
"""

from __future__ import annotations

import os
import sys

from nemo_rl.algorithms import grpo
from nemo_rl.entrypoint import Loop, run_loop

LOOP = Loop(
    "grpo",
    grpo.MasterConfig,
    grpo.run,
    os.path.join(os.path.dirname(__file__), "configs", "grpo_tiny.yaml"),
)


def main(argv: list[str] | None = None) -> int:
    """Runs the job; returns the process exit code (2 for bad input)."""
    return run_loop(LOOP, argv, doc=__doc__)


if __name__ == "__main__":
    sys.exit(main())
