"""Where the step time went: phases, shares and buckets computed from emitted spans."""

from __future__ import annotations

import pytest

import spanspec
from spanspec.traces.breakdown import compute_breakdown, step_breakdown
from spanspec.traces.otlp_json import SpanRecord
from tests.unit.spanspec.fixtures.traces import grpo_steps, write_traces

S = 1_000_000_000  # nanoseconds in a second


def _step(trace: str, start_s: float, update_s: float) -> list[SpanRecord]:
    """One step of 1 s: data 0.1, rollout 0.4 (generation 0.3, reward 0.1), update, rest idle."""
    t0 = int(start_s * S)

    def rec(name: str, sid: str, parent: str | None, a: float, b: float) -> SpanRecord:
        return SpanRecord(name, trace, sid, parent, t0 + int(a * S), t0 + int(b * S))

    return [
        rec("rl.grpo.step", f"{trace[:14]}00", None, 0.0, 1.0),
        rec("rl.grpo.data_processing", f"{trace[:14]}01", f"{trace[:14]}00", 0.0, 0.1),
        rec("rl.grpo.rollout", f"{trace[:14]}02", f"{trace[:14]}00", 0.1, 0.5),
        rec("rl.grpo.generation", f"{trace[:14]}03", f"{trace[:14]}02", 0.1, 0.4),
        rec("rl.grpo.reward", f"{trace[:14]}04", f"{trace[:14]}02", 0.4, 0.5),
        rec("rl.grpo.policy_update", f"{trace[:14]}05", f"{trace[:14]}00", 0.5, 0.5 + update_s),
    ]


def test_phases_shares_and_buckets_count_each_second_once():
    spans = _step("a" * 32, 0.0, 0.4) + _step("b" * 32, 10.0, 0.2)
    result = compute_breakdown(spans, spanspec.load())

    assert result.steps == 2 and result.mean_step_s == pytest.approx(1.0)
    table = {(p.depth, p.name): (p.mean_s, p.share, p.bucket, p.count) for p in result.phases}
    assert list(table) == [
        (0, "rl.grpo.data_processing"),
        (0, "rl.grpo.rollout"),
        (1, "rl.grpo.generation"),
        (1, "rl.grpo.reward"),
        (0, "rl.grpo.policy_update"),
    ]
    assert table[(0, "rl.grpo.rollout")] == pytest.approx((0.4, 0.4, None, 2))
    assert table[(1, "rl.grpo.generation")] == pytest.approx((0.3, 0.3, "productive", 2))
    assert table[(0, "rl.grpo.policy_update")] == pytest.approx((0.3, 0.3, "productive", 2))
    # rollout has no bucket: its time counts once, through its children.
    assert result.buckets == pytest.approx(
        {"productive": 0.7, "unattributed": 0.2, "overhead": 0.1}
    )
    text = str(result)
    assert text.splitlines()[0] == "where the step time went (2 steps, mean step 1.000 s):"
    assert "efficiency: productive 70.0%, unattributed 20.0%, overhead 10.0%" in text


def test_ranks_side_by_side_count_once_in_the_buckets_and_groups_add_up():
    """Two ranks of one group running the step's phases at once (a TRL run's ``trainer``
    ranks, rank 0 holding the step) are the step's time once, as their mean; another group's
    lane (a driver's phase) adds to them."""
    trace, t0 = "c" * 32, 0

    def rec(name, sid, parent, a, b, group, rank):
        resource = {"rl.worker.group": group, "rl.worker.rank": rank}
        return SpanRecord(name, trace, sid, parent, t0 + int(a * S), t0 + int(b * S), {}, resource)

    step = "c" * 15 + "0"
    spans = [
        rec("rl.grpo.step", step, None, 0.0, 1.0, "trainer", 0),
        rec("rl.grpo.generation", "c" * 15 + "1", step, 0.0, 0.4, "trainer", 0),
        rec("rl.grpo.policy_update", "c" * 15 + "2", step, 0.4, 0.8, "trainer", 0),
        rec("rl.grpo.generation", "c" * 15 + "3", step, 0.0, 0.6, "trainer", 1),  # slower
        rec("rl.grpo.policy_update", "c" * 15 + "4", step, 0.6, 0.8, "trainer", 1),
        rec("rl.grpo.data_processing", "c" * 15 + "5", step, 0.8, 0.9, "driver", 0),
    ]
    result = compute_breakdown(spans, spanspec.load())
    # productive: trainer 0 0.8 s, trainer 1 0.8 s -> 0.8; overhead: the driver's 0.1 s
    assert result.buckets == pytest.approx(
        {"productive": 0.8, "overhead": 0.1, "unattributed": 0.1}
    )
    phases = {p.name: p.mean_s for p in result.phases}
    assert phases["rl.grpo.generation"] == pytest.approx(0.5)  # the mean over the ranks


