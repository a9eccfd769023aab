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


def test_bench_readers_measures_every_reader_on_a_small_copy(tmp_path):
    source = write_traces(tmp_path / "source", grpo_steps(3), groups="per_step")
    proc = subprocess.run(
        [sys.executable, "bench/bench_readers.py", "--source", str(source), "--sizes", "1",
         "--keep", str(tmp_path / "runs")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line.split() for line in proc.stdout.splitlines() if line.strip().startswith("1M")]
    assert [r[1] for r in rows] == ["view", "live-check", "report", "diff", "breakdown"]
    assert all(0 < float(r[4]) < 256 for r in rows)  # peak MB
    copied = (tmp_path / "runs" / "run_1MB" / "telemetry" / "traces.jsonl").read_text()
    # many copies of the 3-step source (about 3 KB a step), each with its own ids
    steps = copied.count('"rl.grpo.step"')
    assert steps > 3 * 50
    assert len(set(re.findall(r'"traceId":"([0-9a-f]{32})"', copied))) >= steps


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
