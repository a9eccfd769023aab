"""No URL credential (userinfo, query string, fragment) and no sensitive configured value in clear,
in any output of the project: endpoints with planted secrets are given by every variable that
names one, in every shape (http/https, gRPC bare host:port, malformed), and every route that
shows an endpoint is taken: ``python -m nemo_rl.telemetry settings`` (table and JSON), the
errors for a bad endpoint, and a run exporting to an endpoint nobody listens on (its export
warnings, the SDK's own lines and the shutdown loss lines). Config values of the wrong type for
a sensitive setting go through ``spanspec check``, ``settings`` and the run's config check.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.otlp_receiver import free_port

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SECRET_USER, SECRET_PASS, SECRET_TOKEN, SECRET_FRAG = "sekuser91", "sekpass92", "sektok93", "sekf94"
SECRETS = (SECRET_USER, SECRET_PASS, SECRET_TOKEN, SECRET_FRAG)


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("NEMO_RL_OTEL_", "NEMO_LENS_", "OTEL_", "SPANSPEC_"))
    }
    env.update(extra)
    return env


def _clean(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, text
    assert "Traceback" not in text, text


def _endpoints(port: int) -> list[str]:
    """Endpoint shapes carrying the planted secrets (generated: every combination)."""
    out = []
    for scheme, userinfo, query, fragment in itertools.product(
        ("http://", "https://", ""),
        ("", f"{SECRET_USER}@", f"{SECRET_USER}:{SECRET_PASS}@"),
        ("", f"?token={SECRET_TOKEN}&x=1"),
        ("", f"#{SECRET_FRAG}"),
    ):
        if not (userinfo or query or fragment):
            continue
        path = "/v1/traces" if scheme and query else ""
        out.append(f"{scheme}{userinfo}127.0.0.1:{port}{path}{query}{fragment}")
    return out


@pytest.mark.parametrize(
    "var", ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
)
def test_settings_never_shows_url_credentials(var):
    for endpoint in _endpoints(4317):
        for args in (["settings"], ["settings", "--json"]):
            r = subprocess.run(
                [sys.executable, "-m", "nemo_rl.telemetry", *args],
                env=_env({var: endpoint, "NEMO_RL_OTEL_EXPORTER": "otlp"}),
                capture_output=True,
                text=True,
                cwd=ROOT,
                timeout=60,
            )
            _clean(r.stdout + r.stderr)
            if r.returncode == 0:
                assert "127.0.0.1:4317" in r.stdout and "***" in r.stdout, r.stdout
            else:  # a shape the SDK cannot take: one line naming the variable
                assert r.returncode == 2 and var in r.stderr, r.stderr


@pytest.mark.parametrize(
    "endpoint",
    [
        f"ftp://{SECRET_USER}:{SECRET_PASS}@?token={SECRET_TOKEN}",
        f"http://{SECRET_USER}:{SECRET_PASS}@:notaport/?token={SECRET_TOKEN}",
        f"{SECRET_USER}:{SECRET_PASS}@?token={SECRET_TOKEN}",
    ],
)
def test_a_bad_endpoint_error_shows_no_credentials(endpoint):
    r = subprocess.run(
        [sys.executable, "-m", "nemo_rl.telemetry", "settings"],
        env=_env({"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "NEMO_RL_OTEL_EXPORTER": "otlp"}),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" in r.stderr and "expected a URL" in r.stderr
    _clean(r.stdout + r.stderr)


def test_remote_write_url_credentials_are_masked():
    url = f"http://{SECRET_USER}:{SECRET_PASS}@127.0.0.1:9/api/v1/write?t={SECRET_TOKEN}"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "nemo_rl.telemetry",
            "settings",
            "telemetry.exporter=prometheus",
            f"telemetry.prometheus_remote_write_url={url}",
        ],
        env=_env({}),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    _clean(r.stdout + r.stderr)
    assert "remote write http://***@127.0.0.1:9/api/v1/write?***" in r.stdout


RUN = textwrap.dedent(
    """
    import logging, sys
    import spanspec
    from nemo_rl.telemetry import (
        RunIdentity, TelemetryConfig, init_telemetry_driver, shutdown_telemetry
    )
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    init_telemetry_driver(
        TelemetryConfig(exporter="otlp", span_groups="all", shutdown_timeout_s=2),
        RunIdentity("grpo", run_dir=sys.argv[1]),
    )
    for i in range(20):
        with spanspec.span("rl.worker.train_microbatch", **{"rl.micro_batch": i}):
            pass
    shutdown_telemetry()
    """
)


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_export_warnings_and_loss_lines_show_no_credentials(tmp_path, protocol):
    port = free_port()  # nobody listens: every export fails and is reported
    endpoint = f"http://{SECRET_USER}:{SECRET_PASS}@127.0.0.1:{port}?token={SECRET_TOKEN}"
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        "OTEL_EXPORTER_OTLP_TIMEOUT": "1",
        "OTEL_BSP_SCHEDULE_DELAY": "50",
    }
    r = subprocess.run(
        [sys.executable, "-c", RUN, str(tmp_path)],
        env=_env(env),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert f"127.0.0.1:{port}" in out  # the endpoint is named, without its credentials
    assert "***@" in out, out
    _clean(out)


def test_a_sensitive_setting_of_the_wrong_type_is_not_echoed(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(f"telemetry:\n  user_id: [{SECRET_USER}]\n")
    check = subprocess.run(
        [str(BIN / "spanspec"), "check", str(ROOT / "schemas/span_groups.yaml"), str(config)],
        env=_env({}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 1 and "run.yaml:2:12:" in check.stdout, check.stdout
    assert "telemetry.user_id=[REDACTED]" in check.stdout
    settings = subprocess.run(
        [sys.executable, "-m", "nemo_rl.telemetry", "settings", str(config)],
        env=_env({}),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert settings.returncode == 2 and "telemetry.user_id" in settings.stderr
    env = _env({"NEMO_RL_OTEL_SERVICE_NAME": "", "NEMO_RL_OTEL_USER_ID": ""})
    env_wrong = subprocess.run(
        [
            sys.executable,
            "-m",
            "nemo_rl.telemetry",
            "settings",
            f"telemetry.user_id=[{SECRET_PASS}]",
        ],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert env_wrong.returncode == 2
    for r in (check, settings, env_wrong):
        _clean(r.stdout + r.stderr)
