"""A real collector in between: spanspec -> rotel (OTLP in) -> rotel's OTLP exporter -> the receiver."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

import spanspec
from spanspec import export, metrics
from spanspec.settings import load_settings
from tests.otlp_receiver import OtlpReceiver, free_port

rotel = pytest.importorskip("rotel")
AGENT = Path(rotel.__file__).parent / "rotel-agent"


def wait_listening(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@pytest.fixture
def clean_env(monkeypatch):
    for key in list(os.environ):
        if key.startswith(("NEMO_RL_OTEL_", "NEMO_LENS_", "OTEL_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "3")
    yield monkeypatch
    spanspec.deactivate()
    metrics.unbind()


@pytest.mark.skipif(not AGENT.exists(), reason="rotel ships no agent binary for this platform")
@pytest.mark.parametrize(("ours", "theirs"), [("grpc", "grpc"), ("http/protobuf", "http")])
def test_spans_and_metrics_pass_through_rotel(clean_env, tmp_path, ours, theirs):
    with OtlpReceiver() as rx:
        grpc_port, http_port = free_port(), free_port()
        upstream = rx.grpc_endpoint if theirs == "grpc" else rx.http_endpoint
        agent = subprocess.Popen(
            [
                str(AGENT),
                "start",
                "--otlp-grpc-endpoint",
                f"127.0.0.1:{grpc_port}",
                "--otlp-http-endpoint",
                f"127.0.0.1:{http_port}",
                "--exporter",
                "otlp",
                "--otlp-exporter-endpoint",
                upstream,
                "--otlp-exporter-protocol",
                theirs,
                "--batch-timeout",
                "50ms",
                "--pid-file",
                str(tmp_path / "rotel.pid"),
                "--log-file",
                str(tmp_path / "rotel.log"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_listening(grpc_port if ours == "grpc" else http_port)
            clean_env.setenv(
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                f"http://127.0.0.1:{grpc_port if ours == 'grpc' else http_port}",
            )
            clean_env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", ours)
            handle = export.setup(
                load_settings({}, env=os.environ),
                resource={"rl.run_id": f"rotel-{theirs}"},
                register_atexit=False,
            )
            spec = spanspec.load()
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
            assert spans["rl.grpo.step"].attributes == {"rl.iteration": 3}
            assert spans["rl.grpo.step"].resource["rl.run_id"] == f"rotel-{theirs}"
            assert {s.protocol for s in spans.values()} == {"grpc" if theirs == "grpc" else "http"}
            assert rx.wait_until(lambda: "rl.policy.loss" in rx.metric_points(), timeout=10)
            point, resource = rx.metric_points()["rl.policy.loss"][-1]
            assert point.as_double == 0.5 and resource["service.name"] == "nemo-rl"
        finally:
            agent.terminate()
            try:
                agent.wait(5)
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.wait(5)
