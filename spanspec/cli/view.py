"""``spanspec view FILE``: draw one trace as a text waterfall, or write the traces in the Chrome
trace-event format (``--format chrome -o trace.json``) that Perfetto UI and chrome://tracing open."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from spanspec.cli._common import UsageError, add_registry_option, reader_spec
from spanspec.spec import Conventions


def add(commands: Any) -> None:
    view = commands.add_parser(
        "view",
        help="draw one trace as a text waterfall",
        description="Draw one trace of an OTLP-JSON trace file as a waterfall; by default the "
        "first trace whose root is a step span (the registry's conventions.step_span), of the "
        "latest run when the files hold several (as spanspec report). The links of its spans "
        "(work done in other traces) are listed below it.",
    )
    view.add_argument(
        "file",
        metavar="FILE",
        help="a traces.jsonl, the folder holding it, or a run folder (its spanspec-run.json, "
        "if any, says where its traces went)",
    )
    pick = view.add_mutually_exclusive_group()
    pick.add_argument("--trace", metavar="ID", help="trace id (a unique prefix is enough)")
    pick.add_argument(
        "--step",
        type=int,
        metavar="N",
        help="the step numbered N (by the registry's conventions.step_attribute)",
    )
    pick.add_argument("--list", action="store_true", help="list the traces instead")
    view.add_argument("--width", type=positive, default=40, help="bar width in characters")
    view.add_argument(
        "--format",
        choices=("text", "chrome"),
        default="text",
        help="text: a waterfall on stdout; chrome: the trace-event JSON of every trace (or of "
        "the one --trace/--step picks) for Perfetto UI or chrome://tracing, written to --out",
    )
    view.add_argument("-o", "--out", metavar="FILE", help="output file of --format chrome")
    view.add_argument(
        "--run-id",
        metavar="ID",
        help="only the spans of this run (by the registry's conventions.run_attribute)",
    )
    add_registry_option(view, traces=True)
    view.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from spanspec._text import safe_text, terminal_safe_span
    from spanspec.traces.otlp_json import TraceStream, read_traces, trace_files
    from spanspec.traces.view import (
        link_lines,
        pick_run,
        render_waterfall,
        select_trace,
        stream_traces,
        traces,
    )

    undrawable = 0

    def drawable(spans: Iterable[Any], terminal: bool) -> Iterator[Any]:
        """The spans with possible times; for the terminal, with control characters escaped."""
        nonlocal undrawable
        for s in spans:
            if not s.has_possible_times:
                undrawable += 1
            else:
                yield terminal_safe_span(s) if terminal else s

    # Bad input, exit 2: a folder with neither traces nor a run pointer, a pointer gone wrong.
    _, problems = trace_files(args.file)
    bad = next((f for f in problems if f.id in ("file.no_traces", "file.bad_pointer")), None)
    if bad is not None:
        raise UsageError(safe_text(str(bad)))
    # Drawing needs no registry; steps, runs and lanes are its conventions (neutral without one).
    needed = args.registry is not None or args.step is not None or args.run_id is not None
    first = next(iter(TraceStream(args.file)), None)
    spec = reader_spec(args, [first.resource] if first is not None else [], required=needed)
    conventions = spec.conventions if spec is not None else Conventions()
    key = conventions.run_attribute
    if args.run_id is not None and key is None:
        raise UsageError(
            f"--run-id: the registry ({spec.source if spec else '-'}) names no run attribute "
            "(conventions.run_attribute)"
        )
    if args.format == "chrome":  # every trace is written: read them all
        read = read_traces(args.file)
        findings, spans = read.findings, list(drawable(read.spans, terminal=False))
        if args.run_id is not None:
            spans = [s for s in spans if s.resource.get(key) == args.run_id]
        summaries = traces(spans, key)
    else:  # one pass, holding only the trace that may be drawn
        stream = TraceStream(args.file)
        merged = drawable(stream.merged(), terminal=True)
        spans = (
            merged
            if args.run_id is None
            else (s for s in merged if s.resource.get(key) == args.run_id)
        )
        summaries = stream_traces(
            spans, args.trace, args.step, conventions, keep_bodies=not args.list, run_key=key
        )
        findings = stream.findings
    for f in findings:
        if f.level != "information" or f.id == "otlp.truncated_line":
            print(safe_text(str(f)), file=sys.stderr)
    if undrawable:
        print(
            f"spanspec view: {undrawable} spans with impossible times (zero, negative, past "
            "2^64, or an end before the start) not drawn; spanspec live-check names them",
            file=sys.stderr,
        )
    if args.run_id is not None and not summaries:
        raise UsageError(f"no spans of run {args.run_id!r} ({key}) in {args.file}")
    if args.run_id is None and args.trace is None and not args.list:
        latest, runs = pick_run(summaries)
        if len(runs) > 1:  # the run spanspec report shows: the latest
            summaries = [t for t in summaries if t.run_id == latest]
            print(
                f"spanspec view: {len(runs)} runs in {safe_text(str(args.file))}; drawing the "
                f"latest, run {safe_text(str(latest))} (--run-id picks another: "
                f"{', '.join(safe_text(r) for r in runs[:-1][-5:])})",
                file=sys.stderr,
            )
        if args.format != "chrome" and any(t.partial for t in summaries):
            # its traces went by while an earlier-seen run was followed: read it alone
            again = drawable(TraceStream(args.file).merged(), terminal=True)
            summaries = stream_traces(
                (s for s in again if s.resource.get(key) == latest),
                None, args.step, conventions, run_key=key,
            )  # fmt: skip
    if args.format == "chrome":
        return _write_chrome(args, summaries, conventions)
    if args.list:
        for t in summaries:
            print(
                f"{t.trace_id}  {(t.end - t.start) / 1e6:10.1f} ms  {t.span_count:5d} spans  "
                f"{', '.join(t.root_names)}"
            )
        return 0 if summaries else 1
    try:
        chosen = select_trace(
            summaries, trace_id=args.trace, step=args.step, conventions=conventions
        )
    except LookupError as exc:
        print(f"spanspec view: {exc}", file=sys.stderr)
        return 1
    bar = "█"
    try:
        bar.encode(sys.stdout.encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        bar = "#"
    if chosen.span_count > len(chosen.spans):
        print(
            f"spanspec view: the trace has {chosen.span_count} spans; drawn: the "
            f"{len(chosen.spans)} that ended first, and its roots",
            file=sys.stderr,
        )
    run_id = safe_text(chosen.run_id) if chosen.run_id else None
    print(
        render_waterfall(chosen, width=args.width, bar=bar, conventions=conventions, run_id=run_id)
    )
    wanted = {(link.trace_id, link.span_id) for s in chosen.spans for link in s.links}
    if wanted:
        targets = {k: s for s in chosen.spans if (k := (s.trace_id, s.span_id)) in wanted}
        if len(targets) < len(wanted):  # linked work in other traces: one more pass finds it
            for s in drawable(TraceStream(args.file), terminal=True):
                if (k := (s.trace_id, s.span_id)) in wanted:
                    targets.setdefault(k, s)
        print("\n".join(link_lines(chosen, targets, conventions)))
    return 0


def _write_chrome(args: argparse.Namespace, summaries: list[Any], conventions: Conventions) -> int:
    import json

    from spanspec.traces.timeline import to_chrome_trace
    from spanspec.traces.view import select_trace

    if not args.out:
        raise UsageError("--format chrome needs -o FILE (e.g. -o trace.json)")
    if args.list:
        raise UsageError("--list draws text; leave out --format chrome")
    if not summaries:
        print("spanspec view: the files hold no spans", file=sys.stderr)
        return 1
    chosen = summaries
    if args.trace is not None or args.step is not None:
        try:
            chosen = [
                select_trace(
                    summaries, trace_id=args.trace, step=args.step, conventions=conventions
                )
            ]
        except LookupError as exc:
            print(f"spanspec view: {exc}", file=sys.stderr)
            return 1
    spans = [s for t in chosen for s in t.spans]
    trace = to_chrome_trace(spans, conventions)
    from spanspec.files import write_atomically

    try:  # a failed write (disk full) keeps the previous file, never a fragment
        write_atomically(args.out, json.dumps(trace, separators=(",", ":")))
    except OSError as exc:
        raise UsageError(f"{args.out}: cannot write: {exc.strerror or exc}") from None
    processes = sum(e["name"] == "process_name" for e in trace["traceEvents"])
    links = trace.get("otherData", {}).get("links", 0)
    print(
        f"wrote {args.out}: {len(spans)} spans of {len(chosen)} traces, {processes} processes"
        + (f", {links} links as flow arrows" if links else "")
        + " (open it in https://ui.perfetto.dev or chrome://tracing)"
    )
    return 0


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {value}")
    return value
