"""On-policy distillation on the tiny arithmetic task, traced: a small student learns from a
larger teacher's next-token distributions on its own samples; then the step-time breakdown.

    python examples/run_distillation.py [--config examples/configs/distillation_tiny.yaml] [key=value ...]

Without ``teacher.checkpoint`` the teacher is trained first, by GRPO, as a job of its own
(``examples/run_grpo.py`` in a subprocess, with its own traces under ``<log_dir>/teacher``); a
later run in the same ``logger.log_dir`` reuses it. Overrides are dotted keys:
``distillation.max_steps=20 teacher.checkpoint=runs/grpo_tiny/checkpoints/step_150``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import yaml

from nemo_rl.algorithms import distillation
from nemo_rl.algorithms.common import RunResult
from nemo_rl.entrypoint import Loop, run_loop
from nemo_rl.models.pretrained import is_builtin
from nemo_rl.utils.config import ConfigError

HERE = os.path.dirname(os.path.abspath(__file__))
# The caller's environment, before this job's telemetry adds its NEMO_RL_OTEL_* settings: the
# teacher's job starts from it, so it gets a run id and trace files of its own.
USER_ENV = dict(os.environ)


def train_teacher(cfg: distillation.MasterConfig) -> str:
    """Trains the teacher with GRPO as a job of its own (unless an earlier run did); returns the
    checkpoint folder it left. Raises ``ConfigError`` if that job fails."""
    grpo_cfg, final = distillation.teacher_training_config(cfg)
    if os.path.isdir(final):
        print(f"teacher: no teacher.checkpoint given; reusing the one trained before: {final}")
        return final
    os.makedirs(grpo_cfg.logger.log_dir, exist_ok=True)
    config = os.path.join(grpo_cfg.logger.log_dir, "grpo_teacher.yaml")
    with open(config, "w", encoding="utf-8") as f:
        yaml.safe_dump(grpo_cfg.model_dump(mode="json"), f, sort_keys=False)
    command = [sys.executable, os.path.join(HERE, "run_grpo.py"), "--config", config]
    print(
        f"teacher: no teacher.checkpoint given, so GRPO trains the teacher first "
        f"({grpo_cfg.grpo.max_steps} steps, a job of its own): {' '.join(command[1:])}",
        flush=True,
    )
    done = subprocess.run(command, env=USER_ENV)
    if done.returncode != 0:
        raise ConfigError(
            [
                f"teacher.checkpoint: not given, and training the teacher failed (exit "
                f"{done.returncode}, output above); give a trained teacher's checkpoint"
            ]
        )
    print(f"teacher: trained; distilling from {final}", flush=True)
    return final


def run(cfg: distillation.MasterConfig, job_attributes: dict[str, Any]) -> RunResult:
    """Trains the tiny-LM teacher first when no checkpoint is given (a model folder teaches as it
    is), then runs the distillation job."""
    if not cfg.teacher.checkpoint and is_builtin(cfg.teacher.model_name):
        teacher = {**cfg.teacher.model_dump(), "checkpoint": train_teacher(cfg)}
        cfg = cfg.model_copy(update={"teacher": distillation.TeacherConfig(**teacher)})
    return distillation.run(cfg, job_attributes)


LOOP = Loop(
    "distillation",
    distillation.MasterConfig,
    run,
    os.path.join(HERE, "configs", "distillation_tiny.yaml"),
)


def main(argv: list[str] | None = None) -> int:
    """Runs the job; returns the process exit code (2 for bad input)."""
    return run_loop(LOOP, argv, doc=__doc__)


if __name__ == "__main__":
    sys.exit(main())
