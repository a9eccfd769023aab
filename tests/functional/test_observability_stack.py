"""scripts/observability_stack.sh as a user runs it: `up` starts Phoenix, Prometheus and rotel on
127.0.0.1; a GRPO run sent to rotel arrives in Phoenix whole (read back with Phoenix's own client:
the same span count and ids as the run's traces.jsonl, the run's project, a step found by its
iteration) and its metrics in Prometheus; `down` stops everything it started.

Needs the stack's venv (``bash scripts/observability_stack.sh install``, which scripts/test.sh
runs as root) and Debian's prometheus; skipped without them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spanspec.otlp_json import read_spans
from tests.backends import prometheus_series, run_env
from tests.otlp_receiver import free_port

ROOT = Path(__file__).resolve().parents[2]
STACK_VENV = Path(os.environ.get("STACK_VENV", ROOT / ".stack" / "venv"))
STACK_PYTHON = STACK_VENV / "bin" / "python"
pytestmark = [
    pytest.mark.ray,
    pytest.mark.slow,
    pytest.mark.skipif(
        not (STACK_VENV / "bin" / "phoenix").exists() or shutil.which("prometheus") is None,
        reason="needs `bash scripts/observability_stack.sh install` and Debian's prometheus",
    ),
]
STEPS = 3
PROJECT = "stack-test-run"


def phoenix(port: int, project: str, iteration: int | None = None) -> dict:
    args = [str(STACK_PYTHON), "tests/phoenix_query.py", f"http://127.0.0.1:{port}", project]
    done = subprocess.run(
        [*args, *([str(iteration)] if iteration is not None else [])],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    folder = tmp_path_factory.mktemp("stack")
    ports = {
        "PHOENIX_PORT": free_port(),
        "PHOENIX_GRPC_PORT": free_port(),
        "ROTEL_GRPC_PORT": free_port(),
        "ROTEL_HTTP_PORT": free_port(),
        "PROMETHEUS_PORT": free_port(),
        "METRICS_PORT": free_port(),
    }
    env = {
        **run_env(),
        **{k: str(v) for k, v in ports.items()},
        "STACK_DIR": str(folder),
        "STACK_VENV": str(STACK_VENV),
    }
    script = ["bash", "scripts/observability_stack.sh"]
    up = subprocess.run(
        [*script, "up"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=400
    )
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        yield ports, env, up.stdout, folder
    finally:
        down = subprocess.run(
            [*script, "down"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
        )
        assert down.returncode == 0, down.stderr
        for name in ("phoenix", "prometheus", "rotel"):
            assert not (folder / f"{name}.pid").exists()


@pytest.fixture(scope="module")
def run(stack, tmp_path_factory):
    ports, *_ = stack
    log_dir = tmp_path_factory.mktemp("run")
    env = {
        **run_env(),
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{ports['ROTEL_GRPC_PORT']}",
        "NEMO_RL_OTEL_EXPORTER": "otlp,prometheus,file",
        "NEMO_RL_OTEL_PROMETHEUS_PORT": str(ports["METRICS_PORT"]),
    }
    cmd = [
        sys.executable,
        "examples/run_grpo.py",
        f"logger.log_dir={log_dir}",
        "logger.tqdm=false",
        f"grpo.max_steps={STEPS}",
        "grpo.num_prompts_per_step=4",
        "grpo.val_period=0",
        "checkpointing.enabled=false",
        "telemetry.span_groups=per_step",
        f"telemetry.project={PROJECT}",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return log_dir, proc


def test_up_prints_the_settings_to_use(stack):
    ports, _, out, _ = stack
    assert f"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:{ports['ROTEL_GRPC_PORT']}" in out
    assert f"http://127.0.0.1:{ports['PHOENIX_PORT']}" in out
    assert "NEMO_RL_OTEL_EXPORTER=otlp,prometheus,file" in out


def test_the_run_arrives_in_phoenix_whole_under_its_project(stack, run):
    ports, *_ = stack
    log_dir, _ = run
    file_spans = read_spans(log_dir / "telemetry" / "traces.jsonl")
    deadline = time.monotonic() + 60
    while True:  # rotel batches; Phoenix writes asynchronously
        got = phoenix(ports["PHOENIX_PORT"], PROJECT, iteration=1)
        if len(got["spans"]) >= len(file_spans) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert PROJECT in got["projects"]
    assert len(got["spans"]) == len(file_spans)
    assert {s["span_id"] for s in got["spans"]} == {s.span_id for s in file_spans}
    step = got["step"]
    assert step is not None and step["attributes"]["rl.iteration"] == 1
    want = next(
        s for s in file_spans if s.name == "rl.grpo.step" and s.attributes["rl.iteration"] == 1
    )
    assert step["context"]["span_id"] == want.span_id


def test_the_runs_metrics_are_in_prometheus(stack, run):
    ports, *_ = stack
    deadline = time.monotonic() + 30
    while not (found := prometheus_series(ports["PROMETHEUS_PORT"], '{__name__=~"rl_.*"}')):
        assert time.monotonic() < deadline, "no rl_* series in Prometheus"
        time.sleep(1)
    names = {r["metric"]["__name__"] for r in found}
    assert {"rl_policy_loss", "rl_reward_mean", "rl_grad_norm"} <= names, sorted(names)
