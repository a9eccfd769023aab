"""nemo_rl.telemetry.breakdown: the async-GRPO collector table and its overlap figure."""

from __future__ import annotations

import pytest

from nemo_rl.telemetry.breakdown import compute_collector_breakdown
from spanspec.traces.otlp_json import SpanRecord

S = 1_000_000_000  # nanoseconds in a second


def test_collector_breakdown_counts_generation_that_overlapped_the_busy_trainer():
    def rec(name: str, sid: str, a: float, b: float) -> SpanRecord:
        return SpanRecord(name, "c" * 32, sid * 16, None, int(a * S), int(b * S))

    spans = [
        # The trainer: one 4 s step that waits its first second for trajectories.
        rec("rl.async_grpo.step", "1", 0.0, 4.0),
        rec("rl.async_grpo.wait_for_trajectories", "2", 0.0, 1.0),
        # The collector: the first rollout is waited for, the second overlaps training by 1.5 s.
        rec("rl.async_grpo.rollout", "3", 0.0, 1.0),
        rec("rl.async_grpo.generation", "4", 0.0, 0.9),
        rec("rl.async_grpo.reward", "5", 0.9, 1.0),
        rec("rl.async_grpo.rollout", "6", 1.0, 2.6),
        rec("rl.async_grpo.generation", "7", 1.0, 2.5),
        rec("rl.async_grpo.reward", "8", 2.5, 2.6),
        rec("rl.async_grpo.wait_for_weights", "9", 2.6, 4.0),
    ]
    result = compute_collector_breakdown(spans)
    assert result.span_s == pytest.approx(4.0)
    assert result.phases["rl.async_grpo.rollout"] == (2, pytest.approx(2.6))
    assert result.phases["rl.async_grpo.wait_for_weights"] == (1, pytest.approx(1.4))
    assert result.generation_s == pytest.approx(2.4)
    assert result.overlap_s == pytest.approx(1.5) and result.trainer_wait_s == pytest.approx(1.0)
    text = str(result)
    assert "rl.async_grpo.wait_for_weights" in text and "overlap: 1.500 s of 2.400 s" in text
    assert "collector: no rl.async_grpo.rollout" in str(compute_collector_breakdown([]))
