"""spanspec.traces.timeline (lanes, tracks, Chrome trace events) and spanspec.traces.report's data."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

import spanspec
from spanspec.spec import Conventions
from spanspec.traces.otlp_json import SpanRecord, read_spans
from spanspec.traces.report import ReportError, find_trace_files, report_data, write_report
from spanspec.traces.timeline import lanes, pack_tracks, to_chrome_trace
from tests.unit.spanspec.fixtures.traces import grpo_steps, split_worker_spans, write_traces

# The lanes nemo_rl's registry declares (conventions.lane_attributes, main_lane).
RL = Conventions(lane_attributes=("rl.worker.group", "rl.worker.rank"), main_lane="driver")
DRIVER = {"service.name": "nemo-rl", "rl.worker.group": "driver", "process.pid": 10}
WORKER = {"service.name": "nemo-rl", "rl.worker.group": "policy", "rl.worker.rank": 1}


def record(name, span_id, parent=None, start=0, end=10, resource=DRIVER, **attributes):
    return SpanRecord(
        name=name,
        trace_id="a" * 32,
        span_id=span_id,
        parent_span_id=parent,
        start_time_unix_nano=start * 1_000_000,
        end_time_unix_nano=end * 1_000_000,
        attributes=attributes,
        resource=resource,
    )


@pytest.fixture
def run(tmp_path):
    traces = write_traces(
        tmp_path / "run" / "telemetry",
        grpo_steps(3),
        groups="per_step",
        resource={"rl.run_id": "r1"},
    )
    split_worker_spans(traces, {"rl.worker.group": "policy", "rl.worker.rank": 0})
    return tmp_path / "run"


def test_nested_spans_share_a_track_and_overlapping_siblings_get_their_own():
    outer = record("outer", "1", start=0, end=100)
    a = record("a", "2", parent="1", start=10, end=50)
    b = record("b", "3", parent="1", start=40, end=90)  # overlaps a: not nested in it
    c = record("c", "4", parent="1", start=60, end=70)  # inside b, after a ended
    tracks = pack_tracks([b, c, outer, a])
    assert tracks[id(outer)] == (0, 0)
    assert tracks[id(a)] == (0, 1)
    assert tracks[id(b)] == (1, 0)
    assert tracks[id(c)] == (0, 1)


def test_lanes_put_the_driver_first_then_workers_by_group_and_rank():
    spans = [
        record("w", "2", resource=WORKER),
        record("d", "1"),
        record("x", "3", resource={"service.name": "other", "process.pid": 7}),
    ]
    assert [lane.label for lane in lanes(spans, RL)] == ["driver", "policy 1", "other pid 7"]
    # Without lane attributes every process is its service and pid.
    assert [lane.label for lane in lanes(spans)] == [
        "nemo-rl",
        "nemo-rl pid 10",
        "other pid 7",
    ]


def test_chrome_trace_has_the_documented_fields():
    spans = [
        record("rl.grpo.step", "1", start=5, end=105, **{"rl.iteration": 2}),
        record("rl.grpo.generation", "2", parent="1", start=10, end=60),
        record("rl.worker.generate", "3", parent="2", start=12, end=58, resource=WORKER),
    ]
    trace = json.loads(json.dumps(to_chrome_trace(spans, RL)))  # JSON-serialisable as is
    assert trace["displayTimeUnit"] == "ms"
    events = trace["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    meta = [e for e in events if e["ph"] == "M"]
    assert len(complete) == 3 and len(meta) + len(complete) == len(events)
    for e in complete:
        assert set(e) == {"name", "cat", "ph", "ts", "dur", "pid", "tid", "args"}
        assert isinstance(e["ts"], int | float) and isinstance(e["dur"], int | float)
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
    step = next(e for e in complete if e["name"] == "rl.grpo.step")
    assert (step["ts"], step["dur"]) == (0, 100_000)  # microseconds from the first span
    assert step["args"]["rl.iteration"] == 2 and step["args"]["span_id"] == "1"
    names = {(e["pid"], e["name"]): e["args"] for e in meta}
    assert names[(1, "process_name")] == {"name": "driver"}
    assert names[(2, "process_name")] == {"name": "policy 1"}
    assert {e["name"] for e in meta if e["pid"] == 1} == {
        "process_name",
        "process_sort_index",
        "thread_name",
    }
    worker = next(e for e in complete if e["name"] == "rl.worker.generate")
    assert (worker["pid"], worker["tid"], worker["ts"]) == (2, 1, 7_000)
    assert to_chrome_trace([]) == {"traceEvents": [], "displayTimeUnit": "ms"}


def test_report_data_holds_steps_lanes_and_the_breakdown(run):
    data = report_data(read_spans(find_trace_files(run)), spanspec.load())
    assert data["run_id"] == "r1" and data["lanes"] == ["driver", "policy 0"]
    assert [s["iteration"] for s in data["steps"]] == [0, 1, 2]
    assert data["breakdown"]["steps"] == 3
    assert {p["name"] for p in data["breakdown"]["phases"]} >= {
        "rl.grpo.rollout",
        "rl.worker.generate",
    }
    step = data["steps"][0]
    # Every span of the step, the worker's in its own lane; nested spans on rows below.
    assert len(step["spans"]) == 8
    generate = next(s for s in step["spans"] if s["name"] == "rl.worker.generate")
    measured = ("rl.cpu.seconds", "rl.memory.rss_peak_bytes", "rl.memory.rss_rise_bytes")
    assert generate["lane"] == 1 and set(measured) <= set(generate["attributes"])
    assert {k: v for k, v in generate["attributes"].items() if k not in measured} == {
        "gen_ai.provider.name": "torch",
        "gen_ai.operation.name": "text_completion",
        "openinference.span.kind": "LLM",  # the registry's constant for model calls
    }
    rows = {s["name"]: s["row"] for s in step["spans"] if s["lane"] == 0}
    assert rows["rl.grpo.step"] == 0 and rows["rl.grpo.rollout"] == 1
    assert rows["rl.grpo.generation"] == 2
    # the slowest steps, slowest first, and only those slower than the mean
    mean = sum(s["dur_ms"] for s in data["steps"]) / len(data["steps"])
    durations = [data["steps"][i]["dur_ms"] for i in data["slowest"]]
    assert durations and all(d > mean for d in durations) and durations == sorted(durations)[::-1]
    assert data["steps"][0]["truncated"] is False


def test_only_the_latest_run_unless_asked(run, tmp_path):
    more = write_traces(
        tmp_path / "b", grpo_steps(1), groups="per_step", resource={"rl.run_id": "r2"}
    )
    target = run / "telemetry" / "traces.jsonl"
    target.write_text(target.read_text() + more.read_text())
    spans = read_spans(target)
    assert report_data(spans, spanspec.load())["runs"] == ["r1", "r2"]
    assert len(report_data(spans, spanspec.load())["steps"]) == 1
    assert len(report_data(spans, spanspec.load(), run_id="r1")["steps"]) == 3
    with pytest.raises(ReportError, match="run id 'r9' is not in the files; runs: r1, r2"):
        report_data(spans, spanspec.load(), run_id="r9")


def test_write_report_names_bad_input(run, tmp_path):
    data = write_report(run / "telemetry" / "traces.jsonl", tmp_path / "out" / "r.html")
    page = (tmp_path / "out" / "r.html").read_text()
    assert '"run_id":"r1"' in page and data["files"] == [str(run / "telemetry" / "traces.jsonl")]
    with pytest.raises(ReportError, match="no such file or folder"):
        write_report(tmp_path / "missing", tmp_path / "x.html")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportError, match=r"no traces\.jsonl in this folder or below it"):
        write_report(tmp_path / "empty", tmp_path / "x.html")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n{}\n")
    with pytest.raises(ReportError, match=r"bad.jsonl:1:2: violation: otlp.invalid_json"):
        write_report(bad, tmp_path / "x.html")


def test_a_closing_script_tag_in_an_attribute_cannot_break_the_page(tmp_path):
    spans = [record("rl.grpo.step", "1", start=1, **{"rl.iteration": 0, "note": "</script><b>x"})]
    data = report_data(spans, spanspec.load())
    from spanspec.traces.report import render_report

    page = render_report(data)
    assert "</script><b>" not in page and "\\u003c/script\\u003e\\u003cb\\u003ex" in page


def test_a_long_run_keeps_the_waterfalls_of_its_first_and_slowest_steps(tmp_path):
    from spanspec.traces.report import WATERFALLS_FIRST, WATERFALLS_SLOWEST

    path = write_traces(tmp_path, grpo_steps(WATERFALLS_FIRST + WATERFALLS_SLOWEST + 10),
                        groups="per_step")  # fmt: skip
    data = write_report(path, tmp_path / "r.html")
    steps = data["steps"]
    assert len(steps) == WATERFALLS_FIRST + WATERFALLS_SLOWEST + 10
    kept = [i for i, s in enumerate(steps) if s["kept"]]
    assert len(kept) == WATERFALLS_FIRST + WATERFALLS_SLOWEST
    assert kept[:WATERFALLS_FIRST] == list(range(WATERFALLS_FIRST))
    later = sorted(steps[WATERFALLS_FIRST:], key=lambda s: -s["dur_ms"])
    assert all(s["kept"] for s in later[:WATERFALLS_SLOWEST])
    assert all(s["spans"] == [] for s in steps if not s["kept"])
    assert all(steps[i]["kept"] for i in data["slowest"])


def test_the_run_shown_is_read_again_when_another_was_followed(tmp_path):
    """The page (and view) keep one run's steps while the spans stream by: the latest so far.
    A run whose early span (a job root) arrives last is not the latest after all: the run shown
    is read again, alone, and its steps are all on the page (its first step drawn)."""
    from spanspec.traces.otlp_json import TraceStream

    def res(run):
        return {**DRIVER, "rl.run_id": run}

    spans = []
    for i, (run, t) in enumerate((("b", 1000), ("b", 2000), ("a", 3000), ("a", 4000))):
        spans.append(record("rl.grpo.step", f"{i + 1:016x}", None, t, t + 500, res(run),
                            **{"rl.iteration": i}))  # fmt: skip
    spans.append(record("rl.job", f"{99:016x}", None, 500, 4600, res("a")))
    spans = [replace(s, trace_id=f"{i + 1:032x}") for i, s in enumerate(spans)]  # one trace each
    data = report_data(spans, spanspec.load())
    assert data["runs"] == ["a", "b"] and data["run_id"] == "b"
    assert [s["iteration"] for s in data["steps"]] == [0, 1]
    lines = "".join(
        json.dumps({"resourceSpans": [{"resource": {"attributes": [
            {"key": k, "value": {"stringValue": str(v)}} for k, v in s.resource.items()]},
            "scopeSpans": [{"scope": {"name": "spanspec"}, "spans": [{
                "traceId": s.trace_id, "spanId": s.span_id, "name": s.name,
                "startTimeUnixNano": str(s.start_time_unix_nano),
                "endTimeUnixNano": str(s.end_time_unix_nano),
                "attributes": [{"key": k, "value": {"intValue": str(v)}}
                               for k, v in s.attributes.items()]}]}]}]}) + "\n"
        for s in sorted(spans, key=lambda s: s.end_time_unix_nano)
    )  # fmt: skip
    (tmp_path / "traces.jsonl").write_text(lines)
    assert len(list(TraceStream(tmp_path))) == 5
    streamed = write_report(tmp_path, tmp_path / "r.html")
    assert streamed["run_id"] == "b" and [s["iteration"] for s in streamed["steps"]] == [0, 1]
    # view follows the latest run so far too, and reads the one it draws again, alone
    import subprocess
    import sys

    view = subprocess.run(
        [sys.executable, "-m", "spanspec.cli", "view", str(tmp_path / "traces.jsonl")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert view.returncode == 0, view.stderr
    header = view.stdout.splitlines()[0]
    assert header.endswith("rl.grpo.step (rl.iteration=0)  500.0 ms, 1 spans, run b"), header
    assert "2 runs in" in view.stderr and "drawing the latest, run b" in view.stderr


def test_a_run_of_many_steps_has_a_bar_for_every_kth_and_every_slow_one(monkeypatch):
    """Past STEP_BARS bars the page keeps a bar for every k-th step (and each with a
    waterfall): the count, the mean and the slowest steps are still of every step."""
    from spanspec.traces import report

    monkeypatch.setattr(report, "STEP_BARS", 40)
    spans = []
    for i in range(1000):
        t = 1000 + 10 * i
        spans.append(record("rl.grpo.step", f"{i + 1:016x}", None, t, t + (9 if i == 777 else 5),
                            **{"rl.iteration": i}))  # fmt: skip
    data = report_data(spans, spanspec.load())
    every = data["steps_every"]
    assert data["steps_total"] == 1000 and every in (16, 32)
    assert len(data["steps"]) <= 2 * 40
    iterations = [s["iteration"] for s in data["steps"]]
    assert iterations == sorted(iterations) and set(range(0, 1000, every)) <= set(iterations)
    assert data["steps"][data["slowest"][0]]["iteration"] == 777
    assert data["breakdown"]["steps"] == 1000
