"""The stall watchdog: a span that outlives its registry's max_duration is reported once, with stacks."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import spanspec
from spanspec import export, metrics, watchdog
from spanspec.findings import SpecError
from spanspec.settings import load_settings
from spanspec.spec import REDACTED
from spanspec.testing import capture

REGISTRY = """\
version: 1
groups:
  work: {description: Work., bucket: productive}
attributes:
  demo.size: {type: int, brief: Items.}
  demo.secret: {type: string, brief: A secret., sensitive: true}
spans:
  - name: demo.outer
    group: work
    brief: The outer span (no bound).
  - name: demo.phase
    group: work
    brief: A phase that waits on a worker.
    max_duration: 1s
    attributes: {demo.size: recommended, demo.secret: opt_in}
"""


@pytest.fixture
def registry(tmp_path: Path) -> Path:
    path = tmp_path / "registry.yaml"
    path.write_text(REGISTRY)
    return path


@pytest.fixture(autouse=True)
def no_watchdog_left():
    yield
    watchdog.disable()
    spanspec.deactivate()
    metrics.unbind()


def wait_for_the_worker(seconds: float) -> None:
    """A stand-in for a driver blocked on a stopped worker (what the stack must show)."""
    time.sleep(seconds)


def test_a_span_over_its_bound_warns_once_with_attributes_calls_spans_and_stack(registry, caplog):
    stalls: list[watchdog.Stall] = []
    undo = watchdog.on_stall(stalls.append)
    caplog.set_level(logging.WARNING, logger="spanspec.watchdog")
    watchdog.enable({"rank": 3, "group": "policy"})
    try:
        with capture(registry) as spans:
            with spanspec.span("demo.outer"):
                with spanspec.span("demo.phase", **{"demo.size": 4, "demo.secret": "hunter2"}):
                    watchdog.note_call("Worker.train (actor ab12, pid 4711)", lambda: True)
                    watchdog.note_call("Worker.ready", lambda: False)  # answered: not listed
                    wait_for_the_worker(3.0)
            phase = spans.one("demo.phase")
    finally:
        undo()

    records = [r for r in caplog.records if r.name == "spanspec.watchdog"]
    assert len(records) == 1, [r.getMessage() for r in records]  # 3 s open, one warning
    text = records[0].getMessage()
    first = text.splitlines()[0]
    assert "span 'demo.phase' has been open" in first
    assert "longer than its max_duration 1s" in first
    assert f"pid {os.getpid()}" in first and "rank 3" in first and "group policy" in first
    assert "demo.size=4" in text and "demo.secret='[REDACTED]'" in text and "hunter2" not in text
    assert "waiting for: Worker.train (actor ab12, pid 4711), called" in text
    assert "Worker.ready" not in text
    assert "demo.phase" in text.split("open spans in this process:")[1]
    assert "<- stalled" in text
    assert "in wait_for_the_worker" in text and "time.sleep(seconds)" in text
    (stall,) = stalls
    assert 1.0 < stall.open_s < 1.5  # within a tenth of the bound (its poll), not at the end
    assert stall.name == "demo.phase" and stall.max_duration_s == 1.0
    assert stall.labels == {"rank": 3, "group": "policy"} and stall.pid == os.getpid()
    assert stall.attributes["demo.secret"] == REDACTED
    (event,) = phase.events
    assert event.name == watchdog.STALL_EVENT
    assert event.attributes["spanspec.stall.max_duration_s"] == 1.0
    assert event.attributes["spanspec.stall.open_s"] > 1.0
    assert event.attributes["spanspec.stall.waiting_for"][0].startswith("Worker.train")


def test_spans_without_a_bound_start_no_thread(registry):
    watchdog.enable()
    with capture(registry):
        for _ in range(100):
            with spanspec.span("demo.outer"):
                pass
        assert not watchdog.is_running()
        with spanspec.span("demo.phase"):
            assert watchdog.is_running()
    watchdog.disable()
    assert not watchdog.is_running()


def test_when_off_nothing_is_watched(registry, caplog):
    with capture(registry):  # watchdog not enabled: export.setup enables it only when asked
        with spanspec.span("demo.phase"):
            watchdog.note_call("Worker.train")
        assert not watchdog.is_running()


def test_the_watchdog_setting_switches_it(tmp_path, monkeypatch):
    assert load_settings(env={}).watchdog is True
    rl = {"prefix": "NEMO_RL_OTEL_"}
    assert load_settings(env={"NEMO_RL_OTEL_WATCHDOG": "false"}, **rl).watchdog is False
    for value, expected in (("true", True), ("false", False)):
        settings = load_settings(
            {"file_dir": str(tmp_path)}, env={"NEMO_RL_OTEL_WATCHDOG": value}, **rl
        )
        handle = export.setup(settings, register_atexit=False)
        assert watchdog.is_enabled() is expected
        handle.shutdown(5)
        assert not watchdog.is_enabled()


def test_max_duration_compiles_to_seconds(registry):
    spec = spanspec.load(registry)
    assert spec.spans["demo.phase"].max_duration_s == 1.0
    assert spec.spans["demo.outer"].max_duration_s is None
    shipped = spanspec.load()
    assert shipped.spans["rl.grpo.generation"].max_duration_s == 600.0
    assert shipped.spans["rl.grpo.checkpoint"].max_duration_s == 1800.0


def test_a_bad_unit_is_one_finding_at_its_line(registry, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(REGISTRY.replace("max_duration: 1s", "max_duration: 10 minutes"))
    with pytest.raises(SpecError) as info:
        spanspec.load(bad)
    (finding,) = info.value.findings
    assert (finding.line, finding.col) == (14, 19)
    result = subprocess.run(
        [sys.executable, "-m", "spanspec.cli", "check", str(bad)],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert (
        f"{bad}:14:19: violation: schema.value_error: spans.1.max_duration: expected a positive "
        "duration with a unit s, m or h (e.g. 30s, 10m, 2h), got '10 minutes'"
    ) in result.stdout + result.stderr


def test_the_exporter_lists_every_open_span_of_the_process(registry, tmp_path, caplog):
    """Through the real pipeline: the warning's span tree comes from the exporter's open spans,
    and the event reaches traces.jsonl."""
    caplog.set_level(logging.WARNING, logger="spanspec.watchdog")
    spec = spanspec.load(registry)
    handle = export.setup(
        load_settings({"file_dir": str(tmp_path), "metrics_enabled": False}, env={}),
        rank=1,
        worker_group="driver",
        exporting=True,
        register_atexit=False,
    )
    spanspec.activate(spec, "all", tracer_provider=handle.tracer_provider, env_var=None)
    with spanspec.span("demo.outer"):
        with spanspec.span("demo.phase"):
            time.sleep(1.6)
    handle.shutdown(5)
    (record,) = [r for r in caplog.records if r.name == "spanspec.watchdog"]
    tree = record.getMessage().split("open spans in this process:\n")[1].splitlines()
    assert tree[0].strip().startswith("demo.outer")
    assert tree[1].startswith("      demo.phase") and tree[1].endswith("<- stalled")
    lines = (tmp_path / "traces.jsonl").read_text().splitlines()
    spans = [s for line in lines for rs in json.loads(line)["resourceSpans"]
             for ss in rs["scopeSpans"] for s in ss["spans"]]  # fmt: skip
    (phase,) = [s for s in spans if s["name"] == "demo.phase"]
    assert [e["name"] for e in phase["events"]] == ["spanspec.stall"]
