"""bench/bench_readers.py and bench/diff_false_positives.py, small: they run and print their
tables (the real figures come from runs of 100 MB and 1 GB, minutes each)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.unit.spanspec.fixtures.traces import grpo_steps, write_traces
from tests.unit.spanspec.test_diff import _noisy, write_run

ROOT = Path(__file__).resolve().parents[2]


def test_bench_readers_measures_every_reader_on_each_shape(tmp_path):
    source = write_traces(tmp_path / "source", grpo_steps(3), groups="per_step")
    proc = subprocess.run(
        [sys.executable, "bench/bench_readers.py", "--source", str(source), "--sizes", "0.3",
         "--keep", str(tmp_path / "runs")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line.split() for line in proc.stdout.splitlines()[2:]]
    shapes = ["copies", "same-times", "giant-step", "tiny-steps", "many-runs"]
    readers = ["view", "live-check", "report", "diff", "breakdown"]
    assert [(r[0], r[2]) for r in rows] == [(s, c) for s in shapes for c in readers]
    assert all(0 < float(r[5]) < 256 for r in rows)  # peak MB
    assert "exit" not in proc.stderr, proc.stderr[-2000:]
    runs = tmp_path / "runs"
    copied = (runs / "copies_0.3MB" / "telemetry" / "traces.jsonl").read_text()
    # many copies of the 3-step source (about 3 KB a step), each with its own ids
    steps = copied.count('"rl.grpo.step"')
    assert steps > 3 * 15
    assert len(set(re.findall(r'"traceId":"([0-9a-f]{32})"', copied))) >= steps
    same = (runs / "same-times_0.3MB" / "telemetry" / "traces.jsonl").read_text()
    assert len(set(re.findall(r'"startTimeUnixNano":"(\d+)"', same))) == len(
        set(re.findall(r'"startTimeUnixNano":"(\d+)"', source.read_text()))
    )
    assert len(set(re.findall(r'"rl.iteration","value":\{"intValue":"(\d+)"', same))) > 3 * 15
    giant = (runs / "giant-step_0.3MB" / "telemetry" / "traces.jsonl").read_text()
    assert giant.count('"rl.grpo.step"') == 1 and giant.count('"rl.worker.generate"') > 500
    tiny = (runs / "tiny-steps_0.3MB" / "telemetry" / "traces.jsonl").read_text()
    assert tiny.count('"rl.grpo.step"') > 500
    many = (runs / "many-runs_0.3MB" / "telemetry" / "traces.jsonl").read_text()
    assert len(set(re.findall(r'"rl.run_id","value":\{"stringValue":"([^"]+)"', many))) > 15


def test_diff_false_positives_counts_the_comparisons_that_failed(tmp_path):
    run = write_run(tmp_path / "long", _noisy(1.0, 25, 1, 0.05), seed=1)
    proc = subprocess.run(
        [sys.executable, "bench/diff_false_positives.py", "--split", "6", str(run),
         "--thresholds", "5,20"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines()[0].startswith("6 comparisons")
    assert "0/6" in proc.stdout
