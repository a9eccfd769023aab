"""generation.backend=vllm where vLLM is not installed: examples/run_grpo.py stops with one clear
message saying how to install it, exit code 2, before telemetry, Ray or any worker starts.

vLLM is hidden from the subprocess (``sys.modules["vllm"] = None`` makes ``import vllm`` fail, as
where it is absent), so this runs the same with or without vLLM in the venv.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HIDE_VLLM = (
    "import runpy, sys; sys.modules['vllm'] = None; sys.argv = sys.argv[1:]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)


def test_backend_vllm_without_vllm_exits_2_with_the_install_command(tmp_path):
    log_dir = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEMO_RL_OTEL_", "OTEL_"))}
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            HIDE_VLLM,
            "examples/run_grpo.py",
            "generation.backend=vllm",
            f"logger.log_dir={log_dir}",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, proc.stderr  # one problem: one line
    problems = [errors[0].removeprefix("error: invalid config: ")]
    assert problems[0].startswith("generation.backend:")
    assert "vllm is not installed" in problems[0] and "Value error" not in problems[0]
    assert "bash scripts/setup.sh --vllm" in problems[0]
    assert "Ray" not in proc.stderr + proc.stdout  # stopped before Ray started
    assert not log_dir.exists()  # nor telemetry, metrics or checkpoints
