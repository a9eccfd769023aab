"""The straggler rule and the per-lane skew table (spanspec.skew, spanspec.traces.ranks)."""

from __future__ import annotations

import pytest

import spanspec
from spanspec.skew import SkewTracker, step_skew, stragglers
from spanspec.traces.otlp_json import SpanRecord
from spanspec.traces.ranks import compute_ranks, heat_map_html

S = 1_000_000_000


def test_step_skew_is_the_slowest_over_the_median():
    skew = step_skew(0, {"a": 1.0, "b": 1.0, "c": 2.0})
    assert (skew.median, skew.slowest, skew.ratio) == (1.0, "c", 2.0)
    assert skew.slow(0.1) and step_skew(0, {"a": 1.0}) is None


def test_a_lane_slowest_in_half_the_steps_beyond_the_threshold_is_a_straggler():
    history = [step_skew(i, {"a": 1.0, "b": 1.5 if i % 2 else 1.0}) for i in range(6)]
    (found,) = stragglers("p", history, 0.10)
    assert (found.lane, found.slow_steps, found.steps) == ("b", 3, 6)
    assert found.percent_slower == pytest.approx(20.0)  # 1.5 over the median 1.25
    assert stragglers("p", history, 0.5) == []  # 20 % is within a 50 % threshold
    rare = [step_skew(i, {"a": 1.0, "b": 2.0 if i == 0 else 1.0}) for i in range(6)]
    assert stragglers("p", rare, 0.10) == []


def test_the_tracker_reports_a_straggler_once_and_again_on_change():
    tracker = SkewTracker(0.1, window=4)
    changes = []
    for i in range(8):
        slow = "b" if i < 5 else "a"
        _, changed = tracker.observe("p", i, {"a": 1.0, "b": 1.0, slow: 2.0})
        changes.append(None if changed is None else [s.lane for s in changed])
    # window 4: at step 6 both were slowest in 2 of 4 steps, at step 7 only a
    assert changes == [None, ["b"], None, None, None, None, ["a", "b"], ["a"]]
    assert tracker.current() == {"p": ("a",)}


def _rank_spans(step: int, trace: str, slow: float) -> list[SpanRecord]:
    """A driver step with one update phase; ranks 0 and 1 each train and all-reduce under it."""
    t0 = (1 + step) * 10 * S  # after 1970: a reader skips a span starting at 0
    root, phase = f"{step:02d}" + "0" * 14, f"{step:02d}" + "1" * 14
    out = [
        SpanRecord(
            "rl.grpo.step",
            trace,
            root,
            None,
            t0,
            t0 + 3 * S,
            {"rl.iteration": step},
            {"rl.worker.group": "driver"},
        ),
        SpanRecord(
            "rl.grpo.policy_update",
            trace,
            phase,
            root,
            t0,
            t0 + 3 * S,
            {"rl.iteration": step},
            {"rl.worker.group": "driver"},
        ),
    ]
    for rank, train in ((0, 1.0), (1, slow)):
        res = {"rl.worker.group": "policy", "rl.worker.rank": rank, "process.pid": 100 + rank}
        out.append(
            SpanRecord(
                "rl.worker.train_microbatch",
                trace,
                f"{step:02d}{rank}2" + "0" * 12,
                phase,
                t0,
                t0 + int(train * S),
                {"rl.memory.rss_peak_bytes": (300 + rank) * 2**20},
                res,
            )
        )
        out.append(
            SpanRecord(
                "rl.worker.allreduce",
                trace,
                f"{step:02d}{rank}3" + "0" * 12,
                phase,
                t0 + int(train * S),
                t0 + int(slow * S) + S // 10,
                {},
                res,
            )
        )
    return out


def test_ranks_name_the_straggler_the_time_lost_and_the_peaks():
    spans = [s for i in range(4) for s in _rank_spans(i, f"{i:032x}", 2.0)]
    report = compute_ranks(spans, spanspec.load(), 0.1)
    (phase,) = report.phases
    assert (phase.phase, phase.group, phase.lanes) == (
        "rl.worker.train_microbatch",
        "policy",
        ["policy 0", "policy 1"],
    )
    (found,) = report.stragglers()
    assert (found.lane, found.slow_steps, found.steps) == ("policy 1", 4, 4)
    assert report.lost_s == pytest.approx({i: 1.0 for i in range(4)})  # rank 0 waited 1 s
    assert report.peaks["rl.memory.rss_peak_bytes"]["rl.worker.train_microbatch"] == {
        "policy 0": 300 * 2**20,
        "policy 1": 301 * 2**20,
    }
    text = report.format()
    lines = [line for line in text.splitlines() if "straggler:" in line]
    assert lines == [
        "  straggler: policy 1 (pid 101) is 33% slower than the median in "
        "rl.worker.train_microbatch, the slowest in 4 of 4 steps"
    ]
    assert "time lost to the slowest rank: 1.000 s per step" in text
    html = heat_map_html(report)
    assert html.count(">straggler<") == 1 and "policy 1 <b" in html

    even = [s for i in range(4) for s in _rank_spans(i, f"{i:032x}", 1.0)]
    report = compute_ranks(even, spanspec.load(), 0.1)
    assert report.stragglers() == [] and "no straggler" in report.format()
