"""The job's side of the watchdog (``rl.stalls``) and of the telemetry cost line, on the real SDK."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import spanspec
from nemo_rl import telemetry
from spanspec.export import TelemetryCost

GRPO = telemetry.RunIdentity("grpo")
REGISTRY = Path(__file__).resolve().parents[4] / "schemas" / "span_groups.yaml"


def bounded_spec(tmp_path: Path, bound: str = "1s") -> spanspec.Spec:
    """The shipped registry with ``rl.{algorithm}.generation`` bounded to ``bound``."""
    text = REGISTRY.read_text().replace("max_duration: 10m", f"max_duration: {bound}", 1)
    path = tmp_path / "registry.yaml"
    path.write_text(text)
    return spanspec.load(path)


def file_spans(folder: Path) -> list[dict]:
    return [
        s
        for line in (folder / "traces.jsonl").read_text().splitlines()
        for rs in json.loads(line)["resourceSpans"]
        for ss in rs["scopeSpans"]
        for s in ss["spans"]
    ]


def stall_points(folder: Path) -> list[dict]:
    return [
        p
        for line in (folder / "metrics.jsonl").read_text().splitlines()
        for rm in json.loads(line)["resourceMetrics"]
        for sm in rm["scopeMetrics"]
        for m in sm["metrics"]
        if m["name"] == "rl.stalls"
        for p in m["sum"]["dataPoints"]
    ]


def test_a_stalled_phase_is_counted_in_rl_stalls(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="spanspec.watchdog")
    config = telemetry.TelemetryConfig(run_id="stall1", span_groups="all")
    telemetry.init_telemetry_driver(config, GRPO, spec=bounded_spec(tmp_path))
    folder = Path(os.environ["NEMO_RL_OTEL_FILE_DIR"])
    with spanspec.span("rl.grpo.step", **{"rl.iteration": 0}):
        with spanspec.span("rl.grpo.generation", **{"rl.iteration": 0, "rl.batch_size": 8}):
            time.sleep(1.6)
        with spanspec.span("rl.grpo.generation", **{"rl.iteration": 1}):
            pass  # in time: no second stall
    telemetry.shutdown_telemetry()

    (record,) = [r for r in caplog.records if r.name == "spanspec.watchdog"]
    text = record.getMessage()
    assert "span 'rl.grpo.generation' has been open" in text and "group driver" in text
    assert "rl.iteration=0, rl.batch_size=8" in text
    tree = text.split("open spans in this process:\n")[1].splitlines()
    assert tree[0].strip().startswith("rl.grpo.step")
    assert tree[1].strip().startswith("rl.grpo.generation") and tree[1].endswith("<- stalled")
    (point,) = stall_points(folder)
    assert int(point["asInt"]) == 1
    assert {a["key"]: a["value"]["stringValue"] for a in point["attributes"]} == {
        "rl.stall.span": "rl.grpo.generation"
    }
    stalled = [s for s in file_spans(folder) if s.get("events")]
    assert [s["name"] for s in stalled] == ["rl.grpo.generation"]
    assert stalled[0]["events"][0]["name"] == "spanspec.stall"


def test_the_cost_matches_the_exported_files(tmp_path):
    config = telemetry.TelemetryConfig(run_id="cost1", span_groups="all")
    telemetry.init_telemetry_driver(config, GRPO)
    folder = Path(os.environ["NEMO_RL_OTEL_FILE_DIR"])
    for i in range(40):
        with spanspec.span("rl.grpo.step", **{"rl.iteration": i}):
            with spanspec.span("rl.grpo.generation", **{"rl.iteration": i}):
                pass
    telemetry.record_metrics({"loss": 0.5, "reward": 1.0}, prefix="train")
    stats = telemetry.shutdown_telemetry()
    assert stats is not None
    worker = TelemetryCost(processes=1, spans=5, spans_exported=5, process_cpu_s=2.0)
    cost = telemetry.job_cost(stats, [worker])  # what the loop's teardown returned

    assert cost.processes == 2
    assert cost.spans - worker.spans == len(file_spans(folder)) == 80
    assert cost.spans_exported - worker.spans_exported == 80
    assert cost.spans_dropped == stats.spans_lost == 0
    assert cost.points > 0 and cost.points_dropped == 0
    assert 0 < cost.export_cpu_s < cost.process_cpu_s
    assert cost.process_cpu_s > worker.process_cpu_s
    line = cost.line()
    assert line.startswith("telemetry cost: 2 processes, 85 spans (85 exported, 0 dropped), ")
    assert f"% of the run's {cost.process_cpu_s:.1f} s CPU" in line
    assert telemetry.job_cost(None).processes == 0


def test_dropped_spans_in_the_cost_are_what_the_pipeline_counted(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "64")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "32")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")
    config = telemetry.TelemetryConfig(run_id="cost2", span_groups="all", metrics_enabled=False)
    telemetry.init_telemetry_driver(config, GRPO)
    folder = Path(os.environ["NEMO_RL_OTEL_FILE_DIR"])
    for i in range(2_000):
        with spanspec.span("rl.worker.train_microbatch", **{"rl.micro_batch": i}):
            pass
    stats = telemetry.shutdown_telemetry()
    cost = telemetry.job_cost(stats)
    assert cost.spans == 2_000
    assert cost.spans_dropped == sum(p.lost for p in stats.pipelines) > 0
    assert cost.spans_exported == len(file_spans(folder)) == 2_000 - cost.spans_dropped
