"""Every test here starts with no telemetry variables and no telemetry running, and ends the same."""

from __future__ import annotations

import os

import pytest

import spanspec
from nemo_rl import telemetry
from spanspec import metrics


@pytest.fixture
def saved_environ():
    """Put os.environ back as it was, after monkeypatch has undone its own changes.

    The driver writes NEMO_RL_OTEL_* and OTEL_RESOURCE_ATTRIBUTES straight into os.environ (for
    its workers), which monkeypatch does not track; a test that then deletes them through
    monkeypatch would even have them re-created at teardown.
    """
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(autouse=True)
def clean_env(saved_environ, monkeypatch, tmp_path):
    for key in list(os.environ):
        if key.startswith(("NEMO_RL_OTEL_", "NEMO_LENS_", "OTEL_", "SLURM_")):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)  # default run folders land in the test's own directory
    yield monkeypatch
    telemetry.shutdown_telemetry(2)
    spanspec.deactivate()
    metrics.unbind()
