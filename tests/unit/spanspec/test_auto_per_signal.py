"""``exporter: auto`` with an endpoint for only some signals: those go to OTLP, the others stay on
their file exporter (not the default localhost:4317, where nothing listens); an explicit ``otlp``
for a signal with no endpoint says in its destination that it is the default."""

from __future__ import annotations

from spanspec.export import planned_destinations
from spanspec.settings import load_settings

TRACES_ONLY = {
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:5000/v1/traces",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
}


def test_auto_sends_only_the_signals_with_an_endpoint_to_otlp(tmp_path):
    settings = load_settings({"file_dir": str(tmp_path)}, env=TRACES_ONLY, prefix="X_")
    where = planned_destinations(settings, TRACES_ONLY)
    assert where["traces"] == ["otlp http/protobuf http://127.0.0.1:5000/v1/traces"]
    assert where["metrics"] == [f"file {tmp_path / 'metrics.jsonl'}"]
    assert "file for metrics" in settings.sources["exporter"]
    assert settings.to_env()["X_EXPORTER"] == "auto"  # a child resolves it from the same env


def test_auto_with_the_common_endpoint_sends_every_signal_to_otlp(tmp_path):
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317"}
    settings = load_settings({"file_dir": str(tmp_path)}, env=env, prefix="X_")
    where = planned_destinations(settings, env)
    assert where["traces"] == ["otlp grpc http://127.0.0.1:4317"]
    assert where["metrics"] == ["otlp grpc http://127.0.0.1:4317"]
    assert settings.to_env()["X_EXPORTER"] == "otlp"


def test_explicit_otlp_without_an_endpoint_says_it_goes_to_the_default(tmp_path):
    settings = load_settings(
        {"file_dir": str(tmp_path), "exporter": "file,otlp"}, env=TRACES_ONLY, prefix="X_"
    )
    (_, otlp) = planned_destinations(settings, TRACES_ONLY)["metrics"]
    assert otlp == (
        "otlp grpc http://localhost:4317 (the default: neither "
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT nor OTEL_EXPORTER_OTLP_ENDPOINT is set)"
    )
