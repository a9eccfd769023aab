"""The run pointer (``spanspec.files``): a run folder says where its traces went, the trace folder
which run folder holds each run's metrics. Written relative, read relative to the pointer's own
folder; followed by every reader (``report``, ``view``, ``diff``) from either side; every way it
can go wrong is one line and exit 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from spanspec.files import RUN_POINTER, PointerError, read_run_pointer, write_run_pointers
from spanspec.traces.otlp_json import trace_files
from tests.traces import spanspec_cli
from tests.unit.spanspec.fixtures.traces import grpo_steps, write_traces

RUN_ID = "run-a"
ROWS = [{"step": n, "train/loss": 1.0 / n, "train/reward_mean": 0.1 * n} for n in (1, 2, 3)]


@pytest.fixture
def apart(tmp_path) -> tuple[Path, Path]:
    """A run folder (the logger's metrics.jsonl) and its traces written elsewhere, pointed at
    each other as a program writes them."""
    run, traces = tmp_path / "runs" / "a", tmp_path / "elsewhere" / "tel"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    write_traces(traces, grpo_steps(3), groups="per_step", resource={"rl.run_id": RUN_ID})
    assert write_run_pointers(run, traces, RUN_ID) == [run / RUN_POINTER, traces / RUN_POINTER]
    return run, traces


def _report(path: Path, out: Path, *args: str) -> tuple[object, dict]:
    """``spanspec report PATH -o OUT``, and the data of the page it wrote."""
    done = spanspec_cli("report", str(path), "-o", str(out), *args)
    if not out.exists():
        return done, {}
    return done, json.loads(out.read_text().split('id="report-data">', 1)[1].split("</script>")[0])


def _span_names(data: dict) -> set[str]:
    return {row["name"] for step in data["steps"] if step.get("kept") for row in step["spans"]}


def _one_line_error(done, command: str) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"spanspec {command}: error: "), lines[0]
    return lines[0]


def test_the_pointers_are_written_relative_and_read_back_resolved(apart):
    run, traces = apart
    assert json.loads((run / RUN_POINTER).read_text()) == {"traces": "../../elsewhere/tel"}
    assert json.loads((traces / RUN_POINTER).read_text()) == {"runs": {RUN_ID: "../../runs/a"}}
    assert read_run_pointer(run).trace_folder() == traces
    assert read_run_pointer(traces).run_folder(RUN_ID) == run
    assert read_run_pointer(traces).run_folder("another") is None
    assert read_run_pointer(traces).run_folder(None) == run  # the only run named
    assert read_run_pointer(run.parent) is None


@pytest.mark.usefixtures("apart")
def test_moving_both_folders_together_keeps_them_pointing_at_each_other(tmp_path):
    moved = tmp_path / "moved"
    shutil.move(tmp_path / "runs", moved / "runs")
    shutil.move(tmp_path / "elsewhere", moved / "elsewhere")
    files, findings = trace_files(moved / "runs" / "a")
    assert findings == [] and files == [moved / "elsewhere" / "tel" / "traces.jsonl"]
    assert read_run_pointer(moved / "elsewhere" / "tel").run_folder(RUN_ID) == moved / "runs/a"


def test_a_trace_folder_keeps_every_run_that_wrote_there(apart, tmp_path):
    run, traces = apart
    write_run_pointers(tmp_path / "runs" / "b", traces, "run-b")
    runs = read_run_pointer(traces).runs
    assert runs == {RUN_ID: run, "run-b": tmp_path / "runs" / "b"}
    assert read_run_pointer(traces).run_folder(None) is None  # two runs: none without an id


def test_no_pointer_is_written_where_the_traces_are_under_the_run_folder(tmp_path):
    assert write_run_pointers(tmp_path, tmp_path / "telemetry", RUN_ID) == []
    assert write_run_pointers(tmp_path, tmp_path, RUN_ID) == []
    assert not list(tmp_path.rglob(RUN_POINTER))


def test_report_of_the_run_folder_has_the_spans_and_the_metric_curves(apart, tmp_path):
    run, traces = apart
    done, data = _report(run, tmp_path / "r.html")
    assert done.returncode == 0, done.stderr
    assert "3 steps" in done.stdout and "2 metric curves" in done.stdout
    assert done.stderr == ""
    assert data["files"] == [str(traces / "traces.jsonl")]
    assert data["metrics_file"] == str(run / "metrics.jsonl")
    curves = {c["key"]: c["points"] for c in data["curves"]}
    assert curves["train/loss"] == [[1, 1.0], [2, 0.5], [3, pytest.approx(1 / 3)]]
    assert {"rl.grpo.step", "rl.grpo.generation"} <= _span_names(data)


def test_report_of_the_trace_folder_finds_the_run_folders_metrics(apart, tmp_path):
    run, traces = apart
    done, data = _report(traces, tmp_path / "r.html")
    assert done.returncode == 0, done.stderr
    assert data["metrics_file"] == str(run / "metrics.jsonl") and len(data["curves"]) == 2


def test_without_a_metrics_file_the_report_says_how_to_get_curves(apart, tmp_path):
    run, traces = apart
    (traces / RUN_POINTER).unlink()
    done, data = _report(traces, tmp_path / "r.html")
    assert done.returncode == 0 and data["curves"] == []
    assert done.stderr.strip().splitlines() == [
        f"spanspec report: no metric curves: no metrics.jsonl of step rows in {traces}, next to "
        f"the traces or in a run folder their {RUN_POINTER} names; --metrics FILE draws a run's "
        "logged scalars"
    ]
    done, data = _report(traces, tmp_path / "r.html", "--metrics", str(run / "metrics.jsonl"))
    assert done.returncode == 0 and len(data["curves"]) == 2 and done.stderr == ""


def test_view_and_diff_of_the_run_folder_read_the_traces_it_points_at(apart):
    run, _ = apart
    view = spanspec_cli("view", str(run))
    assert view.returncode == 0, view.stderr
    assert view.stdout.count("rl.grpo.generation") == 1 and "rl.grpo.step" in view.stdout
    diff = spanspec_cli("diff", str(run), str(run), "--warmup", "0", "--format", "json")
    assert diff.returncode == 0, diff.stderr
    phases = {r["name"] for r in json.loads(diff.stdout)["rows"] if r["kind"] == "phase"}
    assert {"rl.grpo.generation", "rl.grpo.policy_update"} <= phases


@pytest.mark.parametrize("command", ["report", "view", "diff"])
def test_a_pointer_to_a_missing_folder_names_the_pointer_and_the_folder(apart, command, tmp_path):
    run, traces = apart
    shutil.rmtree(traces)
    args = {"report": ["-o", str(tmp_path / "r.html")], "diff": [str(run)], "view": []}[command]
    line = _one_line_error(spanspec_cli(command, str(run), *args), command)
    assert f"{run / RUN_POINTER}:0:0: violation: file.bad_pointer: " in line
    assert (
        f"'traces' points to {traces} (written '../../elsewhere/tel'), which is no folder" in line
    )
    assert f"relative to {run}" in line
    assert not (tmp_path / "r.html").exists()


def test_a_trace_folder_naming_a_missing_run_folder_is_one_line(apart, tmp_path):
    run, traces = apart
    shutil.rmtree(run)
    line = _one_line_error(spanspec_cli("report", str(traces), "-o", str(tmp_path / "r")), "report")
    assert f"{traces / RUN_POINTER}: 'runs.{RUN_ID}' points to {run}" in line


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("{not json", "the run pointer is not JSON"),
        ('["../tel"]', "the run pointer is a JSON list"),
        ('{"traces": 3}', "'traces' is 3, not a path"),
        ('{"runs": {"a": ""}}', "'runs' is {'a': ''}, not an object of paths"),
    ],
)
def test_an_unreadable_pointer_is_one_line_saying_what_is_expected(tmp_path, body, says):
    (tmp_path / RUN_POINTER).write_text(body)
    with pytest.raises(PointerError, match="expected"):
        read_run_pointer(tmp_path)
    line = _one_line_error(spanspec_cli("view", str(tmp_path)), "view")
    assert f"{tmp_path / RUN_POINTER}:0:0: violation: file.bad_pointer: " in line and says in line


def test_a_folder_in_place_of_the_pointer_is_one_line(tmp_path):
    (tmp_path / RUN_POINTER).mkdir()
    line = _one_line_error(spanspec_cli("diff", str(tmp_path), str(tmp_path)), "diff")
    assert "cannot read the run pointer: a folder is there, not a file" in line


@pytest.mark.parametrize("command", ["report", "view", "diff"])
def test_a_folder_with_neither_traces_nor_a_pointer_is_one_line(tmp_path, command):
    args = {"report": ["-o", str(tmp_path / "r.html")], "diff": [str(tmp_path)], "view": []}
    line = _one_line_error(spanspec_cli(command, str(tmp_path), *args[command]), command)
    assert (
        f"{tmp_path}:0:0: violation: file.no_traces: no traces.jsonl in this folder or below it, "
        f"and no {RUN_POINTER} saying where they went" in line
    )


def test_an_absolute_pointer_is_followed_as_written(tmp_path):
    traces = tmp_path / "tel"
    write_traces(traces, grpo_steps(2), groups="per_step")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / RUN_POINTER).write_text(json.dumps({"traces": str(traces)}))
    assert trace_files(tmp_path / "run") == ([traces / "traces.jsonl"], [])
