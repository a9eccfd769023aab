"""Every test here starts with no telemetry variables and no telemetry running, and ends the same."""

from __future__ import annotations

import os

import pytest

import spanspec
from nemo_rl import telemetry
from spanspec import metrics


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    for key in list(os.environ):
        if key.startswith(("NEMO_RL_OTEL_", "NEMO_LENS_", "OTEL_", "SLURM_")):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)  # default run folders land in the test's own directory
    yield monkeypatch
    telemetry.shutdown_telemetry(2)
    spanspec.deactivate()
    metrics.unbind()
