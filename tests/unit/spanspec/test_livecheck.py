"""spanspec.traces.livecheck and spanspec.traces.otlp_json on trace files written by the real SDK and exporter."""

from __future__ import annotations

import json

import pytest

import spanspec
from spanspec.traces.livecheck import live_check
from spanspec.traces.otlp_json import attribute_value, read_spans, read_traces
from tests.unit.spanspec.fixtures.traces import grpo_steps, rewrite_lines, write_traces


@pytest.fixture(scope="module")
def spec() -> spanspec.Spec:
    return spanspec.load()


def ids(findings, level="violation"):
    return sorted(f.id for f in findings if f.level == level)


def by_id(findings, id_):
    found = [f for f in findings if f.id == id_]
    assert found, f"no {id_} in {[str(f) for f in findings]}"
    return found


# -- reading ---------------------------------------------------------------------------------------


def test_reads_what_the_file_exporter_writes(spec, tmp_path):
    path = write_traces(tmp_path, grpo_steps(2), spec=spec)
    read = read_traces(path)
    assert read.findings == []
    names = [s.name for s in read.spans]
    assert names.count("rl.grpo.step") == 2 and "rl.worker.generate" in names
    step = next(s for s in read.spans if s.name == "rl.grpo.step")
    assert step.parent_span_id is None and len(step.trace_id) == 32 and len(step.span_id) == 16
    assert step.attributes == {
        "rl.iteration": step.attributes["rl.iteration"],
        "rl.algorithm": "grpo",
        "openinference.span.kind": "CHAIN",  # the registry's constant for the step group
    }
    assert isinstance(step.attributes["rl.iteration"], int)
    assert step.scope == "spanspec" and step.resource["service.name"] == "spanspec-tests"
    assert step.end_time_unix_nano >= step.start_time_unix_nano
    child = next(
        s for s in read.spans if s.name == "rl.grpo.rollout" and s.trace_id == step.trace_id
    )
    assert child.parent_span_id == step.span_id
    assert read_spans([path]) == read.spans


def test_reads_protobuf_json_as_message_to_json_writes_it(spec, tmp_path):
    """Base64 ids and enum names (MessageToJson) read the same as the exporter's hex and ints."""
    from google.protobuf.json_format import MessageToJson
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("spanspec")
    with tracer.start_as_current_span("rl.grpo.step", attributes={"rl.iteration": 7}) as root:
        with tracer.start_as_current_span("rl.grpo.rollout", attributes={"x": [1.5, 2.0]}):
            pass
    finished = memory.get_finished_spans()
    path = tmp_path / "proto.jsonl"
    path.write_text(MessageToJson(encode_spans(finished), indent=None) + "\n")
    spans = read_spans(path)
    assert {s.name for s in spans} == {"rl.grpo.step", "rl.grpo.rollout"}
    step = next(s for s in spans if s.name == "rl.grpo.step")
    assert step.span_id == format(root.get_span_context().span_id, "016x")
    assert step.trace_id == format(root.get_span_context().trace_id, "032x")
    assert step.kind == 1 and step.attributes == {"rl.iteration": 7}
    rollout = next(s for s in spans if s.name == "rl.grpo.rollout")
    assert rollout.parent_span_id == step.span_id and rollout.attributes == {"x": [1.5, 2.0]}


def test_attribute_values():
    assert attribute_value({"intValue": "3"}) == 3
    assert attribute_value({"doubleValue": 0.5}) == 0.5
    assert attribute_value({"doubleValue": "NaN"}) != attribute_value({"doubleValue": "NaN"})
    assert attribute_value({"boolValue": True}) is True
    assert attribute_value({"stringValue": "x"}) == "x"
    assert attribute_value({"arrayValue": {"values": [{"stringValue": "a"}]}}) == ["a"]
    assert attribute_value(
        {"kvlistValue": {"values": [{"key": "k", "value": {"intValue": "1"}}]}}
    ) == {"k": 1}
    assert attribute_value({}) is None
    with pytest.raises(ValueError):
        attribute_value("3")  # type: ignore[arg-type]


