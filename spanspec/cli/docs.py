"""``spanspec docs --out DIR``: write (or ``--check``) the Markdown reference."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from spanspec.checks.check import display
from spanspec.cli._common import add_common_options, emit, require_spec, source_name, write_or_check


def add(commands: Any) -> None:
    docs = commands.add_parser(
        "docs",
        help="generate the Markdown reference",
        description="Write DIR/reference.md (groups, presets, attributes, spans, metrics).",
    )
    docs.add_argument("--out", required=True, metavar="DIR", help="output folder")
    docs.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if the file is not up to date"
    )
    docs.add_argument(
        "--code",
        action="append",
        metavar="PATH",
        help="Python sources to scan: the spans-per-algorithm table then shows what they emit",
    )
    add_common_options(docs)
    docs.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from spanspec.checks.docs import REFERENCE_FILE, render_reference

    spec, findings = require_spec(args)
    if spec is None:
        return emit(findings, args, title="spanspec docs")
    emitted = None
    if args.code:
        from spanspec.checks.check import other_programs
        from spanspec.checks.codecheck import emitted_names
        from spanspec.checks.codescan import scan_paths

        others, _ = other_programs(args.code, spec.source)
        scan = scan_paths(args.code, exclude=others)
        if any(f.level != "information" for f in scan.findings):  # a file it could not read
            return emit(scan.findings, args, title="spanspec docs")
        emitted = emitted_names(spec, scan)
    out = Path(args.out)
    # The folder is left out: the file is the same wherever it is written (the --check test).
    command = " ".join(
        [
            "spanspec docs --out <this folder>",
            *(f"--code {display(c)}" for c in args.code or ()),
            *([f"--registry {display(args.registry)}"] if args.registry else []),
        ]
    )
    text = render_reference(spec, source_name(spec.source), emitted, command)
    return write_or_check(
        out / REFERENCE_FILE,
        text,
        args.check,
        command.replace("<this folder>", display(out)),
    )
