"""spanspec.traces.view: picking a trace and drawing it as a waterfall."""

from __future__ import annotations

import pytest

import spanspec
from spanspec.spec import Conventions
from spanspec.traces.otlp_json import SpanRecord, read_spans
from spanspec.traces.view import render_waterfall, select_trace, traces
from tests.unit.spanspec.fixtures.traces import grpo_steps, write_traces

# What nemo_rl's registry declares a step to be (read by view from the registry's conventions).
RL = Conventions(step_span="rl.{algorithm}.step", step_attribute="rl.iteration")


def record(name, span_id, parent=None, start=0, end=10, trace="a" * 32, **attributes):
    return SpanRecord(
        name=name,
        trace_id=trace,
        span_id=span_id,
        parent_span_id=parent,
        start_time_unix_nano=start * 1_000_000,
        end_time_unix_nano=end * 1_000_000,
        attributes=attributes,
    )


def test_waterfall_indents_by_depth_and_scales_bars_to_the_trace():
    spans = [
        record("rl.grpo.step", "1", start=0, end=100, **{"rl.iteration": 0}),
        record("rl.grpo.generation", "2", parent="1", start=0, end=50),
        record("rl.worker.generate", "3", parent="2", start=10, end=40),
        record("rl.grpo.policy_update", "4", parent="1", start=50, end=100),
    ]
    (trace,) = traces(spans)
    text = render_waterfall(trace, width=10, bar="#")
    lines = text.splitlines()
    assert lines[0] == f"trace {'a' * 32}  rl.grpo.step  100.0 ms, 4 spans"
    assert lines[1:] == [
        "rl.grpo.step             [##########]    100.0 ms",
        "  rl.grpo.generation     [#####     ]     50.0 ms",
        "    rl.worker.generate   [ ###      ]     30.0 ms",
        "  rl.grpo.policy_update  [     #####]     50.0 ms",
    ]


def test_children_in_start_order_and_orphans_drawn_as_roots():
    spans = [
        record("late", "3", parent="1", start=60, end=70),
        record("root", "1", start=0, end=100),
        record("early", "2", parent="1", start=5, end=20),
        record("orphan", "9", parent="404", start=80, end=90),
    ]
    (trace,) = traces(spans)
    assert trace.root_names == ("root", "orphan")
    names = [line.split("[")[0].rstrip() for line in render_waterfall(trace).splitlines()[1:]]
    assert names == ["root", "  early", "  late", "orphan"]


def test_error_spans_are_marked():
    failing = SpanRecord("boom", "b" * 32, "1", None, 0, 5_000_000, status_code=2)
    (trace,) = traces([failing])
    assert render_waterfall(trace).endswith("ERROR")


def test_repeated_ids_do_not_loop():
    spans = [
        record("a", "1", start=0, end=10),
        record("b", "2", parent="1", start=1, end=9),
        record("c", "1", parent="2", start=2, end=8),  # the same id as its grandparent
    ]
    (trace,) = traces(spans)
    assert len(render_waterfall(trace).splitlines()) == 4


def test_select_by_default_step_and_trace_id():
    spans = [
        record("rl.grpo.job", "1", trace="0" * 32, start=0, end=1000),
        record("rl.grpo.step", "2", trace="1" * 32, start=10, end=20, **{"rl.iteration": 0}),
        record("rl.grpo.step", "3", trace="2" * 32, start=30, end=40, **{"rl.iteration": 1}),
    ]
    summaries = traces(spans)
    assert select_trace(summaries, conventions=RL).trace_id == "1" * 32  # the first step
    assert select_trace(summaries, step=1, conventions=RL).trace_id == "2" * 32
    assert select_trace(summaries, trace_id="0000").trace_id == "0" * 32
    with pytest.raises(
        LookupError, match=r"no step span with rl.iteration=5; steps in the files: 0, 1"
    ):
        select_trace(summaries, step=5, conventions=RL)
    # Without conventions (a registry naming no step): the first trace; no steps to pick.
    assert select_trace(summaries).trace_id == "0" * 32
    with pytest.raises(LookupError, match=r"names no step span .* pick a trace with --trace ID"):
        select_trace(summaries, step=1)
    with pytest.raises(LookupError, match="matches no trace"):
        select_trace(summaries, trace_id="f")
    with pytest.raises(LookupError, match="no spans"):
        select_trace([])
    only_job = traces(spans[:1])
    assert select_trace(only_job).trace_id == "0" * 32


