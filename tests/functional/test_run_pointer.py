"""A real GRPO run whose ``telemetry.file_dir`` is outside its ``logger.log_dir``: the run folder
and the trace folder point at each other (``spanspec-run.json``), so ``spanspec report``,
``view`` and ``diff`` of the run folder read its traces and its logged metrics together, and a
report of the trace folder finds the run folder's metrics. One two-step run (the built-in tiny
model and torch generation) serves every test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.traces import run_example, spanspec_cli

pytestmark = [pytest.mark.ray]

STEPS = 2
POINTER = "spanspec-run.json"


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, Path, list[dict], str]:
    root = tmp_path_factory.mktemp("run_pointer")
    log_dir, file_dir = root / "runs" / "tiny", root / "traces" / "tiny"
    proc = run_example(
        "run_grpo.py",
        f"logger.log_dir={log_dir}",
        "logger.tqdm=false",
        f"grpo.max_steps={STEPS}",
        "grpo.num_prompts_per_step=4",
        "grpo.val_period=0",
        "grpo.val_at_start=false",
        "checkpointing.enabled=false",
        "telemetry.exporter=file",
        "telemetry.span_groups=per_step",
        "telemetry.run_id=pointed",
        f"telemetry.file_dir={file_dir}",
    )
    rows = [json.loads(line) for line in (log_dir / "metrics.jsonl").read_text().splitlines()]
    return log_dir, file_dir, rows, proc.stdout


def _report(path: Path, out: Path) -> dict:
    done = spanspec_cli("report", str(path), "-o", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == ""  # no hint about missing curves: they were found
    return json.loads(out.read_text().split('id="report-data">', 1)[1].split("</script>", 1)[0])


def test_the_run_folder_and_the_trace_folder_point_at_each_other(run):
    log_dir, file_dir, _, out = run
    assert not (log_dir / "telemetry").exists() and (file_dir / "traces.jsonl").is_file()
    assert json.loads((log_dir / POINTER).read_text()) == {"traces": "../../traces/tiny"}
    assert json.loads((file_dir / POINTER).read_text()) == {"runs": {"pointed": "../../runs/tiny"}}
    assert f"report: spanspec report {log_dir} -o " in out  # the command the run suggests works


def test_report_of_the_run_folder_has_the_spans_and_the_metric_curves(run, tmp_path):
    log_dir, file_dir, rows, _ = run
    data = _report(log_dir, tmp_path / "report.html")
    assert data["run_id"] == "pointed" and data["files"] == [str(file_dir / "traces.jsonl")]
    assert [s["iteration"] for s in data["steps"]] == list(range(1, STEPS + 1))
    names = {r["name"] for s in data["steps"] if s.get("kept") for r in s["spans"]}
    assert {"rl.grpo.step", "rl.grpo.generation", "rl.worker.generate"} <= names
    assert data["metrics_file"] == str(log_dir / "metrics.jsonl")
    curves = {c["key"]: dict(map(tuple, c["points"])) for c in data["curves"]}
    for key in ("train/reward_mean", "train/loss"):
        want = {r["step"]: r[key] for r in rows if r.get(key) is not None}
        assert len(want) == STEPS and curves[key] == pytest.approx(want), key


def test_report_of_the_trace_folder_finds_the_run_folders_metrics(run, tmp_path):
    log_dir, file_dir, _, _ = run
    data = _report(file_dir, tmp_path / "report.html")
    assert data["metrics_file"] == str(log_dir / "metrics.jsonl")
    assert {"train/reward_mean", "train/loss"} <= {c["key"] for c in data["curves"]}


def test_view_of_the_run_folder_draws_a_step(run):
    log_dir, _, _, _ = run
    done = spanspec_cli("view", str(log_dir), "--step", "1")
    assert done.returncode == 0, done.stderr
    assert "rl.grpo.step" in done.stdout and "rl.grpo.generation" in done.stdout


def test_diff_of_the_run_folder_with_itself_compares_its_phases(run):
    log_dir, _, _, _ = run
    done = spanspec_cli("diff", str(log_dir), str(log_dir), "--warmup", "0", "--format", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    out = json.loads(done.stdout)
    phases = {r["name"]: r for r in out["rows"] if r["kind"] == "phase"}
    assert {"rl.grpo.generation", "rl.grpo.policy_update"} <= phases.keys()
    assert out["slower"] == [] and phases["rl.grpo.generation"]["ratio"] == 1.0
