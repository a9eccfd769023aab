"""One rank against two on the same global batch: GRPO's step time, each phase, and the
all-reduce's share, side by side in one run.

    python bench/bench_dp.py                 # 2 runs of 8 steps, about 3 min here
    python bench/bench_dp.py --steps 20 --prompts 32

Each run is ``examples/run_grpo.py`` as a user starts it (its own Ray, the file exporter, every
rank exporting), once with ``policy.num_workers=1 generation.num_workers=1`` and once with 2 and
2, everything else equal: the same prompts per step, samples per prompt, global mini-batch and
seed. The table is computed from the runs' own traces (``spanspec.traces.breakdown``): a worker
row is the mean over ranks, with the slowest rank beside it; the first step is left out (warm-up).

On a machine with fewer cores than ranks x threads, the second rank cannot make a step faster:
the ranks share the cores. What the trace shows instead is where the time goes when the work is
split: each rank's micro-batches take about half as long (half the rows), and the difference is
what the ranks spend in ``rl.worker.allreduce``, a fast rank waiting for the slower one.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from spanspec import load  # noqa: E402
from spanspec.traces.breakdown import Breakdown, PhaseTime, compute_breakdown  # noqa: E402
from spanspec.traces.otlp_json import read_spans  # noqa: E402
from tests.traces import clean_env  # noqa: E402

ALLREDUCE = "rl.worker.allreduce"


def run(ranks: int, args: argparse.Namespace, folder: Path) -> Breakdown:
    """Runs GRPO with ``ranks`` policy and generation ranks; returns the breakdown of its steps
    after the first."""
    command = [
        sys.executable,
        "examples/run_grpo.py",
        f"logger.log_dir={folder}",
        "logger.tqdm=false",
        f"grpo.max_steps={args.steps}",
        f"grpo.num_prompts_per_step={args.prompts}",
        "grpo.num_generations_per_prompt=8",
        "grpo.val_at_start=false",
        "grpo.val_period=0",
        "checkpointing.enabled=false",
        f"policy.num_workers={ranks}",
        f"generation.num_workers={ranks}",
        f"policy.train_global_batch_size={args.prompts * 4}",
        "cluster.worker_num_cpus=1",
        f"cluster.num_cpus={2 * ranks}",
        "telemetry.exporter=file",
        "telemetry.span_groups=per_step",
        "telemetry.export_strategy=all_ranks",
    ]
    done = subprocess.run(command, cwd=REPO, env=clean_env(), capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{ranks}-rank run failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    spans = read_spans([folder / "telemetry" / "traces.jsonl"])
    first = min(
        (s for s in spans if s.name == "rl.grpo.step"), key=lambda s: s.start_time_unix_nano
    )
    spans = [s for s in spans if s.trace_id != first.trace_id]  # warm-up: the first step
    return compute_breakdown(spans, load())


def _rows(b: Breakdown) -> dict[tuple[int, str], PhaseTime]:
    out: dict[tuple[int, str], PhaseTime] = {}
    for p in b.phases:
        out.setdefault((p.depth, p.name), p)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=8, help="steps per run (the first is warm-up)")
    parser.add_argument("--prompts", type=int, default=16, help="prompts per step (x 8 samples)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench_dp_") as tmp:
        one = run(1, args, Path(tmp) / "one")
        two = run(2, args, Path(tmp) / "two")
    a, b = _rows(one), _rows(two)
    print(
        f"\nGRPO, {args.prompts} prompts x 8 samples per step, {one.steps} steps after warm-up, "
        f"{os.cpu_count()} cores\n"
    )
    head = f"{'phase':42} {'1 rank s':>9} {'2 ranks s':>10} {'x':>6}  slowest of 2"
    print(head + "\n" + "-" * (len(head) + 14))
    print(
        f"{'step':42} {one.mean_step_s:9.3f} {two.mean_step_s:10.3f} "
        f"{two.mean_step_s / one.mean_step_s:6.2f}"
    )
    for key in dict.fromkeys([*b, *a]):  # two ranks have every phase, the all-reduce too
        p, q = a.get(key), b.get(key)
        label = "  " * key[0] + key[1]
        x = p.mean_s if p else 0.0
        y = q.mean_s if q else 0.0
        ratio = f"{y / x:6.2f}" if x > 0 else f"{'-':>6}"
        slowest = f"{q.slowest[0]} {q.slowest[1]:.3f}" if q and q.slowest else ""
        print(f"{label:42} {x:9.3f} {y:10.3f} {ratio}  {slowest}")
    reduce = next((p for p in two.phases if p.name == ALLREDUCE), None)
    if reduce is not None:
        update = next(p for p in two.phases if p.name == "rl.grpo.policy_update")
        print(
            f"\nall-reduce: {reduce.mean_s:.3f} s per step per rank = {reduce.share:.1%} of the "
            f"step, {reduce.mean_s / update.mean_s:.1%} of the policy update "
            f"(slowest rank {reduce.slowest[0] if reduce.slowest else '-'})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
