"""python -m nemo_rl.telemetry settings CONFIG: effective settings and where each came from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[4]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("NEMO_RL_OTEL_", "NEMO_LENS_", "OTEL_"))
    }
    return subprocess.run(
        [sys.executable, "-m", "nemo_rl.telemetry", "settings", *args],
        capture_output=True,
        text=True,
        env={**base, **(env or {}), "PYTHONPATH": str(REPO)},
    )


def test_prints_each_setting_with_its_source(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("telemetry:\n  span_groups: per_step\n  exporter: file\n")
    done = run(str(cfg), "telemetry.export_rank=2", env={"NEMO_RL_OTEL_EXPORTER": "console"})
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines() if line.strip()}
    assert rows["span_groups"].split()[1:] == ["per_step", "config", "telemetry.span_groups"]
    assert rows["exporter"].split()[1:] == ["console", "env", "NEMO_RL_OTEL_EXPORTER"]
    assert rows["export_rank"].split()[1] == "2"
    assert rows["run_id"].split()[-1] == "generated"


def test_json_output(tmp_path):
    done = run("--json", env={"NEMO_LENS_LOGS_ENABLED": "true"})
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["settings"]
    assert rows["logs_enabled"] == {"value": True, "source": "env NEMO_LENS_LOGS_ENABLED"}


def test_settings_say_where_each_signal_goes_with_a_protocol_hint(tmp_path):
    # Phoenix's usual URL with the default (gRPC) protocol: the resolved endpoint, and the fix.
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:6006"}
    done = run("--json", env=env)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["settings"]["exporter"]["value"] == "otlp"
    (traces,) = out["destinations"]["traces"]
    assert traces.startswith("otlp grpc http://127.0.0.1:6006 (traces go over gRPC")
    assert "set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf" in traces
    assert out["destinations"]["logs"] == []
    env["OTEL_EXPORTER_OTLP_PROTOCOL"] = "http/protobuf"
    env["NEMO_RL_OTEL_EXPORTER"] = "otlp,prometheus,file"
    done = run(env=env)
    lines = {line.split()[0]: line for line in done.stdout.splitlines() if line.startswith("  ")}
    assert "otlp http/protobuf http://127.0.0.1:6006/v1/traces;" in lines["traces"]
    assert lines["metrics"].split()[1] == "file"
    assert "prometheus http://127.0.0.1:9464/metrics" in lines["metrics"]
    assert "otlp" not in lines["metrics"]  # prometheus takes the metrics from OTLP


def test_malformed_values_exit_2_with_the_message(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("telemetry:\n  export_sample_rate: 2\n")
    done = run(str(cfg))
    assert done.returncode == 2 and "export_sample_rate" in done.stderr
    done = run(env={"NEMO_RL_OTEL_ENABLED": "maybe"})
    assert done.returncode == 2 and "NEMO_RL_OTEL_ENABLED='maybe'" in done.stderr


def test_an_unknown_span_group_exits_2_as_init_would_fail(tmp_path):
    done = run(env={"NEMO_RL_OTEL_SPAN_GROUPS": "per_stpe"})
    assert done.returncode == 2 and "unknown group or preset 'per_stpe'" in done.stderr
    assert done.stdout == ""
