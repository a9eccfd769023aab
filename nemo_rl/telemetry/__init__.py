"""Telemetry of an RL job: the ``telemetry:`` config block, driver and worker lifecycle, metrics.

    handle = init_telemetry_driver(cfg.telemetry, RunIdentity("grpo", "tiny-llama", "runs/a"))
    ...                                                 # workers: init_telemetry_worker(rank, n, "policy")
    record_metrics({"loss": 0.3}, prefix="train")       # the logger, after its other backends
    shutdown_telemetry()                                # bounded flush, reports what was lost

``python -m nemo_rl.telemetry settings CONFIG.yaml`` prints the effective settings and where each
came from.
"""

from __future__ import annotations

from nemo_rl.telemetry.config import TelemetryConfig
from nemo_rl.telemetry.identity import RunIdentity
from nemo_rl.telemetry.lifecycle import (
    check_telemetry,
    get_telemetry,
    init_telemetry_driver,
    init_telemetry_worker,
    job_cost,
    record_metrics,
    record_token_usage,
    resolve_settings,
    shutdown_telemetry,
)

__all__ = [
    "RunIdentity",
    "TelemetryConfig",
    "check_telemetry",
    "get_telemetry",
    "init_telemetry_driver",
    "init_telemetry_worker",
    "job_cost",
    "record_metrics",
    "record_token_usage",
    "resolve_settings",
    "shutdown_telemetry",
]
