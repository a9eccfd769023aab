"""``spanspec check``: validate the registry, run configs and code (see :mod:`spanspec.checks.check`)."""

from __future__ import annotations

import argparse
from typing import Any

from spanspec.checks.check import check_files
from spanspec.cli._common import UsageError, add_common_options, emit
from spanspec.registry import RegistryNotFound


def add(commands: Any) -> None:

    check = commands.add_parser(
        "check",
        help="validate the registry, run configs and code",
        description="Validate the registry and any run configs with a 'telemetry:' block; with "
        "--code, check every span()/traced() name in Python sources against the registry.",
    )
    check.add_argument(
        "files",
        nargs="*",
        metavar="FILE",
        help="registry or run-config YAML files (default: the registry)",
    )
    check.add_argument(
        "--code",
        action="append",
        metavar="DIR",
        help="Python files or folders to scan (repeatable)",
    )
    check.add_argument(
        "--require-used",
        action="append",
        metavar="PATTERN",
        help="declared spans matching this glob (e.g. 'checkout.*') must be used in the code",
    )
    add_common_options(check)
    check.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.require_used and not args.code:
        raise UsageError("--require-used needs --code DIR")
    try:
        result = check_files(args.files, args.registry, args.code or (), args.require_used or ())
    except RegistryNotFound as exc:
        raise UsageError(str(exc)) from None
    return emit(result.findings, args, title="spanspec check", summary=result.summary)
