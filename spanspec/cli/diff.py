"""``spanspec diff BASELINE CANDIDATE``: is the candidate run slower, phase by phase?

Exit codes: 0 when no phase (nor the whole step) is significantly slower beyond the threshold,
1 when one is, 2 for bad input (a missing run, no steps, runs of different programs or
algorithms without ``--force``), so CI can gate on it.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from spanspec.cli._common import UsageError, add_registry_option, reader_spec


def add(commands: Any) -> None:
    diff = commands.add_parser(
        "diff",
        help="compare two runs step by step: which phases got slower or faster",
        description="Compare a candidate run with a baseline, phase by phase over per-step "
        "durations: a phase is called slower or faster only when a two-sided Mann-Whitney U test "
        "says the difference is real (p < --alpha) and it exceeds --threshold. Exit 0: nothing "
        "slower; 1: something slower; 2: bad input.",
    )
    diff.add_argument("baseline", metavar="BASELINE", help="a run folder, telemetry folder or "
                      "traces.jsonl (several files below a folder count as one run)")  # fmt: skip
    diff.add_argument("candidate", metavar="CANDIDATE", help="the run to judge, as BASELINE")
    diff.add_argument(
        "--threshold",
        type=_number(0.0, None),
        default=5.0,
        metavar="PCT",
        help="the smallest change of the median, in percent, that is called (default 5)",
    )
    diff.add_argument(
        "--alpha",
        type=_number(0.0, 1.0),
        default=0.05,
        help="the test's significance level (default 0.05)",
    )
    diff.add_argument(
        "--warmup",
        type=int,
        default=1,
        metavar="N",
        help="leave out the first N steps of each run (default 1: start-up)",
    )
    diff.add_argument(
        "--min-seconds",
        type=_number(0.0, None),
        default=0.001,
        metavar="S",
        help="the smallest change of the median, in seconds, that is called (default 0.001)",
    )
    diff.add_argument(
        "--min-share",
        type=_number(0.0, 100.0),
        default=1.0,
        metavar="PCT",
        help="the smallest change of the median, in percent of the baseline's median step, that "
        "is called (default 1: a phase far shorter than the step moves that much with the "
        "machine's load alone)",
    )
    diff.add_argument(
        "--last",
        type=int,
        default=5,
        metavar="N",
        help="metrics are shown as the mean of their last N points (default 5)",
    )
    diff.add_argument(
        "--force",
        action="store_true",
        help="compare runs whose step spans differ (different algorithms or programs)",
    )
    diff.add_argument("--format", choices=("text", "json"), default="text")
    add_registry_option(diff, traces=True)
    diff.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from spanspec.traces.diff import DiffError, diff_runs, read_run
    from spanspec.traces.otlp_json import TraceStream

    if args.warmup < 0 or args.last < 1:
        raise UsageError("--warmup must be >= 0 and --last >= 1")
    try:
        sides = []
        for path in (args.baseline, args.candidate):
            first = next(iter(TraceStream(path)), None)  # the registry the run recorded
            spec = reader_spec(args, [first.resource] if first is not None else [])
            sides.append(read_run(path, spec))
        result = diff_runs(
            *sides,
            threshold=args.threshold / 100,
            alpha=args.alpha,
            warmup=args.warmup,
            min_seconds=args.min_seconds,
            min_share=args.min_share / 100,
            last=args.last,
            force=args.force,
        )
    except DiffError as exc:
        raise UsageError(str(exc)) from None
    if args.format == "json":
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(result)
    return result.exit_code


def _number(low: float, high: float | None) -> Any:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not value >= low or (high is not None and not value <= high):
            bounds = f"between {low} and {high}" if high is not None else f">= {low}"
            raise argparse.ArgumentTypeError(f"expected a number {bounds}, got {text}")
        return value

    return parse
