"""Helpers for tests that run an ``examples/run_<algo>.py`` in a subprocess and judge the trace
files it leaves: a clean environment, the spans of a ``traces.jsonl`` as plain dicts, and
``spanspec live-check`` on a run's telemetry folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

__all__ = ["ROOT", "example_env", "live_check_summary", "read_trace_spans", "run_example"]


def example_env() -> dict[str, str]:
    """Returns ``os.environ`` without telemetry variables or a Ray address, so the example
    decides its telemetry from its config and starts its own Ray cluster."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("NEMO_RL_OTEL_", "NEMO_LENS_", "OTEL_", "RAY_ADDRESS"))
    }


def run_example(script: str, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """Runs ``examples/<script>`` with ``args`` in a clean env; returns the finished process."""
    return subprocess.run(
        [sys.executable, f"examples/{script}", *args],
        cwd=ROOT,
        env=example_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _value(v: dict) -> Any:
    ((kind, x),) = v.items()
    return int(x) if kind == "intValue" else x


def read_trace_spans(path: Path) -> list[dict]:
    """Returns every span of the file exporter's ``traces.jsonl`` as its OTLP JSON dict, plus
    ``attrs`` (its attributes) and ``resource`` (its process's resource attributes) as plain
    ``{key: value}`` dicts."""
    spans = []
    for line in Path(path).read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            resource = {a["key"]: _value(a["value"]) for a in rs["resource"].get("attributes", [])}
            for ss in rs["scopeSpans"]:
                for s in ss["spans"]:
                    s["attrs"] = {a["key"]: _value(a["value"]) for a in s.get("attributes", [])}
                    s["resource"] = resource
                    spans.append(s)
    return spans


def live_check_summary(folder: Path) -> dict:
    """Runs ``spanspec live-check <folder> --format json``; returns its ``summary``. Fails the
    test (assert) when the check exits non-zero."""
    script = Path(sys.executable).with_name("spanspec")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "spanspec.cli"]
    proc = subprocess.run(
        [*command, "live-check", str(folder), "--format", "json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout)["summary"]
