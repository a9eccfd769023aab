"""No sensitive value in clear, anywhere: values planted in every attribute the registry declares
sensitive, by every route, then every exported file and every captured log line is searched.

Routes: ``span()`` keywords, ``set_attribute`` and ``set_attributes`` on the span it returns, an
event's attributes, a value of the wrong type (dropped, and the warning must not quote it),
strict mode (the error must not quote it), a log call's ``extra=`` attributes exported to
``logs.jsonl``, ``OTEL_RESOURCE_ATTRIBUTES`` (on every signal's resource, and Prometheus's
``target_info``), and the settings table logged at start-up (``user_id``). The process runs apart so its logging, env and telemetry are its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.otlp_receiver import free_port

ROOT = Path(__file__).resolve().parents[2]
SECRETS = {
    "user_id": "sekrit-user-0001",
    "kwarg": "sekrit-kwarg-0002",
    "set_attribute": "sekrit-setattr-0003",
    "set_attributes": "sekrit-setattrs-0004",
    "wrong_type": "sekrit-wrong-0005",
    "strict": "sekrit-strict-0006",
    "prompt": "sekrit-prompt-0007",
    "event": "sekrit-event-0008",
    "log_attribute": "sekrit-logattr-0009",
    "resource": "sekrit-resource-0010",
}

CHILD = textwrap.dedent(
    """
    import json, logging, sys, urllib.request
    import spanspec
    from nemo_rl.telemetry import (
        RunIdentity, TelemetryConfig, init_telemetry_driver, shutdown_telemetry
    )

    S = json.loads(sys.argv[2])
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    block = TelemetryConfig(
        exporter="file,console,prometheus",
        prometheus_port=int(sys.argv[3]),
        span_groups="all",
        logs_enabled=True,
    )
    # Logs the settings table (user_id: env).
    handle = init_telemetry_driver(block, RunIdentity("grpo", run_dir=sys.argv[1]))
    handle.meter_provider.get_meter("user.code").create_counter("user.count").add(1)
    (url,) = [p.destination for p in handle.pipelines if p.exporter == "prometheus"]
    with urllib.request.urlopen(url) as page:
        print("PROMETHEUS", page.read().decode())
    job = {"rl.algorithm": "grpo", "enduser.id": S["kwarg"]}
    with spanspec.span("rl.grpo.job", **job) as s:
        s.set_attribute("enduser.id", S["set_attribute"])
        s.add_event("who", {"enduser.id": S["event"]})
    with spanspec.span("rl.grpo.job", **{"rl.algorithm": "grpo"}) as s:
        s.set_attributes({"enduser.id": S["set_attributes"], "rl.model": "m"})
    with spanspec.span("rl.grpo.job", **{"rl.algorithm": "grpo", "enduser.id": [S["wrong_type"]]}):
        pass
    with spanspec.span("rl.vllm.generate_text", **{"gen_ai.system": "vllm"}) as s:
        s.set_attribute("gen_ai.prompt", [S["prompt"], "2+2="])
    logging.getLogger("user.code").warning("a plain log line")
    logging.getLogger("user.code").warning("who", extra={"enduser.id": S["log_attribute"]})
    spanspec.activate(spanspec.load(), "all", strict=True, env_var=None)
    try:
        with spanspec.span("rl.grpo.job", **{"rl.algorithm": "grpo", "enduser.id": 7.5}):
            pass
    except spanspec.SpecError as exc:
        logging.getLogger("user.code").error("strict: %s", exc)
    try:
        with spanspec.span("rl.grpo.job", **{"rl.algorithm": "grpo", "enduser.id": {S["strict"]: 1}}):
            pass
    except spanspec.SpecError as exc:
        logging.getLogger("user.code").error("strict: %s", exc)
    shutdown_telemetry()
    """
)


def test_no_sensitive_value_reaches_any_file_or_log(tmp_path):
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("NEMO_RL_OTEL_", "NEMO_LENS_", "OTEL_"))
    }
    env["NEMO_RL_OTEL_USER_ID"] = SECRETS["user_id"]
    env["OTEL_BLRP_SCHEDULE_DELAY"] = "50"
    env["OTEL_RESOURCE_ATTRIBUTES"] = f"team=rl,enduser.id={SECRETS['resource']}"
    r = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path), json.dumps(SECRETS), str(free_port())],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    files = sorted((tmp_path / "telemetry").glob("*.jsonl"))
    assert {f.name for f in files} >= {"traces.jsonl", "logs.jsonl"}
    everything = {"stdout (console exporter)": r.stdout, "stderr (logs)": r.stderr}
    everything.update({f.name: f.read_text() for f in files})
    for where, text in everything.items():
        for route, secret in SECRETS.items():
            assert secret not in text, f"{route} value found in {where}"
    # the routes were really taken: the spans are there, redacted, and the logs were exported
    traces = everything["traces.jsonl"]
    assert traces.count("[REDACTED]") >= 4
    logs = everything["logs.jsonl"]
    assert "a plain log line" in logs and "strict:" in logs and "user_id" in logs
    assert "must be" in r.stderr  # the wrong-type warning, without the value
    assert logs.count('"enduser.id"') >= 2  # the log call's attribute and the resource's
    metrics = everything["metrics.jsonl"]
    assert '"team"' in metrics and '"enduser.id"' in metrics and "[REDACTED]" in metrics
    # The console exporter owns stdout: the child's print went to stderr.
    prometheus = r.stderr.split("PROMETHEUS", 1)[1]
    assert "target_info{" in prometheus and 'enduser_id="[REDACTED]"' in prometheus
