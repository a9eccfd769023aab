"""nemo_rl.telemetry.breakdown: the async-GRPO collector table and its overlap figure."""

from __future__ import annotations

import pytest

from nemo_rl.telemetry.breakdown import compute_collector_breakdown
from spanspec.traces.otlp_json import SpanLink, SpanRecord

S = 1_000_000_000  # nanoseconds in a second


TRAINER = {"rl.worker.group": "driver", "rl.worker.rank": 0, "process.pid": 1}
COLLECTOR = {"rl.worker.group": "collector", "rl.worker.rank": 0, "process.pid": 2}


def test_collector_breakdown_counts_collector_work_that_overlapped_the_busy_trainer():
    def rec(name: str, sid: str, a: float, b: float, parent=None, **extra) -> SpanRecord:
        trainer = name in ("rl.async_grpo.step", "rl.async_grpo.wait_for_trajectories")
        trace = ("a" if trainer else "c") * 32
        resource = TRAINER if trainer else COLLECTOR
        parent_id = parent * 16 if parent else None
        return SpanRecord(
            name,
            trace,
            sid * 16,
            parent_id,
            int((1 + a) * S),
            int((1 + b) * S),
            resource=resource,
            **extra,
        )

    rollout = SpanLink("c" * 32, "3" * 16)
    spans = [
        # The trainer: one 4 s step that waits its first second for trajectories, and links to
        # the rollout it trained on (in the collector's trace).
        rec("rl.async_grpo.step", "1", 0.0, 4.0, links=(rollout,), attributes={"rl.iteration": 0}),
        rec("rl.async_grpo.wait_for_trajectories", "2", 0.0, 1.0, parent="1"),
        # The collector: the first rollout is waited for, the second overlaps training by 1.5 s.
        rec("rl.async_grpo.rollout", "3", 0.0, 1.0),
        rec("rl.async_grpo.generation", "4", 0.0, 0.9, parent="3"),
        rec("rl.async_grpo.reward", "5", 0.9, 1.0, parent="3"),
        rec("rl.async_grpo.rollout", "6", 1.0, 2.6),
        rec("rl.async_grpo.generation", "7", 1.0, 2.5, parent="6"),
        rec("rl.async_grpo.reward", "8", 2.5, 2.6, parent="6"),
        rec("rl.async_grpo.wait_for_weights", "9", 2.6, 4.0),
    ]
    result = compute_collector_breakdown(spans)
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