def test_a_folder_several_runs_appended_to_reports_one_run(tmp_path):
    write_traces(tmp_path, grpo_steps(2), groups="per_step", resource={"rl.run_id": "first"})
    path = write_traces(
        tmp_path, grpo_steps(3), groups="per_step", resource={"rl.run_id": "second"}
    )
    assert step_breakdown(path).steps == 5
    assert step_breakdown(path, run_id="first").steps == 2
    assert step_breakdown(path, run_id="second").steps == 3
    assert step_breakdown(path, run_id="third").steps == 0


def test_no_step_spans_says_which_group_to_turn_on(tmp_path):
    path = write_traces(tmp_path, grpo_steps(1), groups="default")
    text = str(step_breakdown(path))
    assert "no rl.{algorithm}.step spans" in text
    assert "turn on the 'step' group, e.g. span_groups=per_step" in text


def test_an_occasional_phase_says_how_often_and_its_work_takes_its_bucket():
    # Three steps; the second ends with an evaluation of 0.3 s that generates for 0.2 s.
    spans = _step("a" * 32, 0.0, 0.2) + _step("b" * 32, 10.0, 0.2) + _step("c" * 32, 20.0, 0.2)
    t0, trace = 10 * S, "b" * 32
    spans += [
        SpanRecord("rl.grpo.evaluate", trace, f"{trace[:14]}06", f"{trace[:14]}00",
                   t0 + int(0.7 * S), t0 + int(1.0 * S)),
        SpanRecord("rl.worker.generate", trace, f"{trace[:14]}07", f"{trace[:14]}06",
                   t0 + int(0.75 * S), t0 + int(0.95 * S)),
    ]  # fmt: skip
    result = compute_breakdown(spans, spanspec.load())
    phases = {p.name: p for p in result.phases}
    evaluate, generate = phases["rl.grpo.evaluate"], phases["rl.worker.generate"]
    assert evaluate.bucket == "overhead" and generate.bucket == "overhead"  # not productive
    assert phases["rl.grpo.generation"].bucket == "productive"
    assert (evaluate.steps_with, evaluate.count) == (1, 1)
    assert evaluate.mean_s == pytest.approx(0.1) and evaluate.each_s == pytest.approx(0.3)
    text = str(result)
    assert "in 1 of 3 steps, 0.300 s each" in text
    assert "rl.grpo.data_processing" in text and "of 3 steps" not in text.split("\n")[2]


