"""Run async GRPO on the tiny arithmetic task, traced, then print where the trainer's step time
went, what the collector did, and how much of its sampling overlapped training.

    python examples/run_async_grpo.py [--config examples/configs/async_grpo_tiny.yaml] [key=value ...]

Overrides are dotted keys: ``async_grpo.max_steps=20 telemetry.span_groups=all``.
"""

from __future__ import annotations

import os
import sys

from nemo_rl.algorithms import async_grpo
from nemo_rl.entrypoint import Loop, run_loop
from nemo_rl.telemetry.breakdown import CollectorFold

LOOP = Loop(
    "async_grpo",
    async_grpo.MasterConfig,
    async_grpo.run,
    os.path.join(os.path.dirname(__file__), "configs", "async_grpo_tiny.yaml"),
    report=CollectorFold,
)


def main(argv: list[str] | None = None) -> int:
    """Runs the job; returns the process exit code (2 for bad input)."""
    return run_loop(LOOP, argv, doc=__doc__)


if __name__ == "__main__":
    sys.exit(main())
