"""Span links through every reader: read from OTLP-JSON (well-formed or not), drawn as Chrome
flow events, listed by view, followed by the step collector into the overlap figure and the
report. The traces are written by the real SDK and spanspec's file exporter."""

from __future__ import annotations

import json

import pytest
from opentelemetry.trace import Link

import spanspec
from spanspec.traces.otlp_json import SpanLink, SpanRecord, read_spans, read_traces
from spanspec.traces.overlap import run_overlap
from spanspec.traces.report import report_data
from spanspec.traces.timeline import to_chrome_trace
from spanspec.traces.view import link_lines, pick_run, stream_traces, traces
from tests.unit.spanspec.fixtures.traces import rewrite_lines, write_traces

STEPS = 3


@pytest.fixture(scope="module")
def spec() -> spanspec.Spec:
    return spanspec.load()


def _produce_then_consume(tracer) -> None:
    """A producer's work (its own root traces), then steps that link to it, as a consumer of work
    done elsewhere writes them."""
    made = []
    for i in range(STEPS):
        it = {"rl.iteration": i}
        with spanspec.span("rl.async_grpo.rollout", **it, **{"rl.async.weight_version": 0}) as r:
            with spanspec.span("rl.async_grpo.generation", **it, **{"rl.async.weight_version": 0}):
                pass
        made.append(r.get_span_context())
    for i in range(STEPS):
        it = {"rl.iteration": i}
        with spanspec.span("rl.async_grpo.step", **it, **{"rl.algorithm": "async_grpo"}) as step:
            step.add_link(made[i], {"note": f"batch {i}"})
            with spanspec.span("rl.async_grpo.wait_for_trajectories", **it):
                pass


def _split_producer(path) -> None:
    """The producer's spans in their own process (lane ``collector 0``), as a run writes them."""

    def change(request):
        out = []
        for rs in request["resourceSpans"]:
            for kind in ("driver", "collector"):
                copy = json.loads(json.dumps(rs))
                copy["resource"]["attributes"] += [
                    {"key": "rl.worker.group", "value": {"stringValue": kind}},
                    {"key": "rl.worker.rank", "value": {"intValue": "0"}},
                    {"key": "process.pid", "value": {"intValue": "1" if kind == "driver" else "2"}},
                ]
                for scope in copy["scopeSpans"]:
                    scope["spans"] = [
                        s
                        for s in scope["spans"]
                        if ("step" in s["name"] or "wait_for_traj" in s["name"])
                        == (kind == "driver")
                    ]
                out.append(copy)
        request["resourceSpans"] = out

    rewrite_lines(path, change)


@pytest.fixture(scope="module")
def linked(tmp_path_factory, spec):
    folder = tmp_path_factory.mktemp("linked")
    path = write_traces(
        folder, _produce_then_consume, groups="per_step", spec=spec, resource={"rl.run_id": "r1"}
    )
    _split_producer(path)
    return path


def test_links_are_read_with_their_ids_and_attributes(linked):
    read = read_traces(linked)
    assert read.findings == []
    rollouts = {s.span_id: s for s in read.spans if s.name == "rl.async_grpo.rollout"}
    steps = sorted(
        (s for s in read.spans if s.name == "rl.async_grpo.step"),
        key=lambda s: s.attributes["rl.iteration"],
    )
    for i, step in enumerate(steps):
        (link,) = step.links
        target = rollouts[link.span_id]
        assert link.trace_id == target.trace_id != step.trace_id  # work in another trace
        assert target.attributes["rl.iteration"] == i
        assert link.attributes == {"note": f"batch {i}"}
    assert all(s.links == () for s in rollouts.values())


def test_links_read_from_protobuf_json_in_snake_case_and_base64():
    from google.protobuf.json_format import MessageToJson
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("made") as made:
        pass
    context = made.get_span_context()
    with tracer.start_as_current_span("used", links=[Link(context, {"k": 2})]):
        pass
    text = MessageToJson(
        encode_spans(memory.get_finished_spans()), indent=None, preserving_proto_field_name=True
    )
    assert '"trace_id"' in text and '"links"' in text  # snake case, base64 ids
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "traces.jsonl"
        path.write_text(text + "\n")
        used = next(s for s in read_spans(path) if s.name == "used")
    assert used.links == (
        SpanLink(format(context.trace_id, "032x"), format(context.span_id, "016x"), {"k": 2}),
    )


@pytest.mark.parametrize(
    "links, why",
    [
        ({"traceId": "x"}, "links: expected a JSON list, got an object"),
        (["a string"], "links[1]: expected a JSON object, got a string"),
        ([{"traceId": "zz", "spanId": "00"}], "links[1]: id 'zz' is neither hex nor base64"),
        ([{"traceId": "ab" * 16}], "links[1]: no trace or span id"),
        ([{"traceId": "ab" * 16, "spanId": "cd" * 8, "attributes": {"k": 1}}], "attributes"),
        ([{"traceId": "ab" * 16, "spanId": "cd" * 8, "attributes": [{"key": "k"}]}], None),
        ([{"traceId": 5, "spanId": None}], "links[1]:"),
        ([[[]]], "links[1]: expected a JSON object, got a list"),
    ],
)
def test_a_malformed_link_is_a_finding_and_the_span_is_kept(tmp_path, links, why):
    span = {
        "name": "used",
        "traceId": "ab" * 16,
        "spanId": "ef" * 8,
        "startTimeUnixNano": "1",
        "endTimeUnixNano": "2",
        "links": links,
    }
    good = {"traceId": "ab" * 16, "spanId": "01" * 8}
    if isinstance(links, list):
        span["links"] = [good, *links]
    request = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
    path = tmp_path / "traces.jsonl"
    path.write_text("{}\n" + json.dumps(request) + "\n")  # line 1 is malformed, line 2 ours
    read = read_traces(path)
    (used,) = read.spans  # never an exception, never the span lost
    bad = [f for f in read.findings if f.id == "otlp.bad_link"]
    if why is None:  # a key without a value is an empty attribute, not an error
        assert bad == [] and len(used.links) == 2
        return
    (finding,) = bad
    assert finding.line == 2 and finding.level == "improvement"
    assert why in finding.message and "span 'used'" in finding.message
    good_links = [link for link in used.links if link.span_id == "01" * 8]
    assert len(good_links) == (1 if isinstance(links, list) else 0)


