"""spanspec.export: providers, the OTLP/JSON file exporter, console, who exports, ids, accounting."""

from __future__ import annotations

import base64
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

import spanspec
from spanspec import export, metrics
from spanspec.export import _pipeline
from spanspec.settings import Settings, SettingsError, load_settings

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def clean_env(monkeypatch):
    for key in list(os.environ):
        if key.startswith(("NEMO_RL_OTEL_", "NEMO_LENS_", "OTEL_")):
            monkeypatch.delenv(key)
    yield monkeypatch
    spanspec.deactivate()
    metrics.unbind()


@pytest.fixture(scope="module")
def spec():
    return spanspec.load()


def start(settings: Settings, spec, **kwargs) -> export.TelemetryHandle:
    handle = export.setup(settings, register_atexit=False, **kwargs)
    spanspec.activate(spec, "all", tracer_provider=handle.tracer_provider, env_var=None)
    metrics.bind(spec, handle.meter_provider)
    return handle


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def file_spans(folder: Path) -> list[dict]:
    return file_spans_of((folder / "traces.jsonl").read_text().splitlines())


def file_spans_of(lines: list[str]) -> list[dict]:
    return [
        s
        for line in lines
        for rs in json.loads(line)["resourceSpans"]
        for ss in rs["scopeSpans"]
        for s in ss["spans"]
    ]


