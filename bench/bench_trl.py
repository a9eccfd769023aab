"""Telemetry overhead on a tiny TRL GRPO run: off vs per_step, alternating, side by side.

    python scripts/make_tiny_hf.py                  # runs/tiny_hf/tiny-math-llama, once
    python bench/bench_trl.py [--steps 20] [--repeats 3] [--model runs/tiny_hf/tiny-math-llama]

Each run is a fresh ``examples/trl/grpo.py`` process with the ``TelemetryCallback`` (telemetry is
decided once per process): ``off`` sets ``NEMO_RL_OTEL_ENABLED=false``, ``per_step`` exports
every per-step span to a file. ``step ms`` is the median, after the first step, of TRL's own
``step_time`` (its training_step calls: generation, scoring, loss and backward; logged the same
way whether telemetry is on or off); ``train s`` is TRL's ``train_runtime``; ``wall s`` the whole
process; ``cost %`` the run's own telemetry-cost line (the export threads' CPU as a share of the
process's CPU). The table shows the median run of each mode.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COST = re.compile(r"telemetry cost: .* = ([0-9.]+)% of the run's")
MODES = {
    "off": {"NEMO_RL_OTEL_ENABLED": "false"},
    "per_step": {
        "NEMO_RL_OTEL_ENABLED": "true",
        "NEMO_RL_OTEL_EXPORTER": "file",
        "NEMO_RL_OTEL_SPAN_GROUPS": "per_step",
    },
}


def run_job(mode: str, model: str, steps: int, out: Path) -> dict[str, float]:
    """Runs ``examples/trl/grpo.py`` once in ``mode``; returns its median step, train and wall
    seconds and its telemetry-cost share (NaN when off). Raises ``RuntimeError`` on failure."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEMO_RL_OTEL_", "NEMO_LENS_"))}
    cmd = [
        sys.executable,
        "examples/trl/grpo.py",
        "--model",
        model,
        "--output-dir",
        str(out),
        "--max-steps",
        str(steps),
    ]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env={**env, **MODES[mode]}, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} run failed:\n{proc.stderr[-3000:]}")
    log = json.loads((out / "log_history.json").read_text())
    step_times = [row["step_time"] for row in log if "step_time" in row][1:]  # step 1 warms up
    runtime = next(row["train_runtime"] for row in log if "train_runtime" in row)
    cost = COST.search(proc.stdout)
    share = float(cost.group(1)) if cost else math.nan
    return {"step": statistics.median(step_times), "train": runtime, "wall": wall, "cost": share}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", default="runs/tiny_hf/tiny-math-llama")
    args = parser.parse_args(argv)
    if not os.path.isdir(ROOT / args.model) and not os.path.isdir(args.model):
        print(
            f"error: {args.model}: no model folder (python scripts/make_tiny_hf.py)",
            file=sys.stderr,
        )
        return 2
    model = str(Path(args.model).resolve()) if os.path.isdir(args.model) else str(ROOT / args.model)
    results: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):  # alternating, so a noisy neighbour hits both modes
            for mode in MODES:
                results[mode].append(run_job(mode, model, args.steps, Path(tmp) / f"{mode}{i}"))
    print(f"TRL GRPO, {args.steps} steps, {args.repeats} runs per mode (median run)")
    print(f"{'mode':<10} {'step ms':>9} {'train s':>9} {'wall s':>8} {'cost %':>7}")
    medians = {}
    for mode, runs in results.items():
        m = {k: statistics.median(r[k] for r in runs) for k in ("step", "train", "wall", "cost")}
        medians[mode] = m
        cost = "-" if math.isnan(m["cost"]) else f"{m['cost']:.2f}"
        print(f"{mode:<10} {m['step'] * 1000:>9.1f} {m['train']:>9.2f} {m['wall']:>8.1f} {cost:>7}")
    ratio = medians["per_step"]["step"] / medians["off"]["step"]
    print(f"step-time ratio per_step / off: {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
