"""nemo_rl's telemetry in a Hugging Face TRL run: the same registry spans and metrics.

    trainer = GRPOTrainer(..., callbacks=[TelemetryCallback()])   # the one code change
    python -m nemo_rl.integrations.trl.run train.py ARGS...       # or none: the launcher

The phases of TRL's trainers get the names nemo_rl's own loops use (``rl.grpo.step``,
``rl.grpo.rollout`` > ``rl.grpo.generation``, ...), so ``spanspec diff`` compares a TRL run with
a nemo_rl run; see docs/observability/trl.md.
"""

from __future__ import annotations

from nemo_rl.integrations.trl.callback import TelemetryCallback

__all__ = ["TelemetryCallback"]
