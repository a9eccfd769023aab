"""``spanspec view FILE``: draw one trace as a text waterfall."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from spanspec.cli._common import trace_files


def add(commands: Any) -> None:
    view = commands.add_parser(
        "view",
        help="draw one trace as a text waterfall",
        description="Draw one trace of an OTLP-JSON trace file as a waterfall; by default the "
        "first trace whose root is a step span (rl.*.step).",
    )
    view.add_argument("file", metavar="FILE")
    pick = view.add_mutually_exclusive_group()
    pick.add_argument("--trace", metavar="ID", help="trace id (a unique prefix is enough)")
    pick.add_argument("--step", type=int, metavar="N", help="the step with rl.iteration N")
    pick.add_argument("--list", action="store_true", help="list the traces instead")
    view.add_argument("--width", type=positive, default=40, help="bar width in characters")
    view.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from spanspec.otlp_json import read_traces
    from spanspec.view import render_waterfall, select_trace, traces

    read = read_traces(trace_files([args.file]))
    for f in read.findings:
        if f.level != "information" or f.id == "otlp.truncated_line":
            print(f, file=sys.stderr)
    summaries = traces(read.spans)
    if args.list:
        for t in summaries:
            print(
                f"{t.trace_id}  {(t.end - t.start) / 1e6:10.1f} ms  {len(t.spans):5d} spans  "
                f"{', '.join(t.root_names)}"
            )
        return 0 if summaries else 1
    try:
        chosen = select_trace(summaries, trace_id=args.trace, step=args.step)
    except LookupError as exc:
        print(f"spanspec view: {exc}", file=sys.stderr)
        return 1
    bar = "█"
    try:
        bar.encode(sys.stdout.encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        bar = "#"
    print(render_waterfall(chosen, width=args.width, bar=bar))
    return 0


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {value}")
    return value
