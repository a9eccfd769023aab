"""Sync vs async GRPO on the same tiny job: step time and wall time, side by side.

    python bench/bench_async.py [--steps 20] [--repeats 3] [--worker-cpus 1]

Each run is a fresh ``examples/run_grpo.py`` or ``examples/run_async_grpo.py`` process with the
same model, data, batch (32 prompts x 8), optimiser and seed, telemetry off, every worker given
``--worker-cpus`` cores (sync: the policy worker and the generation worker; async: the policy
worker and the trajectory collector). Sync runs its phases one after another; async samples the
next step's groups in the collector while the policy trains on the previous ones
(``max_trajectory_age_steps=1``), so its step is about the longer of the two, not their sum.

``step ms`` is the median of the loop's own per-step timings in ``metrics.jsonl`` (step 1, which
warms the workers up, left out); ``train s`` is the sum of all step times; ``wall s`` is the whole
process, Ray start-up included. Modes alternate so drift favours neither.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = {
    "sync": ("run_grpo.py", "grpo"),
    "async": ("run_async_grpo.py", "async_grpo"),
}


def run_once(mode: str, steps: int, worker_cpus: float, folder: Path) -> tuple[float, float, float]:
    """Runs the job once; returns ``(median step s, sum of step s, wall s)``. Raises on failure."""
    script, section = MODES[mode]
    log_dir = folder / f"{mode}_{time.monotonic_ns()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEMO_RL_OTEL_", "NEMO_LENS_"))}
    cmd = [
        sys.executable,
        f"examples/{script}",
        f"logger.log_dir={log_dir}",
        "logger.tqdm=false",
        f"{section}.max_steps={steps}",
        f"{section}.val_period=0",
        f"{section}.val_at_start=false",
        "checkpointing.enabled=false",
        f"cluster.worker_num_cpus={worker_cpus}",
        "telemetry.enabled=false",
    ]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} run failed:\n{proc.stderr[-3000:]}")
    key = f"timing/rl.{section}.step"
    rows = [json.loads(line) for line in (log_dir / "metrics.jsonl").read_text().splitlines()]
    steps_s = [r[key] for r in rows if key in r]
    return statistics.median(steps_s[1:] or steps_s), sum(steps_s), wall


def main(argv: list[str] | None = None) -> int:
    """Prints the table and the ratios; returns 0."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--worker-cpus", type=float, default=1.0)
    args = parser.parse_args(argv)
    results: dict[str, list[tuple[float, float, float]]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory(prefix="bench_async_") as tmp:
        for i in range(args.repeats):
            order = list(MODES) if i % 2 == 0 else list(reversed(MODES))
            for mode in order:
                r = run_once(mode, args.steps, args.worker_cpus, Path(tmp))
                results[mode].append(r)
                print(
                    f"  run {i + 1}/{args.repeats} {mode:6} step {1000 * r[0]:7.1f} ms"
                    f"  train {r[1]:6.1f} s  wall {r[2]:6.1f} s",
                    flush=True,
                )
    print(
        f"\n{'mode':6} {'runs':>4} {'step ms (min)':>14} {'step ms (median)':>17} "
        f"{'train s (min)':>14} {'wall s (min)':>13}"
    )
    best: dict[str, tuple[float, float, float]] = {}
    for mode, rs in results.items():
        best[mode] = (min(r[0] for r in rs), min(r[1] for r in rs), min(r[2] for r in rs))
        print(
            f"{mode:6} {len(rs):4d} {1000 * best[mode][0]:14.1f} "
            f"{1000 * statistics.median(r[0] for r in rs):17.1f} "
            f"{best[mode][1]:14.1f} {best[mode][2]:13.1f}"
        )
    pairs = [a[0] / s[0] for a, s in zip(results["async"], results["sync"], strict=True)]
    print(
        f"\nasync / sync: step time {best['async'][0] / best['sync'][0]:.3f} (min), "
        f"{statistics.median(pairs):.3f} (median of {len(pairs)} pairs); "
        f"train time {best['async'][1] / best['sync'][1]:.3f}; "
        f"wall time {best['async'][2] / best['sync'][2]:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
