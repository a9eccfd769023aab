"""MLflow as a trace backend: ``scripts/observability_stack.sh mlflow up`` starts a local
``mlflow server`` (127.0.0.1, SQLite store) and prints the settings; a short GRPO run with those
settings sends its traces over OTLP/HTTP and its logger's scalars through ``logger.mlflow``.
``mlflow.search_traces`` reads every step trace back with its parents intact, and the MLflow run
of the job carries the run id the traces carry. The metrics, which have no endpoint of their
own, stay in the run's file under ``exporter: auto`` (no wait on a default localhost:4317).
The test stops the server (``mlflow down``).

Skipped where the mlflow extra is not installed (``pip install -e '.[mlflow]'``).
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.backends import run_env
from tests.otlp_receiver import free_port

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.ray,
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("mlflow") is None, reason="needs the mlflow extra"),
]
STEPS = 3
RUN_ID = "mlflow-traces-run"
EXPERIMENT = "grpo-traces"


def stack(stack_dir: Path, port: int, *args: str) -> subprocess.CompletedProcess:
    env = run_env(
        STACK_DIR=str(stack_dir),
        MLFLOW_PORT=str(port),
        MLFLOW_EXPERIMENT=EXPERIMENT,
        MLFLOW_PYTHON=sys.executable,
    )
    return subprocess.run(
        ["bash", "scripts/observability_stack.sh", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    stack_dir = tmp_path_factory.mktemp("stack")
    port = free_port()
    up = stack(stack_dir, port, "mlflow", "up")
    try:
        assert up.returncode == 0, up.stdout + up.stderr + _log(stack_dir)
        settings = dict(re.findall(r"^  export (\w+)=(\S+)$", up.stdout, re.M))
        yield f"http://127.0.0.1:{port}", settings, up.stdout
    finally:
        down = stack(stack_dir, port, "mlflow", "down")
        assert down.returncode == 0, down.stderr
        assert not (stack_dir / "mlflow.pid").exists()


def _log(stack_dir: Path) -> str:
    log = stack_dir / "mlflow.log"
    return log.read_text()[-3000:] if log.exists() else ""


@pytest.fixture(scope="module")
def run(server, tmp_path_factory):
    url, settings, _ = server
    log_dir = tmp_path_factory.mktemp("run")
    proc = subprocess.run(
        [
            sys.executable,
            "examples/run_grpo.py",
            f"logger.log_dir={log_dir}",
            "logger.tqdm=false",
            f"grpo.max_steps={STEPS}",
            "grpo.num_prompts_per_step=4",
            "grpo.val_period=0",
            "checkpointing.enabled=false",
            "telemetry.span_groups=per_step",
            f"telemetry.run_id={RUN_ID}",
            "logger.mlflow.enabled=true",
            f"logger.mlflow.tracking_uri={url}",
            f"logger.mlflow.experiment={EXPERIMENT}",
        ],
        cwd=ROOT,
        env=run_env(**settings),
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return log_dir, proc.stdout


def test_up_prints_the_settings_for_traces_to_mlflow(server):
    url, settings, out = server
    assert settings["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] == f"{url}/v1/traces"
    assert settings["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"
    assert settings["OTEL_EXPORTER_OTLP_TRACES_HEADERS"].startswith("x-mlflow-experiment-id=")
    assert f"logger.mlflow.tracking_uri={url}" in out


def test_the_traces_go_to_mlflow_and_the_metrics_stay_in_their_file(run, server):
    url, _, _ = server
    log_dir, out = run
    (line,) = [x for x in out.splitlines() if x.startswith("telemetry: traces ->")]
    assert f"traces -> otlp http/protobuf {url}/v1/traces" in line
    assert f"metrics -> file {log_dir / 'telemetry' / 'metrics.jsonl'}" in line
    assert "4317" not in out
    assert (log_dir / "telemetry" / "metrics.jsonl").stat().st_size > 0


def test_search_traces_reads_every_step_with_its_parents_and_the_run_carries_the_run_id(
    run, server, monkeypatch
):
    import mlflow
    from mlflow import MlflowClient

    url, settings, _ = server
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    client = MlflowClient(url)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    assert settings["OTEL_EXPORTER_OTLP_TRACES_HEADERS"].endswith(experiment.experiment_id)
    traces = mlflow.search_traces(
        locations=[experiment.experiment_id], return_type="list", max_results=500
    )
    steps = {}
    job_run_ids = set()
    for trace in traces:
        spans = trace.data.spans
        ids = {s.span_id for s in spans}
        roots = [s for s in spans if s.parent_id is None]
        assert len(roots) == 1, [s.name for s in roots]
        # Parents intact: every other span's parent is a span of the same trace.
        assert all(s.parent_id in ids for s in spans if s.parent_id is not None)
        root = roots[0]
        if root.name == "rl.grpo.step":
            steps[root.attributes["rl.iteration"]] = {s.name for s in spans}
            # MLflow keeps no resource attributes: the step span itself carries the run id.
            job_run_ids.add(root.attributes.get("rl.run_id"))
    assert sorted(steps) == list(range(1, STEPS + 1))  # the same numbers as the logger's
    for names in steps.values():
        assert {"rl.grpo.rollout", "rl.grpo.policy_update"} <= names, names
    assert job_run_ids == {RUN_ID}
    # The MLflow run of the same job carries that run id, and the scalars at their steps.
    (found,) = client.search_runs([experiment.experiment_id])
    assert found.data.tags["rl.run_id"] == RUN_ID and found.info.status == "FINISHED"
    assert "rl.trace_file" not in found.data.tags  # the traces are in MLflow, not in a file
    loss = client.get_metric_history(found.info.run_id, "train/loss")
    assert sorted(m.step for m in loss) == list(range(1, STEPS + 1))
