"""scripts/observability_stack.sh as a user runs it: `up` starts Phoenix, Prometheus, the metrics
bridge and rotel on 127.0.0.1; GRPO runs with the settings `up` prints (3 steps, 1 step, one
stopped by SIGTERM) and one with `exporter: otlp` alone (metrics through rotel and the bridge);
Phoenix holds every span of each run (read back with Phoenix's own client: the same span count
and ids as the run's traces.jsonl, the run's project, a step found by its iteration); Prometheus
holds each run's last loss and reward (equal to the last step the run's metrics.jsonl logged)
and a step count equal to the steps run, selected by the run's id, whichever way the metrics
came; rotel and the bridge refused nothing and dropped nothing; `status RUN_ID` says what the
stack holds of a run; `restart phoenix` in the middle of a run sent through rotel loses nothing,
and keeps the earlier runs' traces; `down` stops everything it started.

Needs the stack's venv (``bash scripts/observability_stack.sh install``, which scripts/test.sh
runs as root) and Debian's prometheus; skipped without them.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
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
SIGTERM_AFTER = 2  # steps logged before the SIGTERM run is stopped
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
        "BRIDGE_PORT": free_port(),
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
        for name in ("phoenix", "prometheus", "bridge", "rotel"):
            assert not (folder / f"{name}.pid").exists()


def through_rotel(ports: dict[str, int], **extra: str) -> dict[str, str]:
    """A run's environment with the settings `up` prints: spans to rotel, metrics pushed to
    Prometheus, both to the run's files too."""
    return run_env(
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{ports['ROTEL_GRPC_PORT']}",
        NEMO_RL_OTEL_EXPORTER="otlp,prometheus,file",
        NEMO_RL_OTEL_PROMETHEUS_REMOTE_WRITE_URL=(
            f"http://127.0.0.1:{ports['PROMETHEUS_PORT']}/api/v1/write"
        ),
        **extra,
    )


def grpo(log_dir: Path, steps: int, project: str, env: dict[str, str], **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [*grpo_command(log_dir, steps, project), f"telemetry.run_id={project}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kw,
    )


def finish(proc: subprocess.Popen, want: int = 0) -> str:
    out, _ = proc.communicate(timeout=400)
    assert proc.returncode == want, out[-5000:]
    return out


@pytest.fixture(scope="module")
def runs(stack, tmp_path_factory):
    """The runs the stack receives, one after another (run id = project): `up`'s settings for
    STEPS steps and for one step, `exporter: otlp` alone, and `up`'s settings stopped by SIGTERM
    once SIGTERM_AFTER steps are logged. Returns {run id: (log_dir, output, steps logged)}."""
    ports, *_ = stack
    out = {}
    for run_id, steps, env in (
        ("stack-test-run", STEPS, through_rotel(ports)),
        ("stack-one-step", 1, through_rotel(ports)),
        (
            "stack-otlp-only",
            STEPS,
            run_env(
                OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{ports['ROTEL_GRPC_PORT']}",
                NEMO_RL_OTEL_EXPORTER="otlp",
            ),
        ),
    ):
        log_dir = tmp_path_factory.mktemp(run_id)
        out[run_id] = (log_dir, finish(grpo(log_dir, steps, run_id, env)), steps)
    log_dir = tmp_path_factory.mktemp("sigterm")
    proc = grpo(log_dir, 40, "stack-sigterm", through_rotel(ports))
    logged = log_dir / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while len(_rows(logged, "train/loss")) < SIGTERM_AFTER:
        assert proc.poll() is None, proc.communicate()[0][-5000:]
        assert time.monotonic() < deadline, "the SIGTERM run logged no steps"
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out["stack-sigterm"] = (log_dir, finish(proc, 143), len(_rows(logged, "train/loss")))
    return out


def _rows(path: Path, key: str) -> list[dict]:
    """The logger's metrics.jsonl rows that carry ``key``."""
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if key in r]


def _last_value(port: int, query: str, want: float | None = None) -> list[dict]:
    """The last sample of every series ``query`` selects, over the last 15 minutes; with
    ``want``, asked again for up to 30 s until one series' last value is ``want`` (what goes
    through rotel and the bridge arrives a batch later)."""
    deadline = time.monotonic() + 30
    while True:
        found = [
            {**r["metric"], "value": float(r["values"][-1][1])}
            for r in prometheus_series(port, query)
        ]
        if want is None or time.monotonic() > deadline:
            return found
        if any(f["value"] == pytest.approx(want, rel=1e-9) for f in found):
            return found
        time.sleep(0.5)


def test_up_prints_the_settings_to_use(stack):
    ports, _, out, _ = stack
    assert f"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:{ports['ROTEL_GRPC_PORT']}" in out
    assert f"http://127.0.0.1:{ports['PHOENIX_PORT']}" in out
    assert "NEMO_RL_OTEL_EXPORTER=otlp,prometheus,file" in out
    write_url = f"http://127.0.0.1:{ports['PROMETHEUS_PORT']}/api/v1/write"
    assert f"NEMO_RL_OTEL_PROMETHEUS_REMOTE_WRITE_URL={write_url}" in out
    # Every example query names a series a GRPO run creates.
    queries = out[out.index("Queries for") : out.index("What the stack holds")]
    names = set(re.findall(r"\brl_\w+(?=[{\[])", queries))  # series, not the rl_run_id label
    assert names == {
        "rl_policy_loss",
        "rl_reward_mean",
        "rl_step_duration_seconds_count",
        "rl_step_duration_seconds_bucket",
    }, names


