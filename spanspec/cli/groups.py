"""``spanspec groups EXPR``: what a group expression enables (see :mod:`spanspec.checks.explain`)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from spanspec.checks.check import display
from spanspec.checks.explain import explain_groups
from spanspec.cli._common import add_common_options, emit, require_spec
from spanspec.findings import SpecError


def add(commands: Any) -> None:
    groups = commands.add_parser(
        "groups",
        help="what a group expression enables",
        description="Print the groups and spans a group expression enables, and which preset or "
        "group turned each on. Start the expression with '--' if it begins with '-'.",
    )
    groups.add_argument("expression", metavar="EXPR", help="e.g. per_step,-generation")
    add_common_options(groups)
    groups.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    spec, findings = require_spec(args)
    if spec is None:
        return emit(findings, args, title="spanspec groups")
    try:
        report = explain_groups(spec, args.expression)
    except SpecError as exc:
        return emit(list(exc.findings), args, title="spanspec groups")
    if args.format == "json":
        sys.stdout.write(json.dumps(report.to_dict(display(spec.source)), indent=2) + "\n")
        return 0
    sys.stdout.write(report.format_table() + "\n")
    if not args.expression.strip():
        print(
            "spanspec groups: the expression is empty: nothing is enabled (the default is "
            "'default'; 'all' enables every group)",
            file=sys.stderr,
        )
    return 0