def to_proto_json(node):
    """OTLP/JSON (hex ids) back to protobuf JSON (base64 ids), to parse with json_format."""
    if isinstance(node, dict):
        return {
            k: base64.b64encode(bytes.fromhex(v)).decode()
            if k in ("traceId", "spanId", "parentSpanId")
            else to_proto_json(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [to_proto_json(v) for v in node]
    return node


def test_file_exporter_writes_otlp_json_a_collector_can_replay(clean_env, spec, tmp_path):
    settings = load_settings(
        {"file_dir": str(tmp_path), "logs_enabled": True}, env={}, conventions=spec.conventions
    )
    handle = start(settings, spec, resource={"rl.run_id": "r1"})
    with spanspec.span("rl.grpo.step", **{"rl.iteration": 4}):
        with spanspec.span("rl.grpo.rollout", **{"rl.iteration": 4}):
            logging.getLogger("test.file").warning("in the rollout")
    metrics.record_metrics({"loss": 0.5}, prefix="train")
    stats = handle.shutdown(5)
    assert stats.spans_exported == 2 and stats.spans_lost == 0

    # Every line of every file is one official export request in the OTLP/JSON encoding.
    requests = {}
    for name, message in (
        ("traces", ExportTraceServiceRequest),
        ("metrics", ExportMetricsServiceRequest),
        ("logs", ExportLogsServiceRequest),
    ):
        lines = (tmp_path / f"{name}.jsonl").read_text().splitlines()
        assert lines, name
        requests[name] = [
            json_format.Parse(json.dumps(to_proto_json(json.loads(line))), message())
            for line in lines
        ]
    (log,) = [
        lr
        for request in requests["logs"]
        for rl in request.resource_logs
        for sl in rl.scope_logs
        for lr in sl.log_records
        if lr.body.string_value == "in the rollout"
    ]

    lines = (tmp_path / "traces.jsonl").read_text().splitlines()
    request = ExportTraceServiceRequest()
    json_format.Parse(json.dumps(to_proto_json(json.loads(lines[0]))), request)
    (rs,) = request.resource_spans
    resource = {kv.key: kv.value for kv in rs.resource.attributes}
    assert resource["service.name"].string_value == "nemo-rl"
    assert resource["rl.run_id"].string_value == "r1"
    assert resource["process.pid"].int_value == os.getpid()

    rollout, step = file_spans(tmp_path)
    assert (rollout["name"], step["name"]) == ("rl.grpo.rollout", "rl.grpo.step")
    assert len(step["traceId"]) == 32 and len(step["spanId"]) == 16
    assert rollout["parentSpanId"] == step["spanId"] and "parentSpanId" not in step
    assert rollout["traceId"] == step["traceId"]
    assert step["kind"] == 1  # enums as integers
    assert {"startTimeUnixNano", "endTimeUnixNano", "attributes"} <= set(step)
    assert (log.trace_id.hex(), log.span_id.hex()) == (rollout["traceId"], rollout["spanId"])

    (metric_line,) = (tmp_path / "metrics.jsonl").read_text().splitlines()
    names = {
        m["name"]: m
        for rm in json.loads(metric_line)["resourceMetrics"]
        for sm in rm["scopeMetrics"]
        for m in sm["metrics"]
    }
    assert names["rl.policy.loss"]["gauge"]["dataPoints"][0]["asDouble"] == 0.5
    assert names["rl.step.duration"]["histogram"]["dataPoints"][0]["count"] == "1"


def test_span_durations_feed_histograms_only_while_their_group_is_on(clean_env, spec, tmp_path):
    handle = export.setup(load_settings({"file_dir": str(tmp_path)}, env={}), register_atexit=False)
    spanspec.activate(spec, "all,-rollout", tracer_provider=handle.tracer_provider, env_var=None)
    metrics.bind(spec, handle.meter_provider)
    for i in range(3):
        with spanspec.span("rl.grpo.step", **{"rl.iteration": i}):
            with spanspec.span("rl.grpo.rollout", **{"rl.iteration": i}):
                pass
    handle.shutdown(5)
    histograms = {
        m["name"]: m["histogram"]["dataPoints"]
        for line in read_lines(tmp_path / "metrics.jsonl")
        for rm in line["resourceMetrics"]
        for sm in rm["scopeMetrics"]
        for m in sm["metrics"]
        if "histogram" in m
    }
    assert [p["count"] for p in histograms["rl.step.duration"]] == ["3"]
    assert "rl.rollout.duration" not in histograms  # its group is off: no span, no duration


def test_open_spans_are_ended_as_truncated_and_exported(clean_env, spec, tmp_path):
    handle = start(load_settings({"file_dir": str(tmp_path)}, env={}), spec)
    outer = spanspec.span("rl.grpo.step", **{"rl.iteration": 1})
    outer.__enter__()
    with spanspec.span("rl.grpo.rollout", **{"rl.iteration": 1}):
        pass
    stats = handle.shutdown(5)
    outer.__exit__(None, None, None)  # detach its context (ending it again is a no-op)
    assert stats.truncated == 1
    by_name = {s["name"]: s for s in file_spans(tmp_path)}
    attrs = {a["key"]: a["value"] for a in by_name["rl.grpo.step"]["attributes"]}
    assert attrs["spanspec.truncated"] == {"boolValue": True}
    assert "spanspec.truncated" not in json.dumps(by_name["rl.grpo.rollout"])
    assert handle.shutdown() is stats  # idempotent


def test_console_lines_are_otlp_json_in_the_shared_console_file(clean_env, spec, tmp_path, capfd):
    """A process that does not own the console (a worker) appends its lines to
    ``<file_dir>/console.jsonl`` and writes nothing to stdout; the owner's copying is tested
    end to end by tests/functional/test_console_exporter.py."""
    settings = load_settings(
        {"exporter": "console", "metrics_enabled": False, "file_dir": str(tmp_path)}, env={}
    )
    handle = start(settings, spec, console_owner=False)
    for i in range(3):
        with spanspec.span("rl.grpo.step", **{"rl.iteration": i}):
            pass
    handle.shutdown(5)
    assert capfd.readouterr().out == ""
    assert "console.jsonl" in handle.destinations()
    names = [
        s["name"] for s in file_spans_of((tmp_path / "console.jsonl").read_text().splitlines())
    ]
    assert names == ["rl.grpo.step"] * 3


def test_logs_carry_the_active_trace_and_span_ids(clean_env, spec, tmp_path):
    handle = start(load_settings({"file_dir": str(tmp_path), "logs_enabled": True}, env={}), spec)
    with spanspec.span("rl.grpo.step", **{"rl.iteration": 1}) as span:
        logging.getLogger("test.telemetry").warning("inside the step")
    logging.getLogger("opentelemetry.test").warning("never exported")
    handle.shutdown(5)
    records = [
        lr
        for line in read_lines(tmp_path / "logs.jsonl")
        for rl in line["resourceLogs"]
        for sl in rl["scopeLogs"]
        for lr in sl["logRecords"]
    ]
    (record,) = [r for r in records if r["body"].get("stringValue") == "inside the step"]
    assert record["traceId"] == format(span.get_span_context().trace_id, "032x")
    assert record["spanId"] == format(span.get_span_context().span_id, "016x")
    assert not any("never exported" in json.dumps(r) for r in records)
    assert handle._log_handler is None  # detached at shutdown


def test_a_burst_within_the_queue_loses_nothing(clean_env, spec, tmp_path):
    handle = start(
        load_settings({"file_dir": str(tmp_path), "metrics_enabled": False}, env={}), spec
    )
    for i in range(20_000):
        with spanspec.span("rl.worker.train_microbatch", **{"rl.micro_batch": i}):
            pass
    stats = handle.shutdown(30)
    assert stats.spans_ended == 20_000
    assert stats.spans_exported == 20_000 and stats.spans_dropped == 0


class FastExporter(SpanExporter):
    """Returns at once: an exporter that always keeps up."""

    def __init__(self) -> None:
        self.count = 0

    def export(self, spans):
        self.count += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def test_a_2us_producer_loses_no_span_while_the_exporter_keeps_up(clean_env, tmp_path):
    # The SDK's default batch settings (2,048 slots) lose 3-6 % of these spans on a 2-core
    # box (15-21 % measured elsewhere) though the exporter returns at once: the export
    # thread waits for the GIL while the queue fills. The sizing setup() uses must lose none.
    fast = FastExporter()
    real = _pipeline._exporter
    clean_env.setattr(
        _pipeline,
        "_exporter",
        lambda name, signal_name, *rest: (
            fast if signal_name == "traces" else real(name, signal_name, *rest)
        ),
    )
    handle = export.setup(
        load_settings({"file_dir": str(tmp_path), "metrics_enabled": False}, env={}),
        register_atexit=False,
    )
    span = handle.tracer_provider.get_tracer("t").start_span("x")
    span.end()
    processors = handle.tracer_provider._active_span_processor
    produced = 200_000
    start = time.perf_counter()
    for _ in range(produced):  # the same ended span, offered back to back (~3 µs each here)
        processors.on_end(span)
    per_span = (time.perf_counter() - start) / produced
    stats = handle.shutdown(30)
    assert per_span < 20e-6, f"producer too slow to test the queue: {per_span * 1e6:.1f} µs"
    assert stats.spans_ended == produced + 1
    assert stats.spans_dropped == 0, stats.summary()
    assert fast.count == stats.spans_exported == produced + 1


def test_drops_beyond_the_queue_are_counted_and_warned_once(clean_env, spec, tmp_path, caplog):
    clean_env.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "64")
    clean_env.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "32")
    clean_env.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")
    caplog.set_level(logging.INFO, logger="spanspec.export")
    handle = start(
        load_settings({"file_dir": str(tmp_path), "metrics_enabled": False}, env={}), spec
    )
    for i in range(3_000):
        with spanspec.span("rl.worker.train_microbatch", **{"rl.micro_batch": i}):
            pass
    stats = handle.shutdown(10)
    assert stats.spans_ended == 3_000
    assert stats.spans_dropped > 0
    assert stats.spans_dropped + stats.spans_exported == 3_000
    assert len(file_spans(tmp_path)) == stats.spans_exported
    full = [r for r in caplog.records if "queue (64) is full" in r.getMessage()]
    assert len(full) == 1
    assert any("lost" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)


