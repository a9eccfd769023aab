"""``spanspec report PATH -o report.html``: a run's steps as one self-contained HTML page."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from spanspec.cli._common import UsageError, add_registry_option, reader_spec


def add(commands: Any) -> None:
    report = commands.add_parser(
        "report",
        help="write a run's step report: one self-contained HTML file",
        description="Write one HTML file (no network needed; opens from disk) with the step-time "
        "breakdown, every step by bucket, a step picker, the picked step's waterfall with one "
        "lane per process, span attributes on click, and the slowest steps.",
    )
    report.add_argument(
        "path",
        metavar="PATH",
        help="a traces.jsonl, the folder holding it, or a run folder (its spanspec-run.json, "
        "if any, says where its traces went)",
    )
    report.add_argument("-o", "--out", metavar="FILE", default="report.html", help="output file")
    report.add_argument("--run-id", metavar="ID", help="the run to show (default: the latest)")
    report.add_argument(
        "--baseline",
        metavar="OTHER",
        help="another run to compare with, as spanspec diff does: the page adds the comparison "
        "table with verdicts and both runs' step times on one chart",
    )
    report.add_argument(
        "--metrics",
        metavar="FILE",
        help="the run's logged scalars, JSON lines of {step, key: value} (default: the "
        "metrics.jsonl of step rows in PATH, next to the traces, or in the run folder the "
        "traces' spanspec-run.json names); their curves are drawn",
    )
    report.add_argument(
        "--straggler-threshold",
        metavar="SHARE",
        type=_share,
        default=None,
        help="a lane slowest of its group by more than this share over the median in at least "
        "half of the steps is a straggler (default 0.1)",
    )
    add_registry_option(report, traces=True)
    report.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from spanspec.files import RUN_POINTER
    from spanspec.traces.curves import METRICS_FILE
    from spanspec.traces.report import ReportError, write_report

    def spec(spans: Any) -> Any:
        return reader_spec(args, (s.resource for s in spans))

    try:
        data = write_report(
            args.path,
            args.out,
            spec=spec,
            run_id=args.run_id,
            baseline=args.baseline,
            metrics_file=args.metrics,
            straggler_threshold=args.straggler_threshold,
        )
    except ReportError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"{args.out}: cannot write: {exc.strerror or exc}") from None
    print(
        f"wrote {args.out}: run {data['run_id'] or '-'}, {data['steps_total']} steps, "
        f"{data['span_count']} spans, {len(data['lanes'])} processes, "
        f"{len(data['curves'])} metric curves"
        + (f"; against baseline run {data['baseline']['run_id'] or '-'}" if args.baseline else "")
    )
    for line in data["ranks"]["stragglers"]:
        print(line)
    if data["metrics_file"] is None:  # say how to get the curves, rather than leave them out
        print(
            f"spanspec report: no metric curves: no {METRICS_FILE} of step rows in {args.path}, "
            f"next to the traces or in a run folder their {RUN_POINTER} names; --metrics FILE "
            "draws a run's logged scalars",
            file=sys.stderr,
        )
    return 0


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number > 0 (e.g. 0.1), got {text!r}")
    return value