def test_every_run_arrives_in_phoenix_whole_under_its_project(stack, runs):
    ports, *_ = stack
    for run_id, (log_dir, out, _) in runs.items():
        if run_id == "stack-otlp-only":  # no file: the run's own count of what it exported
            exported = int(re.search(r"(\d+) spans \((\d+) exported, 0 dropped\)", out)[2])
            got = wait_for_phoenix(ports["PHOENIX_PORT"], run_id, exported, iteration=1)
            assert len(got["spans"]) == exported > 0
            file_spans = [s for s in got["spans"] if s["name"] == "rl.grpo.step"]
        else:
            file_spans = read_spans(log_dir / "telemetry" / "traces.jsonl")
            got = wait_for_phoenix(ports["PHOENIX_PORT"], run_id, len(file_spans), iteration=1)
            assert {s["span_id"] for s in got["spans"]} == {s.span_id for s in file_spans}
        assert run_id in got["projects"]
        step = got["step"]
        assert step is not None and step["attributes"]["rl.iteration"] == 1, run_id
        # The registry's constants: a step and its phases are CHAIN in Phoenix, not "unknown".
        assert step["span_kind"] == "CHAIN", (run_id, step["span_kind"])
        kinds = {s["name"]: s["span_kind"] for s in got["spans"]}
        assert kinds.get("rl.grpo.rollout", "CHAIN") == "CHAIN", run_id


@pytest.mark.parametrize(
    "run_id", ["stack-test-run", "stack-one-step", "stack-sigterm", "stack-otlp-only"]
)
def test_prometheus_holds_the_last_step_of_each_run(stack, runs, run_id):
    """Pushed by the run or, sent by OTLP, by the bridge, the final export included: the last
    loss and reward Prometheus holds for the run are the last the run logged, and its step count
    is the steps run, whatever other runs sent."""
    ports, *_ = stack
    log_dir, out, steps = runs[run_id]
    if run_id != "stack-sigterm":  # a run stopped by SIGTERM prints no cost line
        assert "metric points (0 dropped)" in out, out[-3000:]
    rows = _rows(log_dir / "metrics.jsonl", "train/loss")
    assert len(rows) == steps
    selector = f'{{rl_run_id="{run_id}"}}'
    for name, key in (("rl_policy_loss", "train/loss"), ("rl_reward_mean", "train/reward_mean")):
        found = _last_value(ports["PROMETHEUS_PORT"], name + selector, want=rows[-1][key])
        assert len(found) == 1, found  # one series: the driver's
        assert found[0]["rl_worker_group"] == "driver" and found[0]["rl_worker_rank"] == "0"
        assert found[0]["value"] == pytest.approx(rows[-1][key], rel=1e-9), name
    counts = _last_value(
        ports["PROMETHEUS_PORT"], "rl_step_duration_seconds_count" + selector, want=steps
    )
    assert [c["value"] for c in counts] == [steps]


def test_the_otlp_run_delivers_every_span_and_metric_to_rotel(runs):
    _, out, _ = runs["stack-otlp-only"]
    assert "does not take" not in out, out[-3000:]
    assert re.search(r"spans \(\d+ exported, 0 dropped\)", out), out[-3000:]
    assert re.search(r"[1-9]\d* metric points \(0 dropped\)", out), out[-3000:]


def test_rotel_and_the_bridge_refused_and_dropped_nothing(stack, runs):
    _, _, _, folder = stack
    for name in ("rotel", "bridge"):
        log = (folder / f"{name}.log").read_text()
        assert not re.search(r"ERROR|WARN|dropping|refused|failed", log), (name, log[-3000:])


def test_status_says_what_the_stack_holds_of_a_run(stack, runs):
    _, env, _, _ = stack
    log_dir, _, steps = runs["stack-test-run"]
    spans = read_spans(log_dir / "telemetry" / "traces.jsonl")
    traces = len({s.trace_id for s in spans})
    done = subprocess.run(
        ["bash", "scripts/observability_stack.sh", "status", "stack-test-run"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert (
        f": {len(spans)} spans in {traces} traces (project stack-test-run), {steps} step spans"
        in out
    ), out
    assert f"steps: {steps} (rl_step_duration_seconds_count)" in out
    assert "rl_policy_loss" in out and "driver/0" in out
    assert "rotel       no refused or dropped batch since it started" in out
    assert "bridge      no refused or dropped batch since it started" in out
    listing = subprocess.run(
        ["bash", "scripts/observability_stack.sh", "status"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listing.returncode == 0 and "stack-one-step  project stack-one-step" in listing.stdout


def test_a_phoenix_restarted_mid_run_loses_nothing_through_rotel(stack, runs, tmp_path):
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
    assert PROJECT in got["projects"]  # the same data folder: the earlier runs are still there
