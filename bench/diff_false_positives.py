"""How often ``spanspec diff`` calls a phase slower when nothing changed: its false-positive rate.

    python bench/diff_false_positives.py RUN_A RUN_B ...      # every pair of identical runs
    python bench/diff_false_positives.py --split 6 LONG_RUN   # pairs of 6-step blocks of one run

With several runs of one config, every pair (both ways round) is compared; with ``--split B``,
one long run's steps (after ``--warmup``) are cut into blocks of B consecutive steps and every
pair of blocks is compared, the earlier as the baseline: the noise of one machine over time,
drift included. For each ``--threshold`` it prints how many comparisons ended in exit 1 (some
phase or the step called slower) and which rows were called slower most often.
"""

from __future__ import annotations

import argparse
import itertools
from collections import Counter

from spanspec.registry import load
from spanspec.traces.diff import RunSide, diff_runs, read_run


def pairs(args: argparse.Namespace) -> list[tuple[RunSide, RunSide]]:
    spec = load()
    sides = [read_run(path, spec) for path in args.runs]
    if args.split:
        (side,) = sides
        starts = range(args.warmup, side.steps - args.split + 1, args.split)
        parts = [side.part(i, i + args.split, path=f"{side.path}[{i}:]") for i in starts]
        return list(itertools.combinations(parts, 2))
    return list(itertools.permutations(sides, 2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="runs of one config (or one long run, --split)")
    parser.add_argument("--split", type=int, help="blocks of this many steps of one run")
    parser.add_argument("--warmup", type=int, default=1, help="steps left out (default 1)")
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--thresholds", default="5,10,15,20,25,30,40", help="percent, comma list")
    args = parser.parse_args()
    compared = pairs(args)
    print(f"{len(compared)} comparisons of runs with nothing changed, alpha {args.alpha}")
    print(f"{'threshold':>9} {'exit 1':>7} {'rate':>6}  rows called slower (count)")
    for pct in (float(t) for t in args.thresholds.split(",")):
        slower: Counter[str] = Counter()
        failed = 0
        for base, cand in compared:
            result = diff_runs(
                base,
                cand,
                threshold=pct / 100,
                alpha=args.alpha,
                warmup=0 if args.split else args.warmup,
            )
            failed += result.exit_code
            slower.update(r.name for r in result.slower)
        rows = ", ".join(f"{name} ({n})" for name, n in slower.most_common(4))
        print(f"{pct:8.0f}% {failed:>4}/{len(compared):<3} {failed / len(compared):6.1%}  {rows}")


if __name__ == "__main__":
    main()
