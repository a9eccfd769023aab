"""``spanspec schema``: print or write the registry's JSON Schema."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from spanspec.checks.check import display
from spanspec.cli._common import UsageError, write_or_check

SCHEMA_FILE = "span_groups.schema.json"


def add(commands: Any) -> None:
    schema = commands.add_parser(
        "schema",
        help="print or write the registry's JSON Schema",
        description=f"Print the JSON Schema of the registry file, or write it to FILE (a folder "
        f"gets {SCHEMA_FILE}).",
    )
    schema.add_argument("--out", metavar="FILE", help="output file or folder")
    schema.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if the file is not up to date"
    )
    schema.set_defaults(run=run, format="text", level="information")


def run(args: argparse.Namespace) -> int:
    from spanspec.registry.schema import json_schema

    text = json.dumps(json_schema(), indent=2) + "\n"
    if args.out is None:
        if args.check:
            raise UsageError("--check needs --out FILE")
        sys.stdout.write(text)
        return 0
    out = Path(args.out)
    if out.is_dir():
        out = out / SCHEMA_FILE
    return write_or_check(out, text, args.check, f"spanspec schema --out {display(out)}")
