"""Something that is not a regular file where a regular file is written (a FIFO, a folder, a
socket): refused in one line, at once, by the run's start (``init_telemetry_driver``, spanspec's
``export.setup``), by ``python -m nemo_rl.telemetry settings``, and by every CLI command that
writes a file (``report -o``, ``view --format chrome -o``, ``docs --out``); nothing blocks.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("NEMO_RL_OTEL_", "OTEL_"))}


def _plant(path: Path, kind: str) -> str:
    """Put a ``kind`` at ``path``; return how the message names it."""
    if kind == "fifo":
        os.mkfifo(path)
        return "a FIFO (named pipe)"
    if kind == "folder":
        path.mkdir()
        return "a folder"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()
    return "a socket"


def _run(args: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        args, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=60, **kw
    )


def _one_line_refusal(r: subprocess.CompletedProcess, path: Path, what: str) -> None:
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    assert "Traceback" not in out, out
    (line,) = [ln for ln in r.stderr.splitlines() if what in ln]
    assert str(path) in line and "not a regular file" in line, line


START = textwrap.dedent(
    """
    import sys
    from nemo_rl.telemetry import RunIdentity, TelemetryConfig, init_telemetry_driver
    from spanspec.settings import SettingsError
    try:
        init_telemetry_driver(
            TelemetryConfig(exporter="file", file_dir=sys.argv[1]), RunIdentity("grpo", run_dir=sys.argv[1])
        )
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    """
)
SETUP = textwrap.dedent(
    """
    import sys
    from spanspec import export
    from spanspec.settings import SettingsError, load_settings
    try:
        export.setup(load_settings({"file_dir": sys.argv[1]}, env={}), register_atexit=False)
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    """
)


@pytest.mark.parametrize("kind", ["fifo", "folder", "socket"])
@pytest.mark.parametrize("signal_file", ["traces.jsonl", "metrics.jsonl"])
def test_run_start_and_settings_refuse_a_non_regular_telemetry_file(tmp_path, kind, signal_file):
    folder = tmp_path / "telemetry"
    folder.mkdir()
    what = _plant(folder / signal_file, kind)
    settings = _run(
        [sys.executable, "-m", "nemo_rl.telemetry", "settings", f"telemetry.file_dir={folder}"]
    )
    _one_line_refusal(settings, folder / signal_file, what)
    _one_line_refusal(_run([sys.executable, "-c", START, str(folder)]), folder / signal_file, what)
    _one_line_refusal(_run([sys.executable, "-c", SETUP, str(folder)]), folder / signal_file, what)


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_cli_outputs_refuse_a_non_regular_file(tmp_path, kind):
    from tests.unit.spanspec.fixtures.traces import grpo_steps, write_traces

    trace = write_traces(tmp_path / "run", grpo_steps(2))
    out = tmp_path / "out.html"
    what = _plant(out, kind)
    for args in (
        ["report", str(trace), "-o", str(out)],
        ["view", str(trace), "--format", "chrome", "-o", str(out)],
    ):
        r = _run([str(BIN / "spanspec"), *args])
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert str(out) in r.stderr and what in r.stderr, r.stderr
    docs = tmp_path / "docs"
    docs.mkdir()
    _plant(docs / "reference.md", kind)
    r = _run([str(BIN / "spanspec"), "docs", "--out", str(docs)])
    assert r.returncode == 2 and what in r.stderr and "Traceback" not in r.stderr, r.stderr