def test_a_truncated_last_line_is_information_and_the_rest_is_read(spec, tmp_path):
    path = write_traces(tmp_path, grpo_steps(1), spec=spec)
    text = path.read_text()
    path.write_text(text + text[: len(text) // 2])  # a killed writer: half a line, no newline
    read = read_traces(path)
    truncated = by_id(read.findings, "otlp.truncated_line")[0]
    assert truncated.level == "information" and truncated.line == 2
    assert ids(read.findings) == []
    assert len(read.spans) == 8


def test_bad_lines_are_violations_with_their_line(tmp_path):
    path = tmp_path / "traces.jsonl"
    path.write_text(
        '{"resourceSpans": []}\nnot json\n[1, 2]\n{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "x"}]}]}]}\n{}\n'
    )
    read = read_traces(path)
    lines = {(f.id, f.line) for f in read.findings}
    assert ("otlp.invalid_json", 2) in lines
    assert ("otlp.malformed", 3) in lines
    assert ("otlp.malformed", 4) in lines  # a span without ids
    assert ("otlp.malformed", 5) in lines
    assert read.spans == []


def test_missing_and_empty_files(tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    read = read_traces([tmp_path / "missing.jsonl", tmp_path / "empty.jsonl"])
    assert ids(read.findings) == ["file.unreadable"]
    assert ids(read.findings, "information") == ["otlp.empty"]


# -- checking -------------------------------------------------------------------------------------


def test_a_clean_run_has_no_violations_and_reports_coverage(spec, tmp_path):
    path = write_traces(tmp_path, grpo_steps(2), spec=spec)
    report = live_check(spec, read_spans(path))
    assert ids(report.findings) == []
    assert report.spans_checked == 16 and report.algorithms_seen == ("grpo",)
    assert report.groups_source == "resource attribute spanspec.groups"
    coverage = {c.group: c for c in report.coverage}
    # rl.grpo.step is the only step span a GRPO run can emit: other algorithms are left out.
    assert coverage["step"].declared == ("rl.grpo.step",) and coverage["step"].fraction == 1.0
    generation = coverage["generation"]
    assert generation.seen == ("rl.grpo.generation", "rl.worker.generate")
    assert set(generation.missing) == {"rl.vllm.generate", "rl.vllm.generate_text"}
    assert generation.state == "on" and generation.emitted == 4
    info = [f.message for f in report.findings if f.id == "live.coverage"]
    assert any(m.startswith("group 'generation' (on): 2 of 4 declared spans seen") for m in info)
    assert "generation" in report.coverage_table()
    # a literal span of another algorithm is not counted missing from a GRPO run
    assert "rl.distillation.teacher_logprob" not in coverage["logprob"].declared


def test_undeclared_names_missing_attributes_wrong_types_and_values(spec, tmp_path):
    def emit(tracer):
        with tracer.start_as_current_span("rl.grpo.stpe", attributes={"rl.iteration": 1}):
            pass
        for _ in range(3):
            with tracer.start_as_current_span("rl.grpo.rollout", attributes={"rl.batch_size": 4}):
                pass
        with tracer.start_as_current_span(
            "rl.grpo.step", attributes={"rl.iteration": "three", "rl.algorithm": "reinforce"}
        ):
            pass
        with tracer.start_as_current_span(
            "rl.worker.generate",
            attributes={
                "gen_ai.provider.name": "torch",
                "gen_ai.operation.name": "text_completion",
                "gen_ai.provder.name": "x",
            },
        ):
            pass
        with tracer.start_as_current_span(
            "rl.vllm.generate_text",
            attributes={
                "gen_ai.provider.name": "vllm",
                "gen_ai.operation.name": "text_completion",
                "gen_ai.prompt": ["secret"],
            },
        ):
            pass

    path = write_traces(tmp_path, emit, spec=spec)
    report = live_check(spec, read_spans(path))
    assert ids(report.findings) == [
        "live.attribute_type",
        "live.attribute_value",
        "live.missing_attribute",
        "live.sensitive_not_redacted",
        "live.undeclared_attribute",
        "live.undeclared_span",
    ]
    messages = {f.id: f.message for f in report.findings}
    assert messages["live.undeclared_span"] == (
        "span 'rl.grpo.stpe' is not declared in the registry (did you mean 'rl.grpo.step'?)"
    )
    assert messages["live.missing_attribute"] == (
        "span 'rl.grpo.rollout': required attribute 'rl.iteration' is missing (seen 3 times)"
    )
    assert "'rl.iteration' must be an int, got str 'three'" in messages["live.attribute_type"]
    assert (
        "'rl.algorithm' = 'reinforce' is not one of the declared values: async_grpo"
        in messages["live.attribute_value"]
    )
    assert "(did you mean 'gen_ai.provider.name'?)" in messages["live.undeclared_attribute"]
    first = by_id(report.findings, "live.undeclared_span")[0]
    assert first.file == str(path) and first.line >= 1


def test_spans_of_switched_off_groups(spec, tmp_path):
    """The runtime emits only enabled groups; a span of an off group means something else did."""

    def emit(tracer):
        with spanspec.span("rl.grpo.job", **{"rl.algorithm": "grpo"}):
            with tracer.start_as_current_span("rl.grpo.generation", attributes={"rl.iteration": 0}):
                pass

    path = write_traces(tmp_path, emit, groups="default", spec=spec)
    report = live_check(spec, read_spans(path))
    off = by_id(report.findings, "live.group_off")
    assert [f.message for f in off] == [
        "span 'rl.grpo.generation' was emitted although its group 'generation' was off"
    ]
    assert {c.group: c.state for c in report.coverage}["generation"] == "off"
    # --groups overrides the resource attribute.
    report = live_check(spec, read_spans(path), groups="all")
    assert ids(report.findings) == [] and report.groups_source == "--groups all"
    with pytest.raises(spanspec.SpecError):
        live_check(spec, [], groups="no_such_group")


def test_unknown_enabled_groups_skip_the_check_with_information(spec, tmp_path):
    path = write_traces(tmp_path, grpo_steps(1), resource_groups=False, spec=spec)
    report = live_check(spec, read_spans(path))
    assert ids(report.findings) == []
    assert "live.groups_unknown" in ids(report.findings, "information")
    assert {c.state for c in report.coverage} == {"unknown"}


def test_required_coverage(spec, tmp_path):
    path = write_traces(tmp_path, grpo_steps(1), spec=spec)
    spans = read_spans(path)
    report = live_check(spec, spans, require_coverage={"step": 1.0, "generation": 0.5})
    assert ids(report.findings) == []
    report = live_check(spec, spans, require_coverage={"generation": 1.0, "weight*": 1.0})
    failed = sorted(
        f.message.split(" ", 2)[1]
        for f in report.findings
        if f.id == "live.coverage" and f.level == "violation"
    )
    assert failed == ["'generation'", "'weight_sync'"]
    assert any("at least 100% required" in f.message for f in report.findings)


def test_other_instrumentation_scopes_are_counted_not_checked(spec, tmp_path):
    def emit(tracer):
        with tracer.start_as_current_span("vllm.engine.step"):
            pass

    path = write_traces(tmp_path, emit, spec=spec, scope="vllm.tracing")
    report = live_check(spec, read_spans(path))
    assert ids(report.findings) == [] and report.spans_skipped == 1
    assert "vllm.tracing (1)" in by_id(report.findings, "live.other_scopes")[0].message
    assert ids(live_check(spec, read_spans(path), all_scopes=True).findings) == [
        "live.undeclared_span"
    ]


def test_library_attributes_are_not_undeclared(spec, tmp_path):
    path = write_traces(tmp_path, grpo_steps(1), spec=spec)

    def mark_truncated(request):
        for rs in request["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for s in ss["spans"]:
                    s.setdefault("attributes", []).append(
                        {"key": "spanspec.truncated", "value": {"boolValue": True}}
                    )

    rewrite_lines(path, mark_truncated)
    assert ids(live_check(spec, read_spans(path)).findings) == []
    assert json.loads(path.read_text().splitlines()[0])["resourceSpans"]
