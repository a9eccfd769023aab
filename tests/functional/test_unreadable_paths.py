"""Paths a user cannot read are violations of that one path, in every command that reads files,
and the readable ones next to them are still checked.

Root reads everything, so as root each command runs as ``nobody`` (``setpriv``); anyone else
runs it as themselves. The fixtures live in a folder ``nobody`` may enter.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def _as_user(args: list[str]) -> list[str]:
    return [*NOBODY, *args] if os.geteuid() == 0 else args


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        pytest.skip("as root this needs setpriv (util-linux) to drop to nobody")
    probe = subprocess.run(
        _as_user([sys.executable, "-c", "import spanspec, nemo_rl"]),
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        pytest.skip(f"nobody cannot import the checkout here: {probe.stderr.strip()[-200:]}")
    base = Path(tempfile.mkdtemp(prefix="spanspec-unreadable-"))
    base.chmod(0o755)
    try:
        (base / "code" / "ok").mkdir(parents=True)
        (base / "code" / "ok" / "m.py").write_text(
            'import spanspec\n\nwith spanspec.span("rl.nope.x"):\n    pass\n'
        )
        (base / "code" / "locked").mkdir()
        (base / "code" / "locked" / "n.py").write_text("x = 1\n")
        (base / "configs").mkdir()
        config = (ROOT / "examples" / "configs" / "grpo_tiny.yaml").read_text()
        (base / "configs" / "readable.yaml").write_text(config)
        (base / "configs" / "locked.yaml").write_text(config)
        (base / "locked_folder").mkdir()
        (base / "run" / "telemetry").mkdir(parents=True)
        (base / "run" / "telemetry" / "traces.jsonl").write_text("{}\n")
        (base / "runs" / "ok" / "telemetry").mkdir(parents=True)
        (base / "runs" / "ok" / "telemetry" / "traces.jsonl").write_text("not json\n{}\n")
        (base / "runs" / "locked").mkdir()
        for path in base.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        for locked in ("code/locked", "configs/locked.yaml", "locked_folder", "runs/locked"):
            (base / locked).chmod(0)
        (base / "run" / "telemetry" / "traces.jsonl").chmod(0)
        yield base
    finally:
        for path in [base, *base.rglob("*")]:
            path.chmod(stat.S_IRWXU)
        shutil.rmtree(base)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        _as_user(list(args)), cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def spanspec(*args: str) -> subprocess.CompletedProcess[str]:
    return run(str(BIN / "spanspec"), *args)


def test_an_unreadable_code_folder_is_a_violation_and_the_rest_is_still_scanned(folder):
    done = spanspec("check", "--code", str(folder / "code"))
    assert done.returncode == 1
    out = done.stdout
    assert f"{folder}/code/locked:0:0: violation: file.unreadable: cannot read folder: " in out
    assert "Permission denied" in out
    # the readable file next to it was checked
    assert f"{folder}/code/ok/m.py:3:20: violation: code.undeclared_span" in out


def test_an_unreadable_config_among_readable_ones(folder):
    done = spanspec("check", str(folder / "configs"))
    assert done.returncode == 1
    assert (
        f"{folder}/configs/locked.yaml:0:0: violation: file.unreadable: cannot read file: "
        "Permission denied" in done.stdout
    )
    assert f"{folder}/configs/readable.yaml:" in done.stdout  # still read and checked
    assert "1 violation(s)" in done.stdout


@pytest.mark.parametrize("target", ["locked_folder", "configs/locked.yaml"])
def test_an_unreadable_path_given_alone_fails_the_check(folder, target):
    done = spanspec("check", str(folder / target))
    assert done.returncode == 1
    assert f"{folder}/{target}:0:0: violation: file.unreadable: cannot read " in done.stdout
    assert "Permission denied" in done.stdout


@pytest.mark.parametrize("command", ["live-check", "view"])
def test_an_unreadable_trace_file_is_a_violation(folder, command):
    done = spanspec(command, str(folder / "run"))
    assert done.returncode == 1
    trace = folder / "run" / "telemetry" / "traces.jsonl"
    assert f"{trace}:0:0: violation: file.unreadable: cannot read file: Permission denied" in (
        done.stdout + done.stderr
    )


@pytest.mark.parametrize("command", ["live-check", "view"])
def test_an_unlistable_run_folder_below_is_a_violation_and_the_rest_is_read(folder, command):
    done = spanspec(command, str(folder / "runs"))
    assert done.returncode == 1
    out = done.stdout + done.stderr
    assert f"{folder}/runs/locked:0:0: violation: file.unreadable: cannot read folder: " in out
    # the readable run next to it was read: its bad first line is reported
    assert f"{folder}/runs/ok/telemetry/traces.jsonl:1:1: violation: otlp.invalid_json" in out


def test_a_folder_without_traces_says_how_to_get_them(folder):
    done = spanspec("live-check", str(folder / "configs"))
    assert done.returncode == 1
    assert (
        f"{folder}/configs:0:0: violation: file.no_traces: no traces.jsonl in this folder or "
        "below it, and no spanspec-run.json saying where they went; run with "
        "telemetry.exporter=file" in done.stdout
    )


def test_report_on_an_unreadable_trace_file_is_a_one_line_error(folder):
    done = spanspec("report", str(folder / "run"), "-o", str(folder / "report.html"))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"spanspec report: error: {folder}/run/telemetry/traces.jsonl:0:0: violation: "
        "file.unreadable: cannot read file: Permission denied"
    ]
    assert not (folder / "report.html").exists()


@pytest.mark.parametrize(
    "command",
    [
        ["examples/run_grpo.py", "--config"],
        ["-m", "nemo_rl.telemetry", "settings"],
    ],
)
def test_an_unreadable_run_config_is_a_one_line_error(folder, command):
    config = folder / "configs" / "locked.yaml"
    done = run(str(BIN / "python"), *command, str(config))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines[-1].endswith(f"{config}: cannot read file: Permission denied"), done.stderr
    assert len(lines) == 1, done.stderr