def test_the_chrome_export_draws_one_flow_pair_per_link(linked, spec):
    spans = read_spans(linked)
    trace = json.loads(json.dumps(to_chrome_trace(spans, spec.conventions)))
    events = trace["traceEvents"]
    flows = [e for e in events if e["ph"] in ("s", "f")]
    starts = {e["id"]: e for e in flows if e["ph"] == "s"}
    finishes = {e["id"]: e for e in flows if e["ph"] == "f"}
    assert len(starts) == len(finishes) == STEPS == trace["otherData"]["links"]
    assert len(flows) == 2 * STEPS
    lanes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    for number, s in starts.items():
        f = finishes[number]
        assert (s["cat"], s["name"]) == (f["cat"], f["name"]) and f["bp"] == "e"
        assert lanes[s["pid"]] == "collector 0" and lanes[f["pid"]] == "driver"
        assert s["ts"] <= f["ts"]  # from the work to the step that used it, forwards
        # each end sits inside a complete event of its thread (the binding Perfetto needs)
        for end in (s, f):
            assert any(
                e["ph"] == "X"
                and (e["pid"], e["tid"]) == (end["pid"], end["tid"])
                and e["ts"] <= end["ts"] <= e["ts"] + e["dur"]
                for e in events
            )
    # A link whose target is not written draws nothing.
    alone = [s for s in spans if s.name == "rl.async_grpo.step"]
    assert [e for e in to_chrome_trace(alone)["traceEvents"] if e["ph"] in "sf"] == []


def test_view_lists_the_links_of_the_drawn_step_with_their_targets(linked, spec):
    spans = read_spans(linked)
    summaries = traces(spans, "rl.run_id")
    step = next(t for t in summaries if t.root_names == ("rl.async_grpo.step",))
    targets = {(s.trace_id, s.span_id): s for s in spans}
    lines = link_lines(step, targets, spec.conventions)
    assert lines[0] == "links (1):"
    assert "rl.async_grpo.step (rl.iteration=0) <- rl.async_grpo.rollout" in lines[1]
    assert "collector 0" in lines[1] and "note=batch 0" in lines[1]
    assert "(not in the files)" in link_lines(step, {}, spec.conventions)[1]


def test_the_view_command_names_its_run_and_lists_the_links(linked):
    from tests.unit.spanspec.test_cli import run

    done = run("view", str(linked), "--step", "1")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("trace ") and lines[0].endswith(", run r1")
    at = lines.index("links (1):")
    assert "rl.async_grpo.step (rl.iteration=1) <- rl.async_grpo.rollout" in lines[at + 1]


def _run(spans: list[SpanRecord], run: str, shift: int) -> list[SpanRecord]:
    from dataclasses import replace

    return [
        replace(
            s,
            trace_id=("a" if run == "new" else "b") + s.trace_id[1:],  # another run's traces
            resource={**s.resource, "rl.run_id": run},
            start_time_unix_nano=s.start_time_unix_nano + shift,
            end_time_unix_nano=s.end_time_unix_nano + shift,
        )
        for s in spans
    ]


def test_view_and_report_pick_the_same_run_the_latest(linked, spec):
    spans = read_spans(linked)
    # The older run written after the newer one in the file: the start decides, not the order.
    both = _run(spans, "new", 10**12) + _run(spans, "old", 0)
    summaries = stream_traces(
        sorted(both, key=lambda s: s.end_time_unix_nano),
        conventions=spec.conventions,
        run_key="rl.run_id",
    )
    assert pick_run(summaries) == ("new", ["old", "new"])
    assert report_data(both, spec)["run_id"] == "new"
    # Only the latest run so far is followed: its first step can be drawn; the older run's
    # traces went by (its summary says so: to draw it, read it alone, as --run-id does).
    kept = [t for t in summaries if t.root_names == ("rl.async_grpo.step",) and len(t.spans) > 1]
    assert {t.run_id for t in kept} == {"new"}
    assert {t.run_id for t in summaries if t.partial} == {"old"}


def test_the_report_follows_the_links_and_the_overlap_matches_the_run_figure(linked, spec):
    spans = read_spans(linked)
    data = report_data(spans, spec)
    assert data["lanes"] == ["driver", "collector 0"]
    for step in data["steps"]:
        (link,) = step["links"]
        assert link["name"] == "rl.async_grpo.rollout" and link["lane"] == "collector 0"
        drawn = {s["span_id"]: s for s in step["spans"]}
        assert drawn[link["span_id"]]["linked"] and drawn[link["span_id"]]["other_trace"]
        assert "rl.async_grpo.generation" in {s["name"] for s in step["spans"]}
        assert step["overlap"]["steps"] == 1
    whole = run_overlap(spans, spec)
    assert whole.steps == STEPS
    assert data["overlap"]["overlap_s"] == pytest.approx(whole.overlap_s)
    assert data["overlap"]["work_s"] == pytest.approx(whole.work_s)
    # Here every rollout ended before any step began: no overlap, and no work inside the steps.
    assert whole.overlap_s == 0.0
