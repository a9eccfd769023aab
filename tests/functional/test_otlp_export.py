"""Spans, metrics and logs over real OTLP (gRPC and HTTP/protobuf) into a receiver on 127.0.0.1."""

from __future__ import annotations

import logging
import os

import pytest

import spanspec
from spanspec import export, metrics, propagate
from spanspec.settings import load_settings
from tests.otlp_receiver import OtlpReceiver, attrs, dead_endpoint

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
    settings = load_settings({"logs_enabled": True, "run_id": run_id}, env=os.environ)
    assert settings.exporter == "otlp"
    handle = export.setup(settings, resource={"rl.run_id": run_id}, register_atexit=False)
    spanspec.activate(spec, "all", tracer_provider=handle.tracer_provider, env_var=None)
    metrics.bind(spec, handle.meter_provider)

    with spanspec.span("rl.grpo.step", **{"rl.iteration": 7}) as step:
        with spanspec.span("rl.grpo.generation", **{"rl.iteration": 7, "rl.batch_size": 16}):
            carrier = propagate.inject()
        with propagate.attached(carrier):  # as a worker would, from the carrier
            with spanspec.span("rl.worker.generate", **{"gen_ai.system": "torch"}):
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
    assert by_name["rl.grpo.generation"].attributes == {"rl.iteration": 7, "rl.batch_size": 16}
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
