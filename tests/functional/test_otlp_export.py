"""Spans, metrics and logs over real OTLP (gRPC and HTTP/protobuf) into a receiver on 127.0.0.1."""

from __future__ import annotations

import logging
import os
import urllib.error
import urllib.request

import pytest

import spanspec
from spanspec import export, metrics, propagate
from spanspec.export import protocol_hint
from spanspec.settings import load_settings
from tests.otlp_receiver import OtlpReceiver, attrs, dead_endpoint, free_port

RESOURCES = {"traces": "resource_spans", "metrics": "resource_metrics", "logs": "resource_logs"}


@pytest.fixture
def clean_env(monkeypatch):
    for key in list(os.environ):
        if key.startswith(("NEMO_RL_OTEL_", "NEMO_LENS_", "OTEL_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "2")
    yield monkeypatch
    spanspec.deactivate()
    metrics.unbind()


@pytest.fixture(scope="module")
def receiver():
    with OtlpReceiver() as rx:
        yield rx


@pytest.fixture(scope="module")
def spec():
    return spanspec.load()


def point_for(rx, name):
    got = rx.metric_points().get(name, [])
    return got[-1] if got else (None, None)


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_spans_metrics_and_logs_arrive(clean_env, receiver, spec, protocol):
    endpoint = receiver.grpc_endpoint if protocol == "grpc" else receiver.http_endpoint
    clean_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    clean_env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    run_id = f"run-{protocol.replace('/', '-')}"
    settings = load_settings(
        {"logs_enabled": True, "run_id": run_id}, env=os.environ, conventions=spec.conventions
    )
    assert settings.exporter == "otlp"
    handle = export.setup(settings, resource={"rl.run_id": run_id}, register_atexit=False)
    spanspec.activate(spec, "all", tracer_provider=handle.tracer_provider, env_var=None)
    metrics.bind(spec, handle.meter_provider)

    with spanspec.span("rl.grpo.step", **{"rl.iteration": 7}) as step:
        with spanspec.span("rl.grpo.generation", **{"rl.iteration": 7, "rl.batch_size": 16}):
            carrier = propagate.inject()
        with propagate.attached(carrier):  # as a worker would, from the carrier
            with spanspec.span(
                "rl.worker.generate",
                **{"gen_ai.provider.name": "torch", "gen_ai.operation.name": "text_completion"},
            ):
                pass
        logging.getLogger("test.otlp").warning("step seven")
    metrics.record_metrics({"loss": 0.125, "num_tokens": 64}, prefix="train")
    metrics.record("gen_ai.client.token.usage", 9, {"gen_ai.token.type": "input"})
    stats = handle.shutdown(5)
    assert stats.spans_lost == 0, stats.summary()

    mine = [s for s in receiver.spans() if s.resource.get("rl.run_id") == run_id]
    by_name = {s.name: s for s in mine}
    assert set(by_name) == {"rl.grpo.step", "rl.grpo.generation", "rl.worker.generate"}
    step_rx = by_name["rl.grpo.step"]
    assert {s.protocol for s in mine} == {"grpc" if protocol == "grpc" else "http"}
    assert step_rx.span_id == format(step.get_span_context().span_id, "016x")
    assert step_rx.parent_span_id == ""
    assert by_name["rl.grpo.generation"].parent_span_id == step_rx.span_id
    assert by_name["rl.worker.generate"].parent_span_id == by_name["rl.grpo.generation"].span_id
    assert len({s.trace_id for s in mine}) == 1
    assert by_name["rl.grpo.generation"].attributes == {
        "rl.iteration": 7,
        "rl.batch_size": 16,
        "openinference.span.kind": "CHAIN",  # the registry's constant: a phase
    }
    assert step_rx.resource["service.name"] == "nemo-rl"
    assert step_rx.resource["process.pid"] == os.getpid()
    assert step_rx.scope == "spanspec"

    def mine_only(name):
        return [
            p for p, r in receiver.metric_points().get(name, []) if r.get("rl.run_id") == run_id
        ]

    assert mine_only("rl.policy.loss")[-1].as_double == 0.125
    assert mine_only("rl.tokens")[-1].as_int == 64
    assert mine_only("gen_ai.client.token.usage")[-1].sum == 9
    (duration,) = mine_only("rl.step.duration")[-1:]
    assert duration.count == 1
    assert duration.sum == pytest.approx((step_rx.end_ns - step_rx.start_ns) / 1e9)

    (log,) = [r for r in receiver.log_records() if r.trace_id.hex() == step_rx.trace_id]
    assert log.body.string_value == "step seven" and log.span_id.hex() == step_rx.span_id


def test_per_signal_variables_choose_protocol_endpoint_and_headers(clean_env, receiver, spec):
    run_id = "per-signal"
    with dead_endpoint() as dead:  # a signal the per-signal variables miss would fail here
        clean_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", dead)
        clean_env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        clean_env.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=team-a")
        clean_env.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
        clean_env.setenv(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{receiver.http_endpoint}/v1/traces"
        )
        clean_env.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-tenant=team-t")
        clean_env.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", receiver.grpc_endpoint)
        settings = load_settings({"run_id": run_id}, env=os.environ)
        assert settings.exporter == "otlp"
        handle = export.setup(settings, resource={"rl.run_id": run_id}, register_atexit=False)
        spanspec.activate(spec, "all", tracer_provider=handle.tracer_provider, env_var=None)
        metrics.bind(spec, handle.meter_provider)
        with spanspec.span("rl.grpo.step", **{"rl.iteration": 1}):
            pass
        metrics.record_metrics({"loss": 0.25}, prefix="train")
        stats = handle.shutdown(5)
    assert stats.spans_lost == 0 and not any(p.lost for p in stats.pipelines), stats.summary()
    assert {p.signal: p.destination for p in stats.pipelines} == {
        "traces": f"http/protobuf {receiver.http_endpoint}/v1/traces",
        "metrics": f"grpc {receiver.grpc_endpoint}",
    }

    (step,) = [s for s in receiver.spans() if s.resource.get("rl.run_id") == run_id]
    assert step.name == "rl.grpo.step" and step.protocol == "http"
    (loss,) = [
        p for p, r in receiver.metric_points()["rl.policy.loss"] if r.get("rl.run_id") == run_id
    ]
    assert loss.as_double == 0.25
    tenants = {
        (signal, protocol, headers.get("x-tenant"))
        for (signal, protocol, headers), (_, _, request) in zip(
            receiver.headers, receiver.requests, strict=True
        )
        if any(
            attrs(res.resource.attributes).get("rl.run_id") == run_id
            for res in getattr(request, RESOURCES[signal])
        )
    }
    assert tenants == {("traces", "http", "team-t"), ("metrics", "grpc", "team-a")}


# -- pointing a run at a backend ----------------------------------------------------------------
# A backend that refuses a signal switches that signal off with one warning (instead of "lost N
# of N"); prometheus serves /metrics on 127.0.0.1 (the next free port for the next process); a
# protocol that does not fit the port gets a hint; the handle says where each signal goes.


def start(settings, spec) -> export.TelemetryHandle:
    handle = export.setup(settings, register_atexit=False)
    spanspec.activate(spec, "all", tracer_provider=handle.tracer_provider, env_var=None)
    metrics.bind(spec, handle.meter_provider)
    return handle


@pytest.mark.parametrize(
    ("protocol", "refusal"), [("grpc", "gRPC UNIMPLEMENTED"), ("http/protobuf", "HTTP 405")]
)
def test_a_backend_that_refuses_metrics_gets_them_switched_off_once(
    clean_env, spec, caplog, protocol, refusal
):
    clean_env.setenv("OTEL_METRIC_EXPORT_INTERVAL", "100")
    with OtlpReceiver(refuse=("metrics",)) as rx:
        clean_env.setenv(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            rx.grpc_endpoint if protocol == "grpc" else rx.http_endpoint,
        )
        clean_env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
        handle = start(load_settings(env=os.environ), spec)
        with caplog.at_level(logging.WARNING, logger="spanspec.export"):
            for i in range(3):
                with spanspec.span("rl.grpo.step", **{"rl.iteration": i}):
                    metrics.record_metrics({"loss": 0.5}, prefix="train")
                handle.force_flush(3)
            stats = handle.shutdown(5)
        assert len(rx.spans()) == 3  # traces still go
    (row,) = [p for p in stats.pipelines if p.signal == "metrics"]
    assert row.refused == refusal and row.lost == 0 and row.not_sent >= 1, stats.summary()
    warnings = [r.getMessage() for r in caplog.records if "does not take metrics" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in caplog.records]
    assert f"({refusal}): metrics export switched off for this run" in warnings[0]
    assert "telemetry.exporter=...,prometheus" in warnings[0]
    assert "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT" in warnings[0]
    assert not [r for r in caplog.records if " lost " in r.getMessage()]


def test_prometheus_serves_metrics_on_the_first_free_port(clean_env, spec, tmp_path):
    base = free_port()
    settings = load_settings(
        {"exporter": "file,prometheus", "prometheus_port": base, "file_dir": str(tmp_path)},
        env={},
        conventions=spec.conventions,  # nemo_rl's: its service name on target_info
    )
    first = start(settings, spec)
    second = export.setup(settings, register_atexit=False)  # another process on the same node
    try:
        url = f"http://127.0.0.1:{base}/metrics"
        assert f"metrics -> file {tmp_path}/metrics.jsonl, prometheus {url}" in first.destinations()
        assert f"127.0.0.1:{base + 1}/metrics" in second.destinations()
        assert first.destinations().startswith(f"traces -> file {tmp_path}/traces.jsonl;")
        assert first.destinations().endswith("; logs off")
        metrics.record_metrics({"loss": 0.25, "num_tokens": 10}, prefix="train")
        text = urllib.request.urlopen(url, timeout=5).read().decode()
        assert "rl_policy_loss" in text and " 0.25" in text.split("rl_policy_loss{", 1)[1]
        assert "rl_tokens" in text
        assert 'service_name="nemo-rl"' in text  # the resource, on target_info
    finally:
        first.shutdown(5)
        second.shutdown(5)
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=2)
    assert (tmp_path / "metrics.jsonl").exists()  # the file still gets them too


def test_prometheus_takes_metrics_from_otlp_which_keeps_traces(clean_env, spec):
    with OtlpReceiver() as rx:
        clean_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.grpc_endpoint)
        settings = load_settings(
            {"exporter": "otlp,prometheus", "prometheus_port": free_port()}, env=os.environ
        )
        handle = start(settings, spec)
        with spanspec.span("rl.grpo.step", **{"rl.iteration": 0}):
            metrics.record_metrics({"loss": 0.5}, prefix="train")
        handle.shutdown(5)
        assert len(rx.spans()) == 1 and rx.metric_points() == {}
    assert [p.exporter for p in handle.pipelines if p.signal == "metrics"] == ["prometheus"]


@pytest.mark.parametrize(
    ("env", "hint"),
    [
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:6006"},
            "which is Phoenix's HTTP port; set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
        ),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318"},
            "which is the OTLP/HTTP port; set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
        ),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://h:9/v1/traces"}, "an OTLP/HTTP path"),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4317",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            },
            "which is the OTLP/gRPC port; set OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
        ),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4317"}, ""),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:6006",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            },
            "",
        ),
    ],
)
def test_a_protocol_that_does_not_fit_the_port_gets_a_hint(env, hint):
    protocol = env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    got = protocol_hint("traces", protocol, env)
    assert (hint in got) if hint else got == ""


def test_the_hint_is_a_warning_at_setup(clean_env, spec, caplog):
    clean_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:6006")
    with caplog.at_level(logging.WARNING, logger="spanspec.export"):
        handle = export.setup(
            load_settings({"metrics_enabled": False}, env=os.environ), register_atexit=False
        )
        handle.shutdown(1)
    (line,) = [
        r.getMessage() for r in caplog.records if "OTEL_EXPORTER_OTLP_PROTOCOL" in r.getMessage()
    ]
    assert line.startswith("telemetry: traces go over gRPC to http://127.0.0.1:6006")
