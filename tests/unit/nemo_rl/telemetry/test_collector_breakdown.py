"""nemo_rl.telemetry.breakdown: the async-GRPO collector table and its overlap figure, alone and
folded into the end-of-run summary's one pass over the traces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nemo_rl.telemetry.breakdown import (
    CollectorFold,
    collector_breakdown,
    compute_collector_breakdown,
    run_summary,
)
from spanspec.traces import otlp_json
from spanspec.traces.otlp_json import SpanLink, SpanRecord

S = 1_000_000_000  # nanoseconds in a second


TRAINER = {"rl.worker.group": "driver", "rl.worker.rank": 0, "process.pid": 1, "rl.run_id": "r1"}
COLLECTOR = {
    "rl.worker.group": "collector",
    "rl.worker.rank": 0,
    "process.pid": 2,
    "rl.run_id": "r1",
}


def _rec(name: str, sid: str, a: float, b: float, parent=None, **extra) -> SpanRecord:
    trainer = name in ("rl.async_grpo.step", "rl.async_grpo.wait_for_trajectories")
    trace = ("a" if trainer else "c") * 32
    return SpanRecord(
        name,
        trace,
        sid * 16,
        parent * 16 if parent else None,
        int((1 + a) * S),
        int((1 + b) * S),
        resource=extra.pop("resource", TRAINER if trainer else COLLECTOR),
        **extra,
    )


def _spans() -> list[SpanRecord]:
    rollout = SpanLink("c" * 32, "3" * 16)
    return [
        # The trainer: one 4 s step that waits its first second for trajectories, and links to
        # the rollout it trained on (in the collector's trace).
        _rec("rl.async_grpo.step", "1", 0.0, 4.0, links=(rollout,), attributes={"rl.iteration": 1}),
        _rec("rl.async_grpo.wait_for_trajectories", "2", 0.0, 1.0, parent="1"),
        # The collector: the first rollout is waited for, the second overlaps training by 1.5 s.
        _rec("rl.async_grpo.rollout", "3", 0.0, 1.0),
        _rec("rl.async_grpo.generation", "4", 0.0, 0.9, parent="3"),
        _rec("rl.async_grpo.reward", "5", 0.9, 1.0, parent="3"),
        _rec("rl.async_grpo.rollout", "6", 1.0, 2.6),
        _rec("rl.async_grpo.generation", "7", 1.0, 2.5, parent="6"),
        _rec("rl.async_grpo.reward", "8", 2.5, 2.6, parent="6"),
        _rec("rl.async_grpo.wait_for_weights", "9", 2.6, 4.0),
    ]


def test_collector_breakdown_counts_collector_work_that_overlapped_the_busy_trainer():
    result = compute_collector_breakdown(_spans())
    assert result.span_s == pytest.approx(4.0)
    assert result.phases["rl.async_grpo.rollout"] == (2, pytest.approx(2.6))
    assert result.phases["rl.async_grpo.wait_for_weights"] == (1, pytest.approx(1.4))
    # The collector's work (generation and reward) in the step: 2.6 s, of it 1.6 s after the
    # trainer's wait; the same figure spanspec report shows for the step.
    overlap = result.overlap
    assert overlap.work_s == pytest.approx(2.6) and overlap.steps == 1
    assert overlap.overlap_s == pytest.approx(1.6) and overlap.wait_s == pytest.approx(1.0)
    text = str(result)
    assert "rl.async_grpo.wait_for_weights" in text and "overlap: 1.600 s of 2.600 s" in text
    assert "collector: no rl.async_grpo.rollout" in str(compute_collector_breakdown([]))


def _write_otlp(path: Path, spans: list[SpanRecord]) -> Path:
    """One export request per span, in end order, as each process's exporter writes them."""

    def value(v: object) -> dict:
        return {"intValue": str(v)} if isinstance(v, int) else {"stringValue": str(v)}

    def attributes(items: dict) -> list[dict]:
        return [{"key": k, "value": value(v)} for k, v in items.items()]

    lines = []
    for s in sorted(spans, key=lambda s: s.end_time_unix_nano):
        span = {
            "name": s.name,
            "traceId": s.trace_id,
            "spanId": s.span_id,
            "startTimeUnixNano": str(s.start_time_unix_nano),
            "endTimeUnixNano": str(s.end_time_unix_nano),
            "attributes": attributes(dict(s.attributes)),
            "links": [{"traceId": k.trace_id, "spanId": k.span_id} for k in s.links],
        }
        if s.parent_span_id:
            span["parentSpanId"] = s.parent_span_id
        resource = {"attributes": attributes(dict(s.resource))}
        request = {"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": [span]}]}]}
        lines.append(json.dumps(request) + "\n")
    path.write_text("".join(lines))
    return path


def test_the_end_of_an_async_run_reads_its_traces_once(tmp_path, monkeypatch):
    # Another run's rollout in the same file (a repeated run appends) counts for neither table.
    other = {**COLLECTOR, "rl.run_id": "r0"}
    path = _write_otlp(
        tmp_path / "traces.jsonl",
        [*_spans(), _rec("rl.async_grpo.rollout", "a", 0.0, 3.0, resource=other)],
    )
    opened: list[str] = []

    def counting_open(file, *args, **kwargs):  # the builtin, counted
        opened.append(str(file))
        return open(file, *args, **kwargs)

    monkeypatch.setattr(otlp_json, "open", counting_open, raising=False)
    text = run_summary(str(path), "r1", 1.2, None, [CollectorFold])
    assert opened == [str(path)]
    # The collector's table follows the breakdown, the same as the table read on its own.
    table = str(collector_breakdown(path, run_id="r1"))
    assert text.startswith("where the step time went") and text.endswith("\n" + table)
    assert "rl.async_grpo.rollout" in table and "     2 " in table  # r0's rollout left out
    assert "overlap: 1.600 s of 2.600 s" in table
