"""What the backend tests (and bench/bench_backend_restart.py) share: a run's environment free of
outside telemetry settings, a short GRPO run's command line, the spans a Phoenix server holds (read
with Phoenix's own client, in the observability stack's venv), and the series a Prometheus server
scraped, through its HTTP API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

__all__ = [
    "STACK_VENV",
    "grpo_command",
    "phoenix_query",
    "prometheus_series",
    "run_env",
    "wait_for_phoenix",
]

ROOT = Path(__file__).resolve().parents[1]
STACK_VENV = Path(os.environ.get("STACK_VENV", ROOT / ".stack" / "venv"))


def run_env(**extra: str) -> dict[str, str]:
    """This process's environment without telemetry or Ray settings from outside, plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("NEMO_RL_OTEL_", "NEMO_LENS_", "OTEL_", "RAY_ADDRESS"))
    }
    return {**env, **extra}


def prometheus_series(port: int, selector: str, window: str = "15m") -> list[dict]:
    """Every series ``selector`` matches on the Prometheus server on ``127.0.0.1:port`` over the
    last ``window``, each ``{"metric": labels, "values": [[time, "value"], ...]}``.

    A range, not an instant query: once a run ends its targets go down and Prometheus marks their
    series stale, so an instant query finds nothing, while the scraped samples are all kept.
    """
    query = f"{selector}[{window}]"
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(url, timeout=5) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    return body["data"]["result"]


def grpo_command(log_dir: Path, steps: int, project: str) -> list[str]:
    """``examples/run_grpo.py`` for a short run (4 prompts a step, per_step spans, no validation,
    no checkpoints) writing to ``log_dir``, its telemetry under ``project``."""
    return [
        sys.executable,
        "examples/run_grpo.py",
        f"logger.log_dir={log_dir}",
        "logger.tqdm=false",
        f"grpo.max_steps={steps}",
        "grpo.num_prompts_per_step=4",
        "grpo.val_period=0",
        "checkpointing.enabled=false",
        "telemetry.span_groups=per_step",
        f"telemetry.project={project}",
    ]


def phoenix_query(port: int, project: str, iteration: int | None = None) -> dict:
    """What the Phoenix server on ``127.0.0.1:port`` holds for ``project``: tests/phoenix_query.py
    run in the stack's venv (``{"projects", "spans", "step"}``, see there)."""
    args = [str(STACK_VENV / "bin" / "python"), "tests/phoenix_query.py"]
    args += [f"http://127.0.0.1:{port}", project]
    args += [str(iteration)] if iteration is not None else []
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def wait_for_phoenix(
    port: int,
    project: str,
    want: int,
    timeout: float = 60,
    settle: float | None = None,
    iteration: int | None = None,
) -> dict:
    """:func:`phoenix_query` every second until Phoenix holds ``want`` spans of ``project`` (rotel
    batches and retries; Phoenix writes asynchronously), ``timeout`` seconds passed, or (with
    ``settle``) the count stayed the same that many seconds; returns the last answer."""
    start = time.monotonic()
    last, since = -1, start
    while True:
        got = phoenix_query(port, project, iteration)
        now = time.monotonic()
        if len(got["spans"]) != last:
            last, since = len(got["spans"]), now
        if last >= want or now - start > timeout or (settle is not None and now - since > settle):
            return got
        time.sleep(1)
