"""Shared helpers for the functional tests that run an ``examples/run_<algo>.py`` in a subprocess
and judge it from the trace files it leaves: run the example, read its spans, group them by step
trace, and hold the files against the registry with ``spanspec live-check``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def clean_env() -> dict[str, str]:
    """The environment without telemetry or Ray settings the caller's shell may carry."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("NEMO_RL_OTEL_", "NEMO_LENS_", "OTEL_", "RAY_ADDRESS"))
    }


def run_example(script: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Runs ``examples/<script>`` with ``args`` from the repository root; returns the process."""
    return subprocess.run(
        [sys.executable, f"examples/{script}", *args],
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _value(v: dict) -> Any:
    ((kind, x),) = v.items()
    return int(x) if kind == "intValue" else x


def read_spans(path: Path) -> list[dict]:
    """Every span of an OTLP-JSON lines file, with ``attrs`` and its process's ``resource`` as dicts."""
    spans = []
    for line in path.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            resource = {a["key"]: _value(a["value"]) for a in rs["resource"].get("attributes", [])}
            for ss in rs["scopeSpans"]:
                for s in ss["spans"]:
                    s["attrs"] = {a["key"]: _value(a["value"]) for a in s.get("attributes", [])}
                    s["resource"] = resource
                    spans.append(s)
    return spans


def ancestors(span: dict, by_id: dict[str, dict]) -> list[dict]:
    """The spans above ``span``, nearest first (``by_id``: spanId -> span of the same files)."""
    out = []
    while span.get("parentSpanId") and span["parentSpanId"] in by_id:
        span = by_id[span["parentSpanId"]]
        out.append(span)
    return out


def step_traces(spans: list[dict], step_name: str) -> list[tuple[dict, dict[str, list[dict]]]]:
    """``(step span, {span name: [spans under it]})`` for every step, in step order.

    "Under" is by parent links, so this works whether a step is the root of its own trace
    (``per_step``) or sits under the job span (``all``).
    """
    by_id = {s["spanId"]: s for s in spans}
    steps = sorted(
        (s for s in spans if s["name"] == step_name), key=lambda s: s["attrs"]["rl.iteration"]
    )
    under: dict[str, dict[str, list[dict]]] = {s["spanId"]: defaultdict(list) for s in steps}
    for s in spans:
        for a in ancestors(s, by_id):
            if a["spanId"] in under:
                assert s["traceId"] == a["traceId"], "a span under a step is in the step's trace"
                under[a["spanId"]][s["name"]].append(s)
                break
    return [(step, under[step["spanId"]]) for step in steps]


def live_check(telemetry_dir: Path) -> dict:
    """Runs ``spanspec live-check`` on a run's telemetry folder; returns its JSON summary (the
    check must exit 0)."""
    script = Path(sys.executable).with_name("spanspec")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "spanspec.cli"]
    proc = subprocess.run(
        [*command, "live-check", str(telemetry_dir), "--format", "json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout)["summary"]
