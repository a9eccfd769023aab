"""The logger's TensorBoard, MLflow and W&B backends in a real GRPO run, read back with each
tool's own reader: TensorBoard's ``EventAccumulator``, ``MlflowClient`` (a file store) and the
W&B offline run folder. Each holds the run's reward and loss at the steps ``metrics.jsonl`` logged
them; the MLflow run holds the flattened config as params and the run id and trace file as
tags, and its id is on the run's OpenTelemetry resource. A backend that cannot start stops the
run before anything starts: one line naming the key and the fix, exit code 2.

Skipped where the extras are not installed (``pip install -e '.[tensorboard,mlflow,wandb]'``).
"""

from __future__ import annotations

import importlib.util
import json
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
    pytest.mark.skipif(
        any(importlib.util.find_spec(m) is None for m in ("tensorboard", "mlflow", "wandb")),
        reason="needs the tensorboard, mlflow and wandb extras",
    ),
]
STEPS = 3
RUN_ID = "backends-run"


def grpo(log_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "examples/run_grpo.py",
            f"logger.log_dir={log_dir}",
            "logger.tqdm=false",
            f"grpo.max_steps={STEPS}",
            "grpo.num_prompts_per_step=4",
            "grpo.val_period=2",
            "checkpointing.enabled=false",
            "telemetry.span_groups=per_step",
            f"telemetry.run_id={RUN_ID}",
            *overrides,
        ],
        cwd=ROOT,
        env=run_env(),
        capture_output=True,
        text=True,
        timeout=400,
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("backends")
    proc = grpo(
        log_dir,
        "logger.tensorboard.enabled=true",
        "logger.mlflow.enabled=true",
        "logger.mlflow.experiment=grpo-test",
        "logger.mlflow.run_name=three-steps",
        "logger.wandb.enabled=true",
        "logger.wandb.mode=offline",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    rows = [json.loads(line) for line in (log_dir / "metrics.jsonl").read_text().splitlines()]
    return log_dir, proc.stdout, rows


def logged(rows: list[dict], key: str) -> dict[int, float]:
    """``{step: value}`` of ``key`` in the logger's metrics.jsonl."""
    return {r["step"]: r[key] for r in rows if r.get(key) is not None}


def test_tensorboard_holds_the_scalars_at_their_steps(run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log_dir, out, rows = run
    assert f"tensorboard: {log_dir / 'tensorboard'}" in out
    events = EventAccumulator(str(log_dir / "tensorboard"))
    events.Reload()
    for key in ("train/reward_mean", "train/loss", "validation/accuracy", "timing/rl.grpo.step"):
        got = {e.step: e.value for e in events.Scalars(key)}
        want = logged(rows, key)
        assert want and got.keys() == want.keys(), key
        assert all(got[s] == pytest.approx(want[s], rel=1e-6) for s in want), key


def test_mlflow_holds_params_metrics_and_tags_and_its_id_is_on_the_resource(run, monkeypatch):
    from mlflow import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 asks readers to opt in too

    log_dir, out, rows = run
    client = MlflowClient((log_dir / "mlruns").as_uri())
    (experiment,) = [e for e in client.search_experiments() if e.name == "grpo-test"]
    (found,) = client.search_runs([experiment.experiment_id])
    assert found.info.run_name == "three-steps" and found.info.status == "FINISHED"
    assert f"mlflow: run {found.info.run_id} in experiment" in out
    for key in ("train/reward_mean", "train/loss"):
        history = client.get_metric_history(found.info.run_id, key)
        want = logged(rows, key)
        assert {m.step: m.value for m in history} == pytest.approx(want), key
    params = found.data.params
    assert params["grpo.max_steps"] == str(STEPS) and params["logger.mlflow.enabled"] == "True"
    trace_file = log_dir / "telemetry" / "traces.jsonl"
    assert found.data.tags["rl.run_id"] == RUN_ID
    assert found.data.tags["rl.trace_file"] == str(trace_file)
    resource = _resource(trace_file)
    assert resource["mlflow.run_id"] == found.info.run_id
    assert resource["rl.run_id"] == RUN_ID


def test_wandb_offline_writes_its_run_folder_and_its_id_is_on_the_resource(run):
    log_dir, out, _ = run
    (folder,) = (log_dir / "wandb").glob("offline-run-*")
    run_id = folder.name.rsplit("-", 1)[1]
    assert list(folder.glob(f"run-{run_id}.wandb")), sorted(p.name for p in folder.iterdir())
    assert f"wandb: run {run_id} in " in out
    assert _resource(log_dir / "telemetry" / "traces.jsonl")["wandb.run_id"] == run_id


def _resource(trace_file: Path) -> dict:
    first = json.loads(trace_file.read_text().splitlines()[0])
    attrs = first["resourceSpans"][0]["resource"]["attributes"]
    return {a["key"]: next(iter(a["value"].values())) for a in attrs}


def test_an_mlflow_server_that_does_not_answer_stops_the_run_before_it_starts(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    proc = grpo(tmp_path, "logger.mlflow.enabled=true", f"logger.mlflow.tracking_uri={url}")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith(
        f"error: logger.mlflow.tracking_uri: no MLflow server answers at {url}"
    )
    assert not (tmp_path / "metrics.jsonl").exists()  # nothing started


@pytest.mark.parametrize(
    ("module", "key", "extra"),
    [
        ("tensorboard", "tensorboard", "tensorboard"),
        ("mlflow", "mlflow", "mlflow"),
        ("wandb", "wandb", "wandb"),
    ],
)
def test_a_backend_that_is_not_installed_is_one_line_with_the_install_command(
    tmp_path, module, key, extra
):
    """The package hidden from the run (as if not installed): the config check says so."""
    code = (
        f"import sys; sys.modules[{module!r}] = None; sys.argv = ['run_grpo.py'] + sys.argv[1:]; "
        "import runpy; runpy.run_path('examples/run_grpo.py', run_name='__main__')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, f"logger.log_dir={tmp_path}", f"logger.{key}.enabled=true"],
        cwd=ROOT,
        env=run_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert f"logger.{key}: " in lines[0] and f"pip install 'nemo-rl-otel[{extra}]'" in lines[0]


def test_the_report_draws_the_runs_curves_at_their_steps(run, tmp_path):
    """``spanspec report`` on the run folder: the logger's curves from metrics.jsonl, each logged
    step linked to the step span of the same number (both count from 1)."""
    log_dir, _, rows = run
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "spanspec.cli",
            "report",
            str(log_dir),
            "-o",
            str(tmp_path / "r.html"),
        ],
        cwd=ROOT,
        env=run_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "metric curves" in proc.stdout
    from spanspec.traces.report import write_report

    data = write_report(log_dir, tmp_path / "again.html")
    curves = {c["key"]: dict(map(tuple, c["points"])) for c in data["curves"]}
    for key in ("train/reward_mean", "train/loss", "validation/accuracy"):
        assert curves[key] == pytest.approx(logged(rows, key)), key
    assert data["curve_step_offset"] == 0  # logged step n is step span n
    assert [s["iteration"] for s in data["steps"]] == list(range(1, STEPS + 1))
