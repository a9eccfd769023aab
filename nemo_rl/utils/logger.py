"""Metrics to a JSONL file and the console, then to whatever sinks the caller adds (the loops add
the telemetry tee, :func:`nemo_rl.telemetry.record_metrics`)."""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, model_validator
from tqdm import tqdm

from nemo_rl.utils import logger_backends
from nemo_rl.utils.logger_backends import Backends

__all__ = [
    "Logger",
    "LoggerConfig",
    "MetricsSink",
    "MlflowConfig",
    "TensorBoardConfig",
    "WandbConfig",
]

MetricsSink = Callable[[Mapping[str, Any], str], Any]
"""Called with each ``log`` call's metrics and prefix, after the file."""


class _Backend(BaseModel):
    """One optional place the scalars also go; checked with the config, before anything starts."""

    model_config = ConfigDict(extra="forbid")
    enabled: bool = False
    """Write the logger's scalars here too (needs the backend's extra installed)."""

    section: ClassVar[str] = ""

    @model_validator(mode="after")
    def _can_start(self) -> _Backend:
        found = logger_backends.problem(self.section, self)
        if found:
            raise ValueError(found)
        return self


class TensorBoardConfig(_Backend):
    """TensorBoard event files (``pip install 'nemo-rl-otel[tensorboard]'``)."""

    section: ClassVar[str] = "tensorboard"

    log_dir: str | None = None
    """Where the event files go; default ``<logger.log_dir>/tensorboard``."""


class MlflowConfig(_Backend):
    """An MLflow run (``pip install 'nemo-rl-otel[mlflow]'``): params and metrics."""

    section: ClassVar[str] = "mlflow"

    tracking_uri: str | None = None
    """``file:///abs/mlruns``, ``sqlite:///x.db`` or ``http://host:5000``; default
    ``$MLFLOW_TRACKING_URI``, else ``<logger.log_dir>/mlruns``."""
    experiment: str = "nemo-rl"
    """The experiment the run goes in (made when missing)."""
    run_name: str | None = None
    """The run's name; default MLflow's."""


class WandbConfig(_Backend):
    """A Weights & Biases run (``pip install 'nemo-rl-otel[wandb]'``)."""

    section: ClassVar[str] = "wandb"

    project: str = "nemo-rl"
    """The W&B project."""
    mode: Literal["offline", "online", "disabled"] = "offline"
    """``offline`` writes ``<logger.log_dir>/wandb`` and needs no network (``wandb sync`` later)."""


class LoggerConfig(BaseModel):
    """Where metrics go."""

    model_config = ConfigDict(extra="forbid")

    log_dir: str = "runs/grpo_tiny"
    """Run folder: metrics.jsonl, checkpoints and (by default) the telemetry files live here."""
    tqdm: bool = True
    """Show a progress bar with step, reward, loss and step time."""
    tensorboard: TensorBoardConfig = TensorBoardConfig()
    """TensorBoard event files: ``logger.tensorboard.enabled=true``."""
    mlflow: MlflowConfig = MlflowConfig()
    """An MLflow run: ``logger.mlflow.enabled=true``."""
    wandb: WandbConfig = WandbConfig()
    """A W&B run: ``logger.wandb.enabled=true``."""


class Logger:
    """Writes ``{"step": n, "<prefix>/<key>": value, ...}`` lines to ``<log_dir>/metrics.jsonl``.

    After the file, every ``log`` call writes the same scalars at the same step to ``backends``
    (default: this process's started TensorBoard, MLflow and W&B backends, see
    :mod:`nemo_rl.utils.logger_backends`) and hands them to each of ``sinks`` (the loops pass
    ``nemo_rl.telemetry.record_metrics``, which maps logger keys to the registry's metrics).
    """

    def __init__(
        self,
        cfg: LoggerConfig,
        total_steps: int,
        initial_step: int = 0,
        desc: str = "train",
        sinks: Sequence[MetricsSink] = (),
        backends: Backends | None = None,
    ) -> None:
        self._sinks = tuple(sinks)
        self._backends = backends if backends is not None else logger_backends.active()
        os.makedirs(cfg.log_dir, exist_ok=True)
        self.path = os.path.join(cfg.log_dir, "metrics.jsonl")
        self._file = open(self.path, "a", encoding="utf-8")
        self._bar = (
            tqdm(
                total=total_steps,
                initial=initial_step,
                desc=desc,
                file=sys.stderr,
                dynamic_ncols=True,
            )
            if cfg.tqdm
            else None
        )
        self._step_shown = initial_step

    def log(self, metrics: Mapping[str, Any], step: int, prefix: str) -> None:
        """Records ``metrics`` (scalars) for ``step`` under ``prefix`` (``train``, ``timing``, ...)."""
        row = {"step": step, **{f"{prefix}/{k}": _plain(v) for k, v in metrics.items()}}
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()
        self._backends.log(metrics, step, prefix)
        for sink in self._sinks:
            sink(metrics, prefix)

    def progress(self, step: int, reward: float | None, loss: float, step_time: float) -> None:
        """Moves the progress bar to ``step`` and shows the step's reward (None: a loop without
        rewards, such as SFT), loss and time."""
        if self._bar is None:
            return
        self._bar.update(step - self._step_shown)
        self._step_shown = step
        shown = {} if reward is None else {"reward": f"{reward:.3f}"}
        self._bar.set_postfix(**shown, loss=f"{loss:.4f}", step_s=f"{step_time:.2f}")

    def print(self, message: str) -> None:
        """Prints a line without breaking the progress bar."""
        if self._bar is None:
            print(message, flush=True)
        else:
            self._bar.write(message)

    def close(self) -> None:
        """Closes the progress bar and the metrics file."""
        if self._bar is not None:
            self._bar.close()
        self._file.close()
        self._backends.flush()


def _plain(value: Any) -> Any:
    # JSON has no NaN; a float that is not finite is written as null.
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
