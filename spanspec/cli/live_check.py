"""``spanspec live-check FILE...``: hold emitted OTLP-JSON traces against the registry."""

from __future__ import annotations

import argparse
import fnmatch
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spanspec.checks.check import display, read_registry
from spanspec.cli._common import (
    UsageError,
    add_output_options,
    add_registry_option,
    emit,
    reader_registry,
)
from spanspec.findings import SpecError, did_you_mean
from spanspec.spec import Spec


def add(commands: Any) -> None:
    live = commands.add_parser(
        "live-check",
        help="hold emitted OTLP-JSON traces against the registry",
        description="Check the spans in OTLP-JSON trace files (the file exporter's traces.jsonl; a "
        "folder stands for its traces.jsonl) against the registry, and report coverage per group.",
    )
    live.add_argument("files", nargs="+", metavar="FILE")
    live.add_argument(
        "--groups",
        metavar="EXPR",
        help="the run's group expression (default: each process's spanspec.groups resource "
        "attribute, when present)",
    )
    live.add_argument(
        "--require-coverage",
        action="append",
        metavar="GROUP[=FRACTION]",
        help="a violation when less than FRACTION (default 1) of the group's declared spans "
        "were seen; GROUP may be a glob (repeatable)",
    )
    live.add_argument(
        "--all-scopes",
        action="store_true",
        help="also check spans of other instrumentation scopes than spanspec",
    )
    add_registry_option(live, traces=True)
    add_output_options(live)
    live.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from spanspec.traces.livecheck import live_check
    from spanspec.traces.otlp_json import TraceStream

    files = [display(p) if Path(p).exists() else p for p in args.files]
    # One pass, memory bounded by what the check keeps: the registry from the first span, then
    # every span streamed through the check.
    first = next(iter(TraceStream(files)), None)
    read = TraceStream(files)
    loaded = read_registry(reader_registry(args, [first.resource] if first is not None else []))
    spec = loaded.spec
    if spec is None:
        return emit(loaded.findings, args, title="spanspec live-check")
    required = coverage_requirements(spec, args.require_coverage or ())
    if args.groups is not None:
        try:
            spec.resolve(args.groups)
        except SpecError as exc:
            raise UsageError(f"--groups {args.groups!r}: {exc.findings[0].message}") from None
    report = live_check(
        spec, read, groups=args.groups, require_coverage=required, all_scopes=args.all_scopes
    )
    findings = read.findings + report.findings
    summary = {
        "registry": loaded.path,
        "files": read.files,
        "spans": report.spans_checked + report.spans_skipped,
        "spans_checked": report.spans_checked,
        "groups_source": report.groups_source or None,
        "enabled_groups": sorted(report.enabled_groups)
        if report.enabled_groups is not None
        else None,
        "coverage": [
            {
                "group": c.group,
                "state": c.state,
                "seen": list(c.seen),
                "declared": list(c.declared),
                "emitted": c.emitted,
            }
            for c in report.coverage
        ],
    }
    extra = ""
    if report.spans_checked + report.spans_skipped:
        extra = (
            f"\ncoverage ({report.spans_checked} spans checked in {len(read.files)} file(s)):\n"
            + report.coverage_table()
            + "\n"
        )
    if args.format != "json":  # the table says it once; not again as a line per group
        findings = [f for f in findings if (f.id, f.level) != ("live.coverage", "information")]
    return emit(findings, args, title="spanspec live-check", summary=summary, text_extra=extra)


def coverage_requirements(spec: Spec, values: Sequence[str]) -> dict[str, float]:
    """``--require-coverage GROUP[=FRACTION]`` values as group glob -> fraction.

    Raises:
        UsageError: for a group that matches none, or a fraction outside [0, 1].
    """
    required: dict[str, float] = {}
    for value in values:
        group, _, fraction = value.partition("=")
        group = group.strip()
        if not any(fnmatch.fnmatchcase(g, group) for g in spec.groups):
            raise UsageError(
                f"--require-coverage: unknown group '{group}'{did_you_mean(group, spec.groups)}; "
                f"groups: {', '.join(spec.groups)}"
            )
        try:
            number = float(fraction) if fraction else 1.0
        except ValueError:
            number = -1.0
        if not 0.0 <= number <= 1.0:
            raise UsageError(
                f"--require-coverage {value!r}: the fraction must be a number between 0 and 1"
            )
        required[group] = number
    return required
