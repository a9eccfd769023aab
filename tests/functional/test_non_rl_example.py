"""spanspec without nemo_rl: the pipeline example (examples/pipeline/) with its own registry, run
as a user runs it, then read with the CLI as a user reads it.

The example's registry declares its own conventions (env prefix PIPELINE_OTEL_, step span
pipeline.batch numbered by pipeline.batch.index, run attribute pipeline.run_id, lanes by
pipeline.process.role and .index). Every reader must take them from there: nothing of nemo_rl's
may show up in what the run wrote, and a nemo_rl that cannot be imported must not matter.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "pipeline"
REGISTRY = EXAMPLE / "registry.yaml"
SPANSPEC = [sys.executable, "-m", "spanspec.cli"]
BATCHES = 3


def _env(blocker: Path) -> dict[str, str]:
    """No telemetry variable of any program, and a nemo_rl that fails on import."""
    drop = ("NEMO_RL_OTEL_", "NEMO_LENS_", "OTEL_", "SPANSPEC_", "PIPELINE_", "PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PYTHONPATH"] = str(blocker)
    return env


@pytest.fixture(scope="module")
def blocker(tmp_path_factory) -> Path:
    """A folder whose nemo_rl package raises on import, put first on the path of every process."""
    folder = tmp_path_factory.mktemp("blocker")
    (folder / "nemo_rl").mkdir()
    (folder / "nemo_rl" / "__init__.py").write_text(
        "raise ImportError('the pipeline example imported nemo_rl')\n"
    )
    return folder


@pytest.fixture(scope="module")
def run(tmp_path_factory, blocker) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("pipeline") / "run"
    done = subprocess.run(
        [sys.executable, str(EXAMPLE / "run.py"), "--out", str(out), "--batches", str(BATCHES)],
        cwd=tmp_path_factory.mktemp("elsewhere"),
        env=_env(blocker),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    match = re.search(r"^run ([0-9a-f]+): ", done.stdout, re.MULTILINE)
    assert match, done.stdout
    assert f"where the step time went ({BATCHES} steps" in done.stdout
    return out, match[1]


def spanspec(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SPANSPEC, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _keys(node, keys: set[str]) -> None:
    """Every attribute key, span name and metric name in an OTLP/JSON document."""
    if isinstance(node, dict):
        if isinstance(node.get("key"), str):
            keys.add(node["key"])
        if isinstance(node.get("name"), str):
            keys.add(node["name"])
        for value in node.values():
            _keys(value, keys)
    elif isinstance(node, list):
        for value in node:
            _keys(value, keys)


def test_its_registry_and_code_check_clean():
    done = spanspec("check", str(REGISTRY), "--code", "examples/pipeline")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 violation(s)" in done.stdout


def test_nemo_rl_s_check_of_the_examples_leaves_its_folder_to_it():
    done = spanspec("check", "schemas/span_groups.yaml", "examples/configs", "--code", "examples")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "examples/pipeline:0:0: information: code.other_registry: not scanned: the folder has "
        "its own registry (examples/pipeline/registry.yaml)"
    ) in done.stdout


def test_view_draws_its_step_with_its_number(run):
    out, _ = run
    done = spanspec("view", str(out), "--registry", str(REGISTRY), "--step", "1", "--width", "10")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "pipeline.batch (pipeline.batch.index=1)" in lines[0]
    names = [line.split("[")[0].strip() for line in lines[1:]]
    assert names[0] == "pipeline.batch"
    assert {"pipeline.load", "pipeline.transform", "pipeline.write"} <= set(names)
    assert names.count("pipeline.worker.transform") == 2  # each worker's share, in the trace
    # By default the first step; a step that is not there names the ones that are.
    first = spanspec("view", str(out), "--registry", str(REGISTRY))
    assert first.returncode == 0 and "pipeline.batch.index=0" in first.stdout.splitlines()[0]
    missing = spanspec("view", str(out), "--registry", str(REGISTRY), "--step", "9")
    assert missing.returncode == 1
    assert "no step span with pipeline.batch.index=9; steps in the files: 0, 1, 2" in (
        missing.stderr
    )


def test_the_readers_find_the_registry_the_run_named(run, blocker):
    out, run_id = run
    # No --registry, no $SPANSPEC_REGISTRY, no nemo_rl: the traces name their registry.
    done = spanspec("view", str(out), "--step", "2", "--run-id", run_id, env=_env(blocker))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pipeline.batch (pipeline.batch.index=2)" in done.stdout.splitlines()[0]
    wrong = spanspec("view", str(out), "--run-id", "nope", env=_env(blocker))
    assert wrong.returncode == 2
    assert "no spans of run 'nope' (pipeline.run_id)" in wrong.stderr


def test_live_check_is_clean(run):
    out, _ = run
    done = spanspec("live-check", str(out), "--registry", str(REGISTRY), "--format", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    body = json.loads(done.stdout)
    assert body["summary"]["violations"] == 0
    assert not [f for f in body["findings"] if f["level"] != "information"]
    assert body["summary"]["groups_source"] == "resource attribute spanspec.groups"
    seen = {c["group"]: c["state"] for c in body["summary"]["coverage"]}
    assert seen == {"run": "off", "batch": "on", "io": "on", "compute": "on"}


def test_the_report_names_its_run_and_lanes(run, tmp_path):
    out, run_id = run
    page = tmp_path / "report.html"
    done = spanspec("report", str(out), "--registry", str(REGISTRY), "-o", str(page))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"run {run_id}, {BATCHES} steps" in done.stdout and "3 processes" in done.stdout
    text = page.read_text()
    data = json.loads(re.search(r'id="report-data">(.*?)</script>', text, re.DOTALL)[1])
    assert data["run_id"] == run_id and data["runs"] == [run_id]
    assert data["lanes"] == ["main", "worker 1", "worker 2"]
    assert data["header"] == {"pipeline.name": "word-stats", "pipeline.source": "synthetic"}
    assert [s["iteration"] for s in data["steps"]] == list(range(BATCHES))
    assert data["breakdown"]["steps"] == BATCHES


def test_nothing_it_wrote_carries_an_rl_key(run):
    out, _ = run
    files = sorted(p for p in out.rglob("*") if p.is_file())
    assert {p.name for p in files} >= {"traces.jsonl", "metrics.jsonl", "batch_0000.jsonl"}
    keys: set[str] = set()
    for path in files:
        for line in path.read_text().splitlines():
            _keys(json.loads(line), keys)
    assert "pipeline.run_id" in keys and "pipeline.batch" in keys  # the walk sees them
    offending = sorted(k for k in keys if k.startswith("rl.") or "nemo" in k.lower())
    assert not offending, offending
    text = "\n".join(p.read_text() for p in files)
    assert '"rl.' not in text and "NEMO_" not in text
