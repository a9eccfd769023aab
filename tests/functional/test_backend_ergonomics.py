"""Pointing a run at a backend: a backend that refuses a signal switches that signal off with one
warning (instead of "lost N of N"), the prometheus exporter serves /metrics on 127.0.0.1 (the next
free port for the next process), a protocol that does not fit the port gets a hint, and the
handle says in one line where each signal goes."""

from __future__ import annotations

import logging
import os
import urllib.error
import urllib.request

import pytest

import spanspec
from spanspec import export, metrics
from spanspec.export import protocol_hint
from spanspec.settings import load_settings
from tests.otlp_receiver import OtlpReceiver, free_port


@pytest.fixture
def clean_env(monkeypatch):
    for key in list(os.environ):
        if key.startswith(("NEMO_RL_OTEL_", "NEMO_LENS_", "OTEL_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "2")
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "100")
    yield monkeypatch
    spanspec.deactivate()
    metrics.unbind()


@pytest.fixture(scope="module")
def spec():
    return spanspec.load()


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