@pytest.mark.parametrize(
    ("strategy", "extra", "exporting_ranks"),
    [
        ("single_rank", {}, [0]),
        ("single_rank", {"export_rank": 2}, [2]),
        ("all_ranks", {}, [0, 1, 2, 3]),
        ("sampled", {"export_sample_rate": 0.0}, [0]),
        ("sampled", {"export_sample_rate": 1.0}, [0, 1, 2, 3]),
    ],
)
def test_export_strategies(strategy, extra, exporting_ranks):
    s = load_settings({"export_strategy": strategy, **extra}, env={})
    assert [r for r in range(4) if export.should_export(s, r, 4)] == exporting_ranks


def test_sampled_is_stable_for_a_run_and_near_its_rate():
    s = load_settings(
        {"export_strategy": "sampled", "export_sample_rate": 0.25, "run_id": "r"}, env={}
    )
    picked = [r for r in range(1, 2001) if export.should_export(s, r, 2001)]
    assert picked == [r for r in range(1, 2001) if export.should_export(s, r, 2001)]
    assert 400 < len(picked) < 600


def test_first_rank_per_node(monkeypatch):
    s = load_settings(
        {"export_strategy": "first_rank_per_node", "run_id": f"t{os.getpid()}"}, env={}
    )
    assert export.should_export(s, 5, 8, local_rank=0)
    assert not export.should_export(s, 4, 8, local_rank=1)
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert export.should_export(s, 3, 8)
    monkeypatch.delenv("LOCAL_RANK")
    monkeypatch.delenv("SLURM_LOCALID", raising=False)
    code = (
        "import sys; from spanspec import export, settings as S\n"
        f"s = S.load_settings({{'export_strategy': 'first_rank_per_node', 'run_id': 'lock{os.getpid()}'}}, env={{}})\n"
        "print(export.should_export(s, int(sys.argv[1]), 2)); sys.stdout.flush(); sys.stdin.read()\n"
    )
    first = subprocess.Popen(
        [sys.executable, "-c", code, "0"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert first.stdout.readline().strip() == "True"
    second = subprocess.run(
        [sys.executable, "-c", code, "1"], input="", capture_output=True, text=True
    )
    first.communicate("")
    assert second.stdout.strip() == "False"


def test_first_rank_per_node_claims_one_process_per_named_node(monkeypatch):
    # Several Ray nodes on one host: the node id, not the host, decides who is first.
    for var in ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    s = load_settings(
        {"export_strategy": "first_rank_per_node", "run_id": f"nodes{os.getpid()}"}, env={}
    )
    assert export.should_export(s, 0, 4, node="node-a")
    assert export.should_export(s, 1, 4, node="node-b")
    code = (
        "from spanspec import export, settings as S\n"
        f"s = S.load_settings({{'export_strategy': 'first_rank_per_node', 'run_id': 'nodes{os.getpid()}'}}, env={{}})\n"
        "print(export.should_export(s, 2, 4, node='node-a'), export.should_export(s, 3, 4, node='node-c'))\n"
    )
    other = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "SLURM_LOCALID")},
    )
    assert other.stdout.split() == ["False", "True"], other.stderr


