"""Metrics to a JSONL file and the console, then to whatever sinks the caller adds (the loops add
the telemetry tee, :func:`nemo_rl.telemetry.record_metrics`)."""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict
from tqdm import tqdm

__all__ = ["Logger", "LoggerConfig", "MetricsSink"]

MetricsSink = Callable[[Mapping[str, Any], str], Any]
"""Called with each ``log`` call's metrics and prefix, after the file."""


class LoggerConfig(BaseModel):
    """Where metrics go."""

    model_config = ConfigDict(extra="forbid")

    log_dir: str = "runs/grpo_tiny"
    """Run folder: metrics.jsonl, checkpoints and (by default) the telemetry files live here."""
    tqdm: bool = True
    """Show a progress bar with step, reward, loss and step time."""


class Logger:
    """Writes ``{"step": n, "<prefix>/<key>": value, ...}`` lines to ``<log_dir>/metrics.jsonl``.

    After the file, every ``log`` call hands the same metrics to each of ``sinks`` (the loops
    pass ``nemo_rl.telemetry.record_metrics``, which maps logger keys to the registry's metrics).
    """

    def __init__(
        self,
        cfg: LoggerConfig,
        total_steps: int,
        initial_step: int = 0,
        desc: str = "train",
        sinks: Sequence[MetricsSink] = (),
    ) -> None:
        self._sinks = tuple(sinks)
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


def _plain(value: Any) -> Any:
    # JSON has no NaN; a float that is not finite is written as null.
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
