"""Run reward-model training on the tiny arithmetic task, traced, then print where the step time went.

    python examples/run_rm.py [--config examples/configs/rm_tiny.yaml] [key=value ...]

Overrides are dotted keys: ``rm.max_steps=20 telemetry.span_groups=all``.
"""

from __future__ import annotations

import os
import sys

from nemo_rl.algorithms import rm
from nemo_rl.entrypoint import Loop, run_loop

LOOP = Loop(
    "rm",
    rm.MasterConfig,
    rm.run,
    os.path.join(os.path.dirname(__file__), "configs", "rm_tiny.yaml"),
)


def main(argv: list[str] | None = None) -> int:
    """Runs the job; returns the process exit code (2 for bad input)."""
    return run_loop(LOOP, argv, doc=__doc__)


if __name__ == "__main__":
    sys.exit(main())
