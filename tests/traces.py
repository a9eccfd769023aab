"""Helpers for tests that run an example in a subprocess and judge the files it leaves: the
OTLP-JSON trace file and the ``spanspec live-check`` verdict on the run's telemetry folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def attribute_value(v: dict) -> Any:
    """Returns the Python value of one OTLP-JSON ``AnyValue``."""
    ((kind, x),) = v.items()
    return int(x) if kind == "intValue" else x


def attributes(items: list[dict]) -> dict[str, Any]:
    """Returns an OTLP-JSON ``attributes`` list as a plain dict."""
    return {a["key"]: attribute_value(a["value"]) for a in items}


def read_spans(path: Path) -> list[dict]:
    """Returns every span of an OTLP-JSON lines file, each with ``attrs`` (its attributes) and
    ``resource`` (its process's resource attributes) as plain dicts."""
    spans = []
    for line in path.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            resource = attributes(rs["resource"].get("attributes", []))
            for ss in rs["scopeSpans"]:
                for s in ss["spans"]:
                    s["attrs"], s["resource"] = attributes(s.get("attributes", [])), resource
                    spans.append(s)
    return spans


def metric_points(path: Path) -> dict[str, list[dict]]:
    """Returns every data point of an OTLP-JSON metrics lines file by metric name, each with
    ``attrs`` (its attributes) and ``resource`` (its process's resource attributes) as plain
    dicts."""
    points: dict[str, list[dict]] = defaultdict(list)
    for line in path.read_text().splitlines():
        for rm in json.loads(line).get("resourceMetrics", []):
            resource = attributes(rm["resource"].get("attributes", []))
            for sm in rm.get("scopeMetrics", []):
                for m in sm.get("metrics", []):
                    kind = next(k for k in ("histogram", "sum", "gauge") if k in m)
                    for point in m[kind]["dataPoints"]:
                        points[m["name"]].append(
                            {
                                **point,
                                "attrs": attributes(point.get("attributes", [])),
                                "resource": resource,
                            }
                        )
    return points


def clean_env(**extra: str) -> dict[str, str]:
    """Returns this process's environment without telemetry, Ray address or vLLM settings, so an
    example run reads only its config and overrides, plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("NEMO_RL_OTEL_", "NEMO_LENS_", "OTEL_", "RAY_ADDRESS", "VLLM_"))
    }
    return {**env, **extra}


def run_example(
    script: str, *args: str, timeout: float = 300, check: bool = True
) -> subprocess.CompletedProcess:
    """Runs ``examples/<script>`` with ``args`` from the repo root; with ``check`` (the default)
    asserts it exits 0."""
    cmd = [sys.executable, f"examples/{script}", *args]
    proc = subprocess.run(
        cmd, cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=timeout
    )
    if check:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc


def spanspec_cli(*args: str, timeout: int = 60) -> subprocess.CompletedProcess:
    """Runs the installed ``spanspec`` command with ``args`` from the repo root; returns it."""
    script = Path(sys.executable).with_name("spanspec")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "spanspec.cli"]
    return subprocess.run(
        [*command, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def live_check(telemetry_dir: Path) -> dict:
    """Runs ``spanspec live-check <telemetry_dir> --format json``; asserts it passes and returns
    its summary."""
    proc = spanspec_cli("live-check", str(telemetry_dir), "--format", "json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads(proc.stdout)["summary"]
    assert summary["ok"] and summary["violations"] == 0
    assert summary["spans_checked"] == summary["spans"] > 0
    return summary


def step_traces(spans: list[dict], step_name: str) -> list[tuple[dict, dict[str, list[dict]]]]:
    """Returns each ``step_name`` span in iteration order with its trace's spans by name."""
    steps = sorted(
        (s for s in spans if s["name"] == step_name), key=lambda s: s["attrs"]["rl.iteration"]
    )
    out = []
    for step in steps:
        names: dict[str, list[dict]] = defaultdict(list)
        for s in spans:
            if s["traceId"] == step["traceId"]:
                names[s["name"]].append(s)
        out.append((step, names))
    return out


def ancestors(span: dict, by_id: dict[str, dict]) -> list[dict]:
    """The spans above ``span``, nearest first (``by_id``: spanId -> span of the same files)."""
    out = []
    while span.get("parentSpanId") and span["parentSpanId"] in by_id:
        span = by_id[span["parentSpanId"]]
        out.append(span)
    return out


def step_subtrees(spans: list[dict], step_name: str) -> list[tuple[dict, dict[str, list[dict]]]]:
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