def test_cpu_over_wall_per_phase_from_the_spans_that_carry_it():
    """The registry's conventions.cpu_attribute: a worker span's CPU seconds over its wall time,
    rolled up into the driver phase above it (counted once where measured spans nest), per lane
    in the ranks section, and '-' for a phase nothing measured."""
    from spanspec.traces.ranks import compute_ranks

    trace, t0 = "c" * 32, S  # after 1970: a reader skips a span starting at 0
    driver = {"rl.worker.group": "driver"}

    def rec(name, sid, parent, a, b, attrs=None, res=driver):
        return SpanRecord(name, trace, sid * 16, parent and parent * 16, t0 + int(a * S),
                          t0 + int(b * S), attrs or {}, res)  # fmt: skip

    spans = [
        rec("rl.grpo.step", "0", None, 0.0, 4.0, {"rl.iteration": 0}),
        rec("rl.grpo.data_processing", "1", "0", 0.0, 0.5),
        rec("rl.grpo.policy_update", "2", "0", 1.0, 4.0),
    ]
    for rank, (wall, cpu) in enumerate(((1.0, 0.9), (2.0, 0.5))):  # rank 1: stopped half the time
        res = {"rl.worker.group": "policy", "rl.worker.rank": rank}
        sid = str(3 + rank)
        spans.append(
            rec(
                "rl.worker.train_microbatch",
                sid,
                "2",
                1.0,
                1.0 + wall,
                {"rl.cpu.seconds": cpu},
                res,
            )
        )
    # measured inside a measured span: its own phase shows it, the phases above count it once
    res0 = {"rl.worker.group": "policy", "rl.worker.rank": 0}
    spans.append(rec("rl.worker.allreduce", "5", "3", 1.5, 1.7, {"rl.cpu.seconds": 0.1}, res0))

    result = compute_breakdown(spans, spanspec.load())
    ratio = {p.name: p.cpu_per_wall for p in result.phases}
    assert ratio["rl.grpo.data_processing"] is None
    assert ratio["rl.grpo.policy_update"] == pytest.approx(1.4 / 3.0)
    assert ratio["rl.worker.train_microbatch"] == pytest.approx(1.4 / 3.0)
    assert ratio["rl.worker.allreduce"] == pytest.approx(0.5)
    lines = str(result).splitlines()
    assert lines[1].split()[5] == "cpu/wall"
    row = next(line for line in lines if "rl.grpo.policy_update" in line)
    assert row.split()[4] == "0.47"
    assert next(line for line in lines if "rl.grpo.data_processing" in line).split()[4] == "-"
    assert any(line.strip().startswith("cpu/wall: CPU seconds") for line in lines)

    ranks = compute_ranks(spans, spanspec.load())
    per_lane = ranks.cpu["rl.worker.train_microbatch"]
    assert per_lane["policy 0"] == pytest.approx((0.9, 1.0))
    assert per_lane["policy 1"] == pytest.approx((0.5, 2.0))
    text = ranks.format().splitlines()
    at = text.index(next(line for line in text if line.startswith("cpu/wall per phase and lane")))
    assert text[at + 1].split() == ["phase", "policy", "0", "policy", "1"]
    assert text[at + 2].split() == ["rl.worker.train_microbatch", "0.90", "0.25"]


def test_without_cpu_seconds_the_table_has_no_cpu_column():
    result = compute_breakdown(_step("d" * 32, 0.0, 0.4), spanspec.load())
    assert all(p.cpu_per_wall is None for p in result.phases)
    assert "cpu/wall" not in str(result)


def _deep_step(trace: str, start_s: float) -> list[SpanRecord]:
    """A step whose phases nest three deep on two ranks, with CPU seconds at several depths
    and buckets below a span that has none (rollout): every rule the fold must keep."""
    t0 = int(start_s * S) + S
    drv = {"rl.worker.group": "driver"}

    def rec(name, sid, parent, a, b, attrs=None, res=drv):
        return SpanRecord(name, trace, f"{trace[:12]}{sid:04x}", parent and f"{trace[:12]}{parent:04x}",
                          t0 + int(a * S), t0 + int(b * S), attrs or {}, res)  # fmt: skip

    spans = [
        rec("rl.grpo.data_processing", 1, 100, 0.0, 0.1),
        rec("rl.worker.generate", 2, 3, 0.1, 0.2, {"rl.cpu.seconds": 0.05}),
        rec("rl.worker.generate", 4, 3, 0.2, 0.35, res={"rl.worker.group": "policy"}),
        rec("rl.grpo.generation", 3, 5, 0.1, 0.4),
        rec("rl.grpo.reward", 6, 5, 0.4, 0.5),
        rec("rl.grpo.rollout", 5, 100, 0.1, 0.5),
    ]
    for rank in range(2):
        res = {"rl.worker.group": "policy", "rl.worker.rank": rank}
        spans += [
            rec(
                "rl.worker.allreduce", 10 + rank, 20 + rank, 0.6, 0.7, {"rl.cpu.seconds": 0.02}, res
            ),
            rec(
                "rl.worker.train_microbatch",
                20 + rank,
                30,
                0.5,
                0.8 + rank / 10,
                {"rl.cpu.seconds": 0.2},
                res,
            ),
        ]
    spans += [
        rec("rl.grpo.policy_update", 30, 100, 0.5, 0.95),
        rec("rl.grpo.step", 100, None, 0.0, 1.0, {"rl.iteration": int(start_s)}),
    ]
    return sorted(spans, key=lambda s: s.end_time_unix_nano)


