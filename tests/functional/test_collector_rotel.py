"""A real collector in between: spanspec -> rotel (OTLP in) -> rotel's OTLP exporter -> the receiver."""

from __future__ import annotations

import os

import pytest

import spanspec
from spanspec import export, metrics
from spanspec.settings import load_settings
from tests.collector import AGENT, rotel_agent
from tests.otlp_receiver import OtlpReceiver

pytest.importorskip("rotel")


@pytest.fixture
def clean_env(monkeypatch):
    for key in list(os.environ):
        if key.startswith(("NEMO_RL_OTEL_", "NEMO_LENS_", "OTEL_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "3")
    yield monkeypatch
    spanspec.deactivate()
    metrics.unbind()


@pytest.mark.skipif(AGENT is None, reason="rotel ships no agent binary for this platform")
@pytest.mark.parametrize(("ours", "theirs"), [("grpc", "grpc"), ("http/protobuf", "http")])
def test_spans_and_metrics_pass_through_rotel(clean_env, tmp_path, ours, theirs):
    with OtlpReceiver() as rx:
        upstream = rx.grpc_endpoint if theirs == "grpc" else rx.http_endpoint
        with rotel_agent(upstream, theirs, tmp_path) as agent:
            clean_env.setenv(
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                agent.grpc_endpoint if ours == "grpc" else agent.http_endpoint,
            )
            clean_env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", ours)
            spec = spanspec.load()
            handle = export.setup(
                load_settings({}, env=os.environ, conventions=spec.conventions),
                resource={"rl.run_id": f"rotel-{theirs}"},
                register_atexit=False,
            )
            spanspec.activate(spec, "all", tracer_provider=handle.tracer_provider, env_var=None)
            metrics.bind(spec, handle.meter_provider)
            with spanspec.span("rl.grpo.step", **{"rl.iteration": 3}):
                with spanspec.span("rl.grpo.rollout", **{"rl.iteration": 3}):
                    pass
            metrics.record_metrics({"loss": 0.5}, prefix="train")
            stats = handle.shutdown(5)
            assert stats.spans_lost == 0, stats.summary()

            spans = {s.name: s for s in rx.wait_for_spans(2, timeout=10)}
            assert set(spans) == {"rl.grpo.step", "rl.grpo.rollout"}
            assert spans["rl.grpo.rollout"].parent_span_id == spans["rl.grpo.step"].span_id
            assert spans["rl.grpo.step"].attributes == {
                "rl.iteration": 3,
                "openinference.span.kind": "CHAIN",  # the registry's constant
            }
            assert spans["rl.grpo.step"].resource["rl.run_id"] == f"rotel-{theirs}"
            assert {s.protocol for s in spans.values()} == {"grpc" if theirs == "grpc" else "http"}
            assert rx.wait_until(lambda: "rl.policy.loss" in rx.metric_points(), timeout=10)
            point, resource = rx.metric_points()["rl.policy.loss"][-1]
            assert point.as_double == 0.5 and resource["service.name"] == "nemo-rl"
