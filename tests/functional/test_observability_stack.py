"""scripts/observability_stack.sh as a user runs it: `up` starts Phoenix, Prometheus and rotel on
127.0.0.1; a GRPO run sent to rotel arrives in Phoenix whole (read back with Phoenix's own client:
the same span count and ids as the run's traces.jsonl, the run's project, a step found by its
iteration) and its metrics in Prometheus; `restart phoenix` in the middle of a run sent through
rotel loses nothing, and keeps the earlier runs' traces; `down` stops everything it started.

Needs the stack's venv (``bash scripts/observability_stack.sh install``, which scripts/test.sh
runs as root) and Debian's prometheus; skipped without them.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from spanspec.traces.otlp_json import read_spans
from tests.backends import (
    STACK_VENV,
    grpo_command,
    prometheus_series,
    run_env,
    wait_for_phoenix,
)
from tests.otlp_receiver import free_port

ROOT = Path(__file__).resolve().parents[2]
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
RESTART_STEPS = 15  # ~6 s of steps on an idle machine: Phoenix is stopped after the first ones
RESTART_PROJECT = "stack-restart-run"


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


def through_rotel(ports: dict[str, int]) -> dict[str, str]:
    """A run's environment with the settings `up` prints: spans to rotel, metrics to Prometheus."""
    return run_env(
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{ports['ROTEL_GRPC_PORT']}",
        NEMO_RL_OTEL_EXPORTER="otlp,prometheus,file",
        NEMO_RL_OTEL_PROMETHEUS_PORT=str(ports["METRICS_PORT"]),
    )


@pytest.fixture(scope="module")
def run(stack, tmp_path_factory):
    ports, *_ = stack
    log_dir = tmp_path_factory.mktemp("run")
    proc = subprocess.run(
        grpo_command(log_dir, STEPS, PROJECT),
        cwd=ROOT,
        env=through_rotel(ports),
        capture_output=True,
        text=True,
        timeout=400,
    )
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
    got = wait_for_phoenix(ports["PHOENIX_PORT"], PROJECT, len(file_spans), iteration=1)
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


def test_a_phoenix_restarted_mid_run_loses_nothing_through_rotel(stack, run, tmp_path):
    """`restart phoenix` (stop, start on the same ports and data folder) once a run sent through
    rotel has exported its first spans: rotel holds the rest while Phoenix is away and delivers
    them once it is back, so Phoenix ends with every span of the file; the earlier run's traces
    survive the restart. (bench/bench_backend_restart.py measures the same with a crash, and the
    spans lost sending straight to Phoenix.)"""
    ports, env, _, _ = stack
    log_dir = tmp_path / "run"
    traces = log_dir / "telemetry" / "traces.jsonl"
    with open(tmp_path / "run.log", "w") as log:
        proc = subprocess.Popen(
            grpo_command(log_dir, RESTART_STEPS, RESTART_PROJECT),
            cwd=ROOT,
            env=through_rotel(ports),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 300
            while not (traces.exists() and traces.stat().st_size > 0):
                assert proc.poll() is None, "the run ended before writing any spans"
                assert time.monotonic() < deadline, "no spans in the run's traces.jsonl"
                time.sleep(0.2)
            assert proc.poll() is None, "the run ended before Phoenix was restarted"
            restart = subprocess.run(
                ["bash", "scripts/observability_stack.sh", "restart", "phoenix"],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert restart.returncode == 0, restart.stdout + restart.stderr
            assert "stopped phoenix" in restart.stdout
            assert "phoenix running again" in restart.stdout
            assert proc.wait(timeout=400) == 0, (tmp_path / "run.log").read_text()[-5000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    file_ids = {s.span_id for s in read_spans(traces)}
    got = wait_for_phoenix(ports["PHOENIX_PORT"], RESTART_PROJECT, len(file_ids), timeout=90)
    assert len(got["spans"]) == len(file_ids)
    assert {s["span_id"] for s in got["spans"]} == file_ids
    assert PROJECT in got["projects"]  # the same data folder: the earlier run is still there