def test_a_step_past_the_held_limit_is_folded_into_the_same_times(monkeypatch):
    """Past HELD_SPANS a collector folds leaves into their parent's sums instead of holding
    them: every phase, count, bucket and cpu/wall comes out as when all were held."""
    from spanspec.traces import steps

    spec = spanspec.load()
    spans = _deep_step("d" * 32, 0.0) + _deep_step("e" * 32, 10.0)
    held = list(steps.iter_steps(spans, spec))
    monkeypatch.setattr(steps, "HELD_SPANS", 0)
    collector = steps.StepCollector(spec)
    folded = [t for s in spans for t in collector.add(s)] + collector.finish()
    assert collector.folded == 2 * 11  # every span but the step spans
    assert [t.folded for t in folded] == [11, 11] and [t.folded for t in held] == [0, 0]
    for a, b in zip(held, folded, strict=True):
        assert set(a.phases) == set(b.phases) and a.counts == b.counts
        for path in a.phases:
            assert a.phases[path] == pytest.approx(b.phases[path])
        assert a.buckets == pytest.approx(b.buckets)
        assert set(a.cpu) == set(b.cpu)
        for path in a.cpu:
            for lane, pair in a.cpu[path].items():
                assert b.cpu[path][lane] == pytest.approx(pair)
    assert str(steps_breakdown(held, spec)) == str(steps_breakdown(folded, spec))


def steps_breakdown(steps_: list, spec):
    from spanspec.traces.breakdown import breakdown_of_steps

    return breakdown_of_steps(steps_, spec)


def test_copies_at_the_same_times_close_each_step_and_hold_little():
    """A file that repeats a run under fresh ids at the same times: time never moves past the
    copies' last steps, so the collector closes the open steps when the stream goes back in
    time; every step is counted once and the held spans stay those of one copy."""
    from spanspec.traces import steps

    spec = spanspec.load()
    collector = steps.StepCollector(spec)
    got = []
    for copy in range(50):
        one = [
            s for i in range(3) for s in _step(f"{i:02x}{copy:04x}" + "f" * 26, 1.0 + i * 4.0, 0.4)
        ]
        for s in sorted(one, key=lambda s: s.end_time_unix_nano):
            got += collector.add(s)
    got += collector.finish()
    assert len(got) == 150 and len({t.trace_id for t in got}) == 150
    assert collector.rewinds == 49
    assert collector.held_peak <= 3 * 6
    updates = [s for t in got for s in t.phases[("rl.grpo.policy_update",)].values()]
    assert updates == pytest.approx([0.4] * 150)


def test_steps_that_never_fall_behind_the_grace_are_closed_when_held_fills(monkeypatch):
    """Copies of a run shorter than the grace at the same times never rewind past it: when
    HELD_SPANS spans are held, the steps that ended first are closed, each once."""
    from spanspec.traces import steps

    monkeypatch.setattr(steps, "HELD_SPANS", 30)
    collector = steps.StepCollector(spanspec.load())
    got = []
    for copy in range(40):
        one = _step(f"{copy:04x}" + "f" * 28, 1.0, 0.4)
        for s in sorted(one, key=lambda s: s.end_time_unix_nano):
            got += collector.add(s)
    got += collector.finish()
    assert len(got) == 40 and len({t.trace_id for t in got}) == 40
    assert collector.rewinds == 0 and collector.pressed > 0 and collector.folded == 0
    assert collector.held_peak <= 30 + 6