def test_a_real_trace_file(tmp_path):
    path = write_traces(tmp_path, grpo_steps(2), groups="per_step", spec=spanspec.load())
    summaries = traces(read_spans(path))
    assert len(summaries) == 2
    conventions = spanspec.load().conventions
    text = render_waterfall(select_trace(summaries, step=1, conventions=conventions))
    lines = text.splitlines()
    assert lines[1].startswith("rl.grpo.step ")
    assert [line.split("[")[0].strip() for line in lines[1:]] == [
        "rl.grpo.step",
        "rl.grpo.data_processing",
        "rl.grpo.rollout",
        "rl.grpo.generation",
        "rl.worker.generate",
        "rl.grpo.reward",
        "rl.grpo.policy_update",
        "rl.worker.train_microbatch",
    ]
    assert all(line.endswith(" ms") for line in lines[1:])


def test_a_step_below_a_job_span_is_drawn_as_its_subtree():
    spans = [
        record("rl.grpo.job", "1", start=0, end=1000),
        record("rl.grpo.step", "2", parent="1", start=100, end=200, **{"rl.iteration": 0}),
        record("rl.grpo.rollout", "3", parent="2", start=100, end=150),
        record("rl.grpo.step", "4", parent="1", start=300, end=400, **{"rl.iteration": 1}),
    ]
    chosen = select_trace(traces(spans), step=0, conventions=RL)
    assert chosen.root_names == ("rl.grpo.step",)
    assert [s.name for s in chosen.spans] == ["rl.grpo.step", "rl.grpo.rollout"]
    assert render_waterfall(chosen).splitlines()[0].endswith("rl.grpo.step  100.0 ms, 2 spans")
    header = render_waterfall(chosen, conventions=RL).splitlines()[0]
    assert header.endswith("rl.grpo.step (rl.iteration=0)  100.0 ms, 2 spans")


@pytest.mark.parametrize("groups", ["per_step", "all"])
def test_the_streaming_pick_draws_what_the_in_memory_one_draws(tmp_path, groups):
    from spanspec.traces.otlp_json import TraceStream
    from spanspec.traces.view import stream_traces

    path = write_traces(tmp_path, grpo_steps(5), groups=groups)
    held = traces(read_spans(path))
    for kwargs in ({}, {"step": 3}, {"trace_id": held[-1].trace_id[:10]}):
        want = render_waterfall(select_trace(held, conventions=RL, **kwargs), conventions=RL)
        streamed = stream_traces(TraceStream(path).merged(), conventions=RL, **kwargs)
        got = render_waterfall(select_trace(streamed, conventions=RL, **kwargs), conventions=RL)
        assert got == want, kwargs
    listed = stream_traces(TraceStream(path).merged(), conventions=RL, keep_bodies=False)
    assert [(t.trace_id, t.span_count, t.root_names) for t in listed] == [
        (t.trace_id, len(t.spans), t.root_names) for t in held
    ]
    with pytest.raises(LookupError, match=r"no step span with rl\.iteration=9; steps in the files"):
        select_trace(stream_traces(TraceStream(path).merged(), step=9, conventions=RL), step=9,
                     conventions=RL)  # fmt: skip


def test_drawing_one_of_many_traces_keeps_a_few_summaries_not_one_a_trace():
    """Streaming 2,000 step traces to draw one: the traces let go once their root arrived are
    not kept (a few per run, and one summary of the run's start and lowest step numbers), yet
    the earliest step is drawn, any step can be asked for, and a missing one names the lowest."""
    from spanspec.traces.view import RETIRED_KEPT, RETIRED_STEPS, pick_run, stream_traces

    conventions = spanspec.load().conventions

    def stream():
        for n in range(2000):
            trace, t = f"{n + 1:032x}", (n + 1) * 100
            child = record("rl.grpo.data_processing", "2" * 16, "1" * 16, t, t + 10, trace)
            late = record("rl.worker.generate", "3" * 16, "2" * 16, t, t + 5, trace)
            yield child
            yield record("rl.grpo.step", "1" * 16, None, t, t + 20, trace, **{"rl.iteration": n})
            yield late  # another process's span, written after the root: counted, not kept

    summaries = stream_traces(stream(), conventions=conventions)
    assert len(summaries) <= RETIRED_KEPT + 2
    assert pick_run(summaries) == (None, [])
    chosen = select_trace(summaries, conventions=conventions)
    assert chosen.trace_id == f"{1:032x}" and len(chosen.spans) == 3
    found = select_trace(
        stream_traces(stream(), step=1234, conventions=conventions), step=1234,
        conventions=conventions,
    )  # fmt: skip
    assert found.trace_id == f"{1235:032x}" and len(found.spans) == 3
    with pytest.raises(LookupError) as missing:
        select_trace(
            stream_traces(stream(), step=5000, conventions=conventions), step=5000,
            conventions=conventions,
        )  # fmt: skip
    listed = ", ".join(str(n) for n in range(RETIRED_STEPS))
    assert (
        str(missing.value) == f"no step span with rl.iteration=5000; steps in the files: {listed}"
    )