def test_not_exporting_builds_nothing_and_imports_no_sdk(clean_env):
    code = textwrap.dedent(
        """
        import sys
        from spanspec import export
        from spanspec.settings import load_settings
        h = export.setup(load_settings({"export_strategy": "single_rank"}, env={}), rank=3, world_size=4)
        off = export.setup(load_settings({"enabled": False}, env={}))
        print(h.is_exporting, off.is_exporting, off.reason, "opentelemetry.sdk" in sys.modules)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.stdout.split() == ["False", "False", "telemetry", "disabled", "False"], out.stderr


def test_bad_otlp_protocol_is_a_configuration_error(clean_env):
    clean_env.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json")
    with pytest.raises(SettingsError, match="OTEL_EXPORTER_OTLP_TRACES_PROTOCOL='http/json'"):
        export.setup(load_settings({"exporter": "otlp"}, env={}), register_atexit=False)


def test_otlp_endpoint_follows_the_standard_variables():
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}
    assert export.otlp_endpoint("traces", "http/protobuf", env) == "http://c:4318/v1/traces"
    assert export.otlp_endpoint("metrics", "grpc", env) == "http://c:4318/"
    env["OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"] = "http://m:1/x"
    assert export.otlp_endpoint("metrics", "http/protobuf", env) == "http://m:1/x"
    assert (
        export.otlp_protocol("logs", {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"})
        == "http/protobuf"
    )
    assert export.otlp_protocol("logs", {}) == "grpc"


def test_resource_names_scheduler_and_kubernetes_ids():
    env = {
        "SLURM_JOB_ID": "77",
        "SLURM_PROCID": "3",
        "KUBERNETES_SERVICE_HOST": "10.0.0.1",
        "POD_NAME": "trainer-0",
        "POD_NAMESPACE": "rl",
    }
    attrs = export.base_resource_attributes(Settings(service_name="svc"), env)
    assert attrs["service.name"] == "svc" and attrs["process.pid"] == os.getpid()
    assert attrs["slurm.job.id"] == "77" and attrs["slurm.proc.id"] == "3"
    assert attrs["k8s.pod.name"] == "trainer-0" and attrs["k8s.namespace.name"] == "rl"
    assert not any(k.startswith("k8s.") for k in export.base_resource_attributes(Settings(), {}))


IDS = textwrap.dedent(
    """
    import random, sys
    random.seed(1234)
    from spanspec import export
    from spanspec.settings import load_settings
    s = load_settings({"file_dir": sys.argv[1], "metrics_enabled": False}, env={})
    h = export.setup(s, register_atexit=False)
    tracer = h.tracer_provider.get_tracer("t")
    for _ in range(5):
        span = tracer.start_span("x"); span.end()
        c = span.get_span_context()
        print(f"{c.trace_id:032x} {c.span_id:016x}")
    h.shutdown(5)
    """
)


def test_ids_differ_across_processes_that_seed_random_alike(tmp_path):
    runs = [
        subprocess.run(
            [sys.executable, "-c", IDS, str(tmp_path / str(i))],
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        for i in range(2)
    ]
    ids = [set(r.stdout.split()) for r in runs]
    assert all(len(i) == 10 for i in ids), [r.stderr for r in runs]
    assert not ids[0] & ids[1]


KILLED = textwrap.dedent(
    """
    import sys, time
    import spanspec
    from spanspec import export
    from spanspec.settings import load_settings
    h = export.setup(load_settings({"file_dir": sys.argv[1], "metrics_enabled": False}, env={}))
    spanspec.activate(spanspec.load(), "all", tracer_provider=h.tracer_provider, env_var=None)
    i = 0
    while True:
        for _ in range(200):
            with spanspec.span("rl.worker.train_microbatch", **{"rl.micro_batch": i}):
                i += 1
        h.force_flush(5)
    """
)


def test_files_stay_valid_when_the_process_is_killed(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", KILLED, str(tmp_path)], cwd=REPO)
    path = tmp_path / "traces.jsonl"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (not path.exists() or path.read_text().count("\n") < 5):
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    text = path.read_text()
    complete = text.split("\n")[:-1]  # anything after the last newline is the one torn line
    assert len(complete) >= 5
    for line in complete:
        assert json.loads(line)["resourceSpans"]


def test_files_are_appended_to_never_overwritten(clean_env, spec, tmp_path):
    for iteration in range(2):  # two runs (or two processes) sharing one folder
        handle = start(load_settings({"file_dir": str(tmp_path)}, env={}), spec)
        with spanspec.span("rl.grpo.step", **{"rl.iteration": iteration}):
            pass
        metrics.record_metrics({"loss": 0.5}, prefix="train")
        handle.shutdown(5)
        spanspec.deactivate()
        metrics.unbind()
    assert len((tmp_path / "traces.jsonl").read_text().splitlines()) == 2
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 2
    iterations = [
        a["value"]["intValue"]
        for s in file_spans(tmp_path)
        for a in s["attributes"]
        if a["key"] == "rl.iteration"
    ]
    assert iterations == ["0", "1"]


def test_a_line_torn_by_a_kill_does_not_swallow_the_next_runs_lines(clean_env, spec, tmp_path):
    torn = '{"resourceSpans":[{"resource":{"attr'  # a run killed mid-write, then resumed here
    (tmp_path / "traces.jsonl").write_text(torn)
    handle = start(
        load_settings({"file_dir": str(tmp_path), "metrics_enabled": False}, env={}), spec
    )
    with spanspec.span("rl.grpo.step", **{"rl.iteration": 1}):
        pass
    handle.shutdown(5)
    lines = (tmp_path / "traces.jsonl").read_text().splitlines()
    assert lines[0] == torn  # the one line lost, left as it was
    assert [s["name"] for s in file_spans_of(lines[1:])] == ["rl.grpo.step"]


def test_concurrent_shutdowns_share_one_result(clean_env, spec, tmp_path):
    import threading

    handle = start(load_settings({"file_dir": str(tmp_path)}, env={}), spec)
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(handle.shutdown(5))) for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(results) == 3 and all(r is results[0] for r in results)


# -- prometheus: labels, and pushing (remote write) to an endpoint that fails ------------------


def test_label_attributes_become_attributes_of_every_point():
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.resources import Resource

    from spanspec.export.prometheus import with_labels

    reader = InMemoryMetricReader()
    provider = MeterProvider(
        metric_readers=[reader], resource=Resource({"run": "r1", "rank": 3, "host": "h"})
    )
    provider.get_meter("t").create_counter("c").add(1, {"rank": "own"})
    data = with_labels(reader.get_metrics_data(), ("run", "rank", "absent"))
    (point,) = data.resource_metrics[0].scope_metrics[0].metrics[0].data.data_points
    assert dict(point.attributes) == {"run": "r1", "rank": "own"}  # the point's own value wins


def test_a_push_to_a_silent_prometheus_is_bounded_and_counted_as_dropped(clean_env, spec):
    """A receiver that accepts the connection and never answers: shutdown still returns within
    its bound, and the final export's points are in the process's dropped figure."""
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    url = f"http://127.0.0.1:{silent.getsockname()[1]}/api/v1/write"
    try:
        settings = load_settings(
            {"exporter": "prometheus", "prometheus_remote_write_url": url}, env={}
        )
        handle = start(settings, spec, resource={"rl.run_id": "r"}, label_attributes=["rl.run_id"])
        assert (
            handle.destinations()
            == f"traces off; metrics -> prometheus remote write {url}; logs off"
        )
        metrics.record_metrics({"loss": 0.5}, "train")
        started = time.monotonic()
        stats = handle.shutdown(timeout_s=1.0)
        assert time.monotonic() - started < 3.0
        cost = stats.cost()
        assert cost.points > 0 and cost.points_dropped == cost.points
    finally:
        silent.close()


def test_remote_write_without_cramjam_is_a_settings_error(clean_env, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "cramjam" else real(name, *a)
    )
    settings = load_settings(
        {"exporter": "prometheus", "prometheus_remote_write_url": "http://h:1/api/v1/write"},
        env={},
    )
    with pytest.raises(SettingsError, match=r"prometheus_remote_write_url: .*pip install cramjam"):
        export.setup(settings, register_atexit=False)


def test_a_span_cut_short_by_shutdown_feeds_no_duration_histogram(clean_env, spec, tmp_path):
    settings = load_settings({"exporter": "file", "file_dir": str(tmp_path)}, env={})
    handle = start(settings, spec)
    with spanspec.span("rl.grpo.step", **{"rl.iteration": 0}):
        pass
    cut = spanspec.span("rl.grpo.step", **{"rl.iteration": 1})
    cut.__enter__()  # still open at shutdown: ended there as truncated
    try:
        handle.shutdown(timeout_s=5)
    finally:
        cut.__exit__(None, None, None)  # the context it made current is restored
    counts = [
        point["count"]
        for line in read_lines(tmp_path / "metrics.jsonl")
        for rm in line["resourceMetrics"]
        for sm in rm["scopeMetrics"]
        for m in sm["metrics"]
        if m["name"] == "rl.step.duration"
        for point in m["histogram"]["dataPoints"]
    ]
    assert counts and int(counts[-1]) == 1
